use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

impl Flow {
    /// Takes another type than the workflow's state.
    fn save_input(&self, _state: &mut String, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

#[workflow(on_create = Self::save_input)]
impl Flow {
    #[transition(to = End)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

fn main() {}
