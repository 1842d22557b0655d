//! An IT helpdesk of three agents in one binary, on loopstack's command line: a
//! triage agent asks the billing agent (an agent as a tool: a child run) and hands
//! the conversation to the password agent (a handoff: the same run), whose
//! `reset_password` tool waits for a person's approval, durably. Offline: the
//! scripted model reads the conversation, so a run goes on in a new process.
//!
//! ```text
//! cargo run --example helpdesk                        # the whole story, approved here
//! cargo run --example helpdesk -- ask "I'm ada@example.com and locked out"   # waits for approval
//! cargo run --example helpdesk -- approve RUN_ID      # another process approves; the run ends
//! cargo run --example helpdesk -- show RUN_ID         # its conversation, who said what
//! cargo run --example helpdesk -- open --subject "The printer is on fire"    # a ticket
//! cargo run --example helpdesk -- --version
//! HELPDESK_DB=/tmp/other.db cargo run --example helpdesk -- runs
//! ```
//!
//! The runs are kept in `helpdesk.db` (or `HELPDESK_DB`, or `--db`).

use std::process::ExitCode;

use clap::Subcommand;
use loopstack::cli::App;
use loopstack::llm::{
    Agent, AgentReply, AgentStatus, ChatRequest, ContentBlock, Message, ScriptedModel, ToolDecisions,
};
use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

const QUESTION: &str = "I'm ada@example.com. I'm locked out of my account, and was I charged twice in May?";
const TRIAGE: &str =
    "You are the helpdesk's first line. Ask billing about charges; hand password problems to the password agent.";
const PASSWORD: &str = "You reset passwords. Confirm the user's address before you reset.";
const BILLING: &str = "You answer billing questions from the charges on record.";

/// Resets a user's password; a person approves each call.
#[tool(approve)]
async fn reset_password(email: String) -> Result<String, ToolError> {
    Ok(format!("the password of {email} is reset; a link to set a new one is on its way"))
}

/// The charges on record for a user in a month.
#[tool]
async fn charges(email: String, month: String) -> Result<String, ToolError> {
    Ok(format!("{email} in {month}: one charge, 20 EUR on 1 {month} (a pending authorisation of 20 EUR was released)"))
}

/// The helpdesk's agents: triage, which the runs belong to, with billing as a tool
/// and a handoff to password; billing is registered too, for its child runs.
fn agents() -> Result<(Agent, Agent), BoxError> {
    let model = model();
    let billing =
        Agent::new(model.clone(), "scripted", ToolRegistry::new().with(Charges)?).system(BILLING).named("billing")?;
    let password = Agent::new(model.clone(), "scripted", ToolRegistry::new().with(ResetPassword)?)
        .system(PASSWORD)
        .named("password")?;
    let tools =
        ToolRegistry::new().with(billing.as_tool("billing", "Answers questions about charges and invoices.")?)?;
    let triage = Agent::new(model, "scripted", tools)
        .system(TRIAGE)
        .named("triage")?
        .handoff(&password, "Resets passwords and unlocks accounts.")?;
    Ok((triage, billing))
}

/// A stand-in for a real model that decides each turn from what it is sent: the
/// agent (by its system prompt), the question and the results so far. So it needs
/// no memory of its own, and a run resumed by another process goes on.
fn model() -> ScriptedModel {
    ScriptedModel::from_fn(|req: &ChatRequest| {
        let script = ScriptedModel::new();
        let first = req.messages.first().map(|m| m.text()).unwrap_or_default();
        let email = first.split_whitespace().find(|w| w.contains('@')).unwrap_or("you").trim_end_matches(['.', ',']);
        let result_of = |tool: &str| result_of(&req.messages, tool);
        Ok(match req.settings.system.as_deref() {
            Some(TRIAGE) => match result_of("billing") {
                None if first.contains("charged") => script.tool_call_response(
                    "billing",
                    serde_json::json!({"question": format!("Was {email} charged twice in May?")}),
                ),
                _ if first.contains("locked out") || first.contains("password") => {
                    script.tool_call_response("transfer_to_password", serde_json::json!({}))
                }
                Some(billing) => script.text_response(billing),
                None => script.text_response("I can help with passwords and billing: what do you need?"),
            },
            Some(PASSWORD) => match result_of("reset_password") {
                None => script.tool_call_response("reset_password", serde_json::json!({"email": email})),
                Some(reset) if reset.contains("denied") => script
                    .text_response(format!("I could not reset your password ({reset}). A colleague will call you.")),
                Some(reset) => {
                    let billing = result_of("billing").map(|b| format!(" About your bill: {b}")).unwrap_or_default();
                    script.text_response(format!("Done: {reset}.{billing}"))
                }
            },
            Some(BILLING) => match result_of("charges") {
                None => script.tool_call_response("charges", serde_json::json!({"email": email, "month": "May"})),
                Some(charges) => script.text_response(format!("No, only once: {charges}.")),
            },
            other => script.text_response(format!("(no script for the system prompt {other:?})")),
        })
    })
}

/// The result the conversation holds for the last call to `tool`.
fn result_of(messages: &[std::sync::Arc<Message>], tool: &str) -> Option<String> {
    let call = messages.iter().flat_map(|m| m.tool_uses()).filter(|c| c.name == tool).last()?;
    messages.iter().flat_map(|m| m.tool_results_iter()).find(|r| r.tool_use_id == call.id).map(|r| r.content.clone())
}

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
    /// Asks the helpdesk: the triage agent takes the question, and the run goes
    /// until it answers or waits (for approval of a password reset, say).
    Ask {
        /// The question, with the customer's email address.
        question: String,
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
        Helpdesk::Ask { question } => {
            if question.trim().is_empty() {
                return Err("ask a question".into());
            }
            let (triage, _) = agents()?;
            let reply = triage.ask(&cx.runtime, question).await?;
            if cx.json {
                let status = serde_json::to_value(&reply.status)?;
                let json = serde_json::json!({"run": reply.run_id, "agent": reply.agent, "status": status, "text": reply.text});
                println!("{json}");
            } else {
                transcript(&cx.runtime, &reply, 0).await?;
                standing(&reply, "cargo run --example helpdesk --");
            }
        }
    }
    Ok(())
}

/// Prints the run's conversation from message `from` on, and returns how many
/// messages it has.
async fn transcript(runtime: &Runtime, reply: &AgentReply, from: usize) -> Result<usize, BoxError> {
    let docs = runtime.store().documents(reply.run_id).await?;
    let messages: Vec<_> = docs.iter().filter(|d| d.doc_type == loopstack::llm::generate::MESSAGE_DOCUMENT).collect();
    for doc in &messages[from.min(messages.len())..] {
        let message: Message = doc.read()?;
        let agent = doc.metadata.get("agent");
        let who = agent.as_ref().and_then(|a| a.as_str()).unwrap_or("customer");
        for block in &message.content {
            match block {
                ContentBlock::Text { text } if message.role == loopstack::llm::Role::User => {
                    println!("customer: {text}")
                }
                ContentBlock::Text { text } => println!("[{who}] {text}"),
                ContentBlock::ToolUse(call) if call.name.starts_with(loopstack::llm::agent::TRANSFER_PREFIX) => {
                    println!(
                        "[{who}] hands the conversation to {}",
                        &call.name[loopstack::llm::agent::TRANSFER_PREFIX.len()..]
                    );
                }
                ContentBlock::ToolUse(call) => println!("[{who}] calls {} {}", call.name, call.input),
                ContentBlock::ToolResult(result) => println!("    -> {}", result.content),
                _ => {}
            }
        }
    }
    Ok(messages.len())
}

/// Says where the run stands, and what to run next when it waits.
fn standing(reply: &AgentReply, command: &str) {
    let run = reply.run_id;
    match &reply.status {
        AgentStatus::AwaitingApproval { calls } => {
            for call in calls {
                println!("run {run} waits for approval of {} {} (call {})", call.name, call.arguments, call.call_id);
            }
            println!("approve it with: {command} approve {run}");
            println!("or deny it with: {command} deny {run} --reason \"...\"");
        }
        AgentStatus::Completed => {
            println!("run {run} completed ({} turns, {} tokens)", reply.turns, reply.usage.all_tokens())
        }
        other => println!("run {run}: {other:?}"),
    }
}

/// `cargo run --example helpdesk` with no arguments: the question, the wait, an
/// approval as a person would give it, and the answer.
async fn story(runtime: &Runtime) -> Result<(), BoxError> {
    let (triage, _) = agents()?;
    let reply = triage.ask(runtime, QUESTION).await?;
    let shown = transcript(runtime, &reply, 0).await?;
    standing(&reply, "cargo run --example helpdesk --");
    let pending = triage.pending(runtime, reply.run_id).await?;
    if pending.is_empty() {
        return Err(format!("the run should wait for approval: {:?}", reply.status).into());
    }
    println!("-- approving, as `approve {}` from another process would", reply.run_id);
    let done = triage.decide(runtime, reply.run_id, ToolDecisions::approve_all(&pending)).await?;
    transcript(runtime, &done, shown).await?;
    standing(&done, "cargo run --example helpdesk --");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let app = App::new("helpdesk")
        .version(env!("CARGO_PKG_VERSION"))
        .about("The helpdesk: three agents, tickets, and the runs of both.")
        .default_db("helpdesk.db")
        .db_env("HELPDESK_DB");
    let register = |runtime: Runtime| {
        let (triage, billing) = agents().expect("the helpdesk's agents are well formed");
        runtime.register(Tickets).register(billing).register(triage)
    };
    if std::env::args_os().len() > 1 {
        return app.run_with(register, helpdesk).await;
    }
    let db = std::env::var("HELPDESK_DB").unwrap_or_else(|_| "helpdesk.db".into());
    let result = async {
        let runtime = register(Runtime::with_shared_store(loopstack::cli::open(&db).await?));
        story(&runtime).await
    };
    match result.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
