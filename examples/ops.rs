//! A binary with loopstack's command line: a review workflow that waits for a
//! person's approval, registered once, operated from a shell.
//!
//! ```text
//! cargo run --example ops -- run review --input '{"text": "Hello"}' --wait   # waits at drafted for: approve
//! cargo run --example ops -- runs --status waiting
//! cargo run --example ops -- signal RUN_ID approve '{"reviewer": "ada"}'
//! cargo run --example ops -- show RUN_ID --json
//! ```

use std::process::ExitCode;

use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

/// A draft waiting for a reviewer.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Review {
    text: String,
    approved_by: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Approval {
    reviewer: String,
}

struct Reviewing;

#[workflow(name = "review", input = Review)]
impl Reviewing {
    #[transition(to = Drafted)]
    async fn draft(&self, review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        review.text = review.text.trim().to_owned();
        Ok(())
    }

    /// Waits for a reviewer.
    #[transition(from = Drafted, to = End, wait)]
    async fn approve(&self, review: &mut Review, _cx: &mut RunContext, approval: Approval) -> Result<()> {
        if approval.reviewer.trim().is_empty() {
            return Err("the reviewer has no name".into());
        }
        review.approved_by = Some(approval.reviewer);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    loopstack::cli::main(|runtime| runtime.register(Reviewing)).await
}
