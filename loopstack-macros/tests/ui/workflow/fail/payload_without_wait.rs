use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn approve(&self, _state: &mut State, _cx: &mut RunContext, _approved: bool) -> Result<()> {
        Ok(())
    }
}

fn main() {}
