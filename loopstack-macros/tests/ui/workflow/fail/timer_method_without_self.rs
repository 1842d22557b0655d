use std::time::Duration;

use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    minutes: u64,
}

struct Flow;

#[workflow]
impl Flow {
    #[transition(to = AwaitingHuman)]
    async fn setup(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = AwaitingHuman, to = End, after = escalation)]
    async fn expire(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn escalation(&self, state: &State) -> Duration {
        Duration::from_secs(state.minutes * 60)
    }
}

fn main() {}
