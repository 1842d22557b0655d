use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[derive(schemars::JsonSchema)]
struct Approval {
    approved: bool,
}

#[workflow]
impl Flow {
    #[transition(to = Ready)]
    async fn setup(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = End, wait)]
    async fn approve(&self, state: &mut State, _cx: &mut RunContext, approval: Approval) -> Result<()> {
        state.ready = approval.approved;
        Ok(())
    }
}

fn main() {}
