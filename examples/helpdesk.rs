//! A binary that builds its own command line on loopstack's: its name, version and
//! database (`helpdesk.db`, or `HELPDESK_DB`), loopstack's commands to operate the
//! runs, and a command of its own that opens a ticket.
//!
//! ```text
//! cargo run --example helpdesk -- --version
//! cargo run --example helpdesk -- open --subject "The printer is on fire"
//! cargo run --example helpdesk -- runs                   # the tickets' runs, from helpdesk.db
//! cargo run --example helpdesk -- signal RUN_ID close '{"resolution": "extinguished"}'
//! HELPDESK_DB=/tmp/other.db cargo run --example helpdesk -- runs
//! ```

use std::process::ExitCode;

use clap::Subcommand;
use loopstack::cli::App;
use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

/// A ticket, open until someone closes it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Ticket {
    subject: String,
    resolution: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Closing {
    resolution: String,
}

struct Tickets;

#[workflow(name = "ticket", input = Ticket)]
impl Tickets {
    #[transition(to = Open)]
    async fn file(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    /// Waits for someone to close it.
    #[transition(from = Open, to = End, wait)]
    async fn close(&self, ticket: &mut Ticket, _cx: &mut RunContext, closing: Closing) -> Result<()> {
        ticket.resolution = Some(closing.resolution);
        Ok(())
    }
}

/// The helpdesk's own commands, beside loopstack's.
#[derive(Debug, Subcommand)]
enum Helpdesk {
    /// Opens a ticket: starts its run and takes it to where it waits to be closed.
    Open {
        /// What the ticket is about.
        #[arg(long)]
        subject: String,
    },
}

async fn helpdesk(command: Helpdesk, cx: loopstack::cli::CommandContext) -> Result<(), BoxError> {
    match command {
        Helpdesk::Open { subject } => {
            if subject.trim().is_empty() {
                return Err("a ticket needs a subject".into());
            }
            let ticket = Ticket { subject, resolution: None };
            let run = cx.runtime.submit_by_name("ticket", serde_json::to_value(ticket)?).await?;
            cx.runtime.drive_by_name(run).await?;
            if cx.json {
                println!("{}", serde_json::json!({ "ticket": run }));
            } else {
                println!("ticket {run} opened");
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    App::new("helpdesk")
        .version(env!("CARGO_PKG_VERSION"))
        .about("The helpdesk: open tickets, and operate their runs.")
        .default_db("helpdesk.db")
        .db_env("HELPDESK_DB")
        .run_with(|runtime| runtime.register(Tickets), helpdesk)
        .await
}
