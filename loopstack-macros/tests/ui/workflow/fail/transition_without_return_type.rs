use loopstack::{RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn finish(&self, state: &mut State, _cx: &mut RunContext) {
        state.ready = true;
    }
}

fn main() {}
