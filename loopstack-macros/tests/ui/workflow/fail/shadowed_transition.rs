use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = Ready)]
    async fn setup(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = End)]
    async fn respond(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = End)]
    #[guard(ready)]
    async fn execute_tools(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn ready(&self, state: &State) -> bool {
        state.ready
    }
}

fn main() {}
