use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

async fn fetch() {}

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn finish(&self, state: &mut State, _cx: &mut RunContext) -> Result<()> {
        let shared = std::rc::Rc::new(1);
        fetch().await;
        state.ready = *shared == 1;
        Ok(())
    }
}

fn main() {}
