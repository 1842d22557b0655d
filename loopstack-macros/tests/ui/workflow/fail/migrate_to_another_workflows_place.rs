use loopstack::{Result, RunContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

#[derive(serde::Deserialize)]
struct OldState {
    ready: bool,
}

struct Flow;

struct Other;

#[workflow]
impl Other {
    #[transition(to = Elsewhere)]
    async fn go(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Elsewhere, to = End)]
    async fn done(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

#[workflow(version = 2)]
impl Flow {
    #[transition(to = Ready)]
    async fn setup(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = End)]
    async fn finish(&self, _state: &mut State, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[migrate(from = 1)]
    fn from_v1(old: OldState) -> (State, OtherPlace) {
        (State { ready: old.ready }, OtherPlace::Elsewhere)
    }
}

fn main() {}
