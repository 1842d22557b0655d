use loopstack::workflow;

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    ready: bool,
}

struct Flow;

trait Steps {
    fn finish(&self);
}

#[workflow]
impl Steps for Flow {
    fn finish(&self) {}
}

fn main() {}
