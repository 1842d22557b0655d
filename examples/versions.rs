//! Two deploys of one workflow in one binary, picked by `TRIAGE_BUILD` (`1`, or `2`
//! by default), with loopstack's command line: version 1 files a ticket and waits
//! at `filed` to be closed; version 2 renamed `filed` to `open`, waits there to
//! assign the ticket, and migrates the runs version 1 left waiting. Each command is a
//! process of its own, as each deploy is.
//!
//! ```text
//! TRIAGE_BUILD=1 cargo run --example versions -- run triage --input '{"title": "printer"}' --wait
//! cargo run --example versions -- runs                                  # the run, of v1, waits at filed
//! cargo run --example versions -- signal RUN_ID assign '{"to": "ada"}'  # migrated to v2, assigned, closed
//! cargo run --example versions -- show RUN_ID                           # v2; its history has `migrate v1 -> v2`
//! ```

use std::process::ExitCode;

/// The first deploy.
mod v1 {
    use loopstack::prelude::*;
    use serde::{Deserialize, Serialize};

    /// A ticket, as version 1 stores it.
    #[derive(Debug, Default, Serialize, Deserialize)]
    pub(crate) struct Ticket {
        pub(crate) title: String,
    }

    pub(crate) struct Triage;

    #[workflow(name = "triage")]
    impl Triage {
        #[transition(to = Filed)]
        async fn file(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        /// Closes the ticket.
        #[transition(from = Filed, to = End, wait)]
        async fn close(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }
    }
}

/// The second deploy: a ticket is assigned before it closes.
mod v2 {
    use loopstack::prelude::*;
    use serde::{Deserialize, Serialize};

    /// A ticket, as version 2 stores it.
    #[derive(Debug, Default, Serialize, Deserialize)]
    pub(crate) struct Ticket {
        pub(crate) title: String,
        pub(crate) assignee: Option<String>,
    }

    #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    pub(crate) struct Assignment {
        to: String,
    }

    pub(crate) struct Triage;

    #[workflow(name = "triage", version = 2)]
    impl Triage {
        #[transition(to = Open)]
        async fn file(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        /// Assigns the ticket to a person.
        #[transition(from = Open, to = Assigned, wait)]
        async fn assign(&self, ticket: &mut Ticket, _cx: &mut RunContext, assignment: Assignment) -> Result<()> {
            ticket.assignee = Some(assignment.to);
            Ok(())
        }

        #[transition(from = Assigned, to = End)]
        async fn close(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        /// A ticket version 1 left waiting at `filed` waits at `open`, unassigned.
        #[migrate(from = 1)]
        fn from_v1(old: super::v1::Ticket, place: super::v1::TriagePlace) -> (Ticket, TriagePlace) {
            use super::v1::TriagePlace as Old;
            let place = match place {
                Old::Start => TriagePlace::Start,
                Old::Filed => TriagePlace::Open,
                Old::End => TriagePlace::End,
            };
            (Ticket { title: old.title, assignee: None }, place)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let build = std::env::var("TRIAGE_BUILD").unwrap_or_default();
    loopstack::cli::main(move |runtime| match build.as_str() {
        "1" => runtime.register(v1::Triage),
        _ => runtime.register(v2::Triage),
    })
    .await
}
