//! Timer delays from a method: of this impl block, of another, or a function.

use std::time::Duration;

use loopstack::{RunContext, Workflow, WorkflowExt, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Ticket {
    priority: u8,
}

struct Desk {
    escalation: Duration,
}

impl Desk {
    fn escalation(&self, _: &Ticket) -> Duration {
        self.escalation
    }
}

fn reminder(_: &Desk, ticket: &Ticket) -> Duration {
    Duration::from_secs(60 * u64::from(ticket.priority))
}

#[workflow]
impl Desk {
    #[transition(to = Open)]
    async fn open(&self, _: &mut Ticket, _: &mut RunContext) -> loopstack::Result {
        Ok(())
    }

    #[transition(from = Open, to = Open, after = reminder)]
    async fn remind(&self, _: &mut Ticket, _: &mut RunContext) -> loopstack::Result {
        Ok(())
    }

    #[transition(from = Open, to = End, after = Self::escalation)]
    async fn escalate(&self, _: &mut Ticket, _: &mut RunContext) -> loopstack::Result {
        Ok(())
    }

    #[transition(from = Open, to = End, after = Self::r#final)]
    async fn close(&self, _: &mut Ticket, _: &mut RunContext) -> loopstack::Result {
        Ok(())
    }

    fn r#final(&self, _: &Ticket) -> Duration {
        Duration::from_secs(86_400)
    }
}

fn main() {
    let desk = Desk { escalation: Duration::from_secs(1800) };
    let names: Vec<_> = desk.definition().transitions().iter().map(|t| t.after_fn).collect();
    assert_eq!(names, [None, Some("reminder"), Some("escalation"), Some("final")]);
    let ticket = Ticket { priority: 2 };
    assert_eq!(
        desk.timers(DeskPlace::Open, &ticket).unwrap(),
        [(1, Duration::from_secs(120)), (2, Duration::from_secs(1800)), (3, Duration::from_secs(86_400))]
    );
}
