use loopstack::{IntoSignal, Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

// Deserialize only: the workflow compiles, but its signal enum cannot be sent.
#[derive(serde::Deserialize, schemars::JsonSchema)]
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

/// What `Runtime::signal` asks of its signal.
fn send<W, S: IntoSignal<W>>(_workflow: &W, _signal: S) {}

fn main() {
    send(&Flow, FlowSignal::Approve(Approval { approved: true }));
}
