use loopstack::{RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[derive(Debug)]
struct NotAnError;

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> std::result::Result<(), NotAnError> {
        Ok(())
    }
}

fn main() {}
