use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[guard(ready)]
    fn ready(&self, state: &State) -> bool {
        state.ready
    }
}

fn main() {}
