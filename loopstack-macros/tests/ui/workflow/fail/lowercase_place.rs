use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = prompt_executed)]
    async fn setup(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = prompt_executed, to = End)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

fn main() {}
