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

    #[transition(from = Ready, to = End, priorty = 1)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

fn use_it() {
    use loopstack::WorkflowExt;
    let _ = Flow.route(FlowPlace::Ready, &State::default());
    let _ = loopstack::Runtime::new().start(&Flow, State::default());
}

fn main() {
    use_it();
}
