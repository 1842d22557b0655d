use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = End)]
    #[guard(ready)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn ready(&self, state: &mut State) -> bool {
        state.ready
    }
}

fn main() {}
