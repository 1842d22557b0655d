use loopstack::{IntoSignal, Result, RunContext, workflow};

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

    #[transition(from = Ready, to = End, wait)]
    async fn approve(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

struct Other;

#[workflow]
impl Other {
    #[transition(to = Ready)]
    async fn setup(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = End, wait)]
    async fn approve(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

/// What `Runtime::signal` asks of its signal.
fn send<W, S: IntoSignal<W>>(_workflow: &W, _signal: S) {}

fn main() {
    send(&Other, FlowSignal::Approve);
}
