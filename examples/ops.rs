//! A binary with loopstack's command line: a review workflow that waits for a
//! person's approval (or expires after a week), and a helpdesk agent whose
//! `reset_password` tool needs a person's approval, registered once, operated from
//! a shell. Offline: the agent's model is scripted, and reads the conversation, so
//! each command (a process of its own) picks up where the last left off.
//!
//! ```text
//! cargo run --example ops -- run review --input '{"text": "Hello"}' --wait   # waits at drafted for: approve
//! cargo run --example ops -- runs --status waiting
//! cargo run --example ops -- show RUN_ID                                     # the signal, its payload, the timer
//! cargo run --example ops -- signal RUN_ID approve '{"reviewer": "ada"}'
//! cargo run --example ops -- show RUN_ID --json
//! cargo run --example ops -- run desk --input '"Reset the passwords of ada and bob"' --wait
//! cargo run --example ops -- approve RUN_ID CALL_ID                          # one call; the other still waits
//! cargo run --example ops -- deny RUN_ID --reason "bob is on leave"          # the rest
//! ```

use std::process::ExitCode;

use loopstack::llm::{Agent, ChatRequest, ScriptedModel};
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

    /// Gives up on a draft nobody reviewed.
    #[transition(from = Drafted, to = End, after = "7d")]
    async fn expire(&self, _review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

/// Resets a user's password; a person approves each call.
#[tool(approve)]
async fn reset_password(
    /** The user's login */
    user: String,
) -> String {
    format!("the password of {user} is reset")
}

/// The helpdesk's offline model: it asks to reset the password of every user the
/// prompt names (of ada and bob), then answers with the results.
fn desk_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().expect("a conversation");
        let results: Vec<String> = last.tool_results_iter().map(|r| r.content.clone()).collect();
        if results.is_empty() {
            let prompt = last.text();
            let calls = ["ada", "bob"]
                .into_iter()
                .filter(|user| prompt.contains(user))
                .map(|user| ("reset_password", serde_json::json!({ "user": user })));
            return Ok(ScriptedModel::new().tool_calls_response(calls));
        }
        Ok(ScriptedModel::new().text_response(format!("Done: {}.", results.join("; "))))
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    loopstack::cli::main(|runtime| {
        let tools = ToolRegistry::new().with(ResetPassword).expect("one tool");
        let desk = Agent::new(desk_model(), "scripted-desk", tools).named("desk").expect("a valid name");
        runtime.register(Reviewing).register(desk)
    })
    .await
}
