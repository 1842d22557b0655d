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
    #[guard(ready)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = Looping)]
    async fn spin(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Looping, to = Looping)]
    async fn again(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn ready(&self, state: &State) -> bool {
        state.ready
    }
}

fn main() {}
