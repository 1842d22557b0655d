use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = Ready)]
    #[transition(from = Ready, to = End)]
    async fn step(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

fn main() {}
