use loopstack::{RunContext, Workflow, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Counter {
    n: u32,
}

impl From<u32> for Counter {
    fn from(n: u32) -> Self {
        Self { n }
    }
}

struct CountDown<const N: usize>;

#[workflow(name = "count_down", input = u32, state = Counter, crate = ::loopstack)]
impl<const N: usize> CountDown<N> {
    #[transition(to = Counting)]
    async fn begin(&self, _: &mut Counter, _: &mut RunContext) -> loopstack::Result {
        Ok(())
    }

    #[transition(from = Counting, to = Counting, priority = -5)]
    #[guard(positive)]
    async fn tick(&self, state: &mut Counter, _: &mut RunContext) -> loopstack::Result {
        state.n -= 1;
        Ok(())
    }

    #[transition(from = Counting, to = End, priority = 5)]
    #[guard(zero)]
    async fn done(&self, _: &mut Counter, _: &mut RunContext) -> loopstack::Result {
        Ok(())
    }

    fn positive(&self, state: &Counter) -> bool {
        state.n > 0
    }

    fn zero(&self, state: &Counter) -> bool {
        state.n == 0
    }
}

fn main() {
    assert_eq!(CountDown::<3>.definition().name(), "count_down");
    assert_eq!(CountDown::<3>.init(4).n, 4);
    assert_eq!(CountDownPlace::Counting.to_string(), "counting");
}
