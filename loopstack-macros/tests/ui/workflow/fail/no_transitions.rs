use loopstack::workflow;

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

#[workflow]
impl Flow {
    fn helper(&self) {}
}

fn main() {}
