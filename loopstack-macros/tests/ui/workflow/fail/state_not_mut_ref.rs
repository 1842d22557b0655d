use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn finish(&self, state: State, _cx: &mut RunContext) -> Result<()> {
        let _ = state;
        Ok(())
    }
}

fn main() {}
