use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn finish(state: &mut State, _cx: &mut RunContext) -> Result<()> {
        state.ready = true;
        Ok(())
    }
}

fn main() {}
