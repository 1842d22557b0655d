//! The workflows and the agent `examples/mcp_server` serves, shared with
//! `tests/mcp_server.rs`, which serves them over HTTP as well.

use loopstack::llm::{Agent, ChatRequest, ScriptedModel};
use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

/// Who to greet, and the greeting.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Greeting {
    /// The person's name.
    name: String,
    /// The greeting, once written.
    #[serde(default)]
    greeting: Option<String>,
}

/// The greeter: a workflow that ends at once.
struct Greeter;

/// Greets a person by name.
#[workflow(name = "greet", input = Greeting)]
impl Greeter {
    #[transition(to = End)]
    async fn write(&self, greeting: &mut Greeting, _cx: &mut RunContext) -> Result<()> {
        greeting.greeting = Some(format!("Hello, {}!", greeting.name));
        Ok(())
    }
}

/// A draft waiting for a reviewer.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Review {
    /// The text to review.
    text: String,
    /// Who approved it.
    #[serde(default)]
    approved_by: Option<String>,
}

/// A reviewer's approval.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Approval {
    /// The reviewer's name.
    reviewer: String,
}

/// The review: it waits for a reviewer's approval.
struct Reviewing;

/// Publishes a text once a reviewer approves it.
#[workflow(name = "review", input = Review)]
impl Reviewing {
    #[transition(to = Drafted)]
    async fn draft(&self, review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        review.text = review.text.trim().to_owned();
        Ok(())
    }

    #[transition(from = Drafted, to = End, wait)]
    async fn approve(&self, review: &mut Review, _cx: &mut RunContext, approval: Approval) -> Result<()> {
        if approval.reviewer.trim().is_empty() {
            return Err("the reviewer has no name".into());
        }
        review.approved_by = Some(approval.reviewer);
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

/// The runtime with `greet`, `review` and the `desk` agent registered.
pub(crate) fn register(runtime: Runtime) -> Runtime {
    let tools = ToolRegistry::new().with(ResetPassword).expect("one tool");
    let desk = Agent::new(desk_model(), "scripted-desk", tools)
        .description("The helpdesk: resets the passwords of the users you name; a person approves each reset.")
        .named("desk")
        .expect("a valid name");
    runtime.register(Greeter).register(Reviewing).register(desk)
}

/// The relay: an agent whose only tools are those of the MCP servers of `--mcp` and
/// `--mcp-url` (another server's `greet`, say). Its offline model asks for `greet`
/// for the name in the prompt, then answers with the result.
pub(crate) fn relay(tools: ToolRegistry) -> Agent {
    let model = ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().expect("a conversation");
        let results: Vec<String> = last.tool_results_iter().map(|r| r.content.clone()).collect();
        if results.is_empty() {
            let name = last.text();
            return Ok(ScriptedModel::new().tool_calls_response([("greet", serde_json::json!({ "name": name }))]));
        }
        Ok(ScriptedModel::new().text_response(format!("The other server says: {}", results.join("; "))))
    });
    Agent::new(model, "scripted-relay", tools)
        .description("Asks the greet tool of another MCP server, given with --mcp or --mcp-url.")
        .named("relay")
        .expect("a valid name")
}
