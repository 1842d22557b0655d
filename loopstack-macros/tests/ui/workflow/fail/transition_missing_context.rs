use loopstack::{Result, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = End)]
    async fn finish(&self, state: &mut State) -> Result<()> {
        state.ready = true;
        Ok(())
    }
}

fn main() {}
