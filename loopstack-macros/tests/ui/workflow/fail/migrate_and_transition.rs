use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

#[derive(serde::Deserialize)]
struct OldState {
    ready: bool,
}

struct Flow;

#[workflow(version = 2)]
impl Flow {
    #[transition(to = Ready)]
    async fn setup(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = End)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[migrate(from = 1)]
    #[transition(from = Ready, to = End)]
    fn from_v1(old: OldState) -> (State, FlowPlace) {
        (State { ready: old.ready }, FlowPlace::Ready)
    }
}

fn main() {}
