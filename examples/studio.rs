//! Studio, loopstack's web page for runs, over offline workflows: the weather
//! agent (a scripted model, no API key), an expense report that waits for a
//! manager, a helpdesk agent whose password resets wait for a person's approval
//! (Approve and Deny buttons on the run's page), and a refunds agent whose refund is
//! made at most once: after a crash during the call, the run's page asks a person
//! what happened (Run again, or Give result).
//!
//! ```text
//! cargo run --example studio -- serve          # then open http://127.0.0.1:7878
//! cargo run --example studio -- run expense --input '{"employee": "Ada", "amount": 120, "purpose": "Train"}' --wait
//! cargo run --example studio -- run helpdesk --input '"Reset the passwords of ada and bob"' --wait
//! cargo run --example studio -- --help         # every command of loopstack's command line
//! ```
//!
//! On its first `serve` over an empty store it starts three runs so the page has
//! something to show: a weather question answered, an expense waiting for its
//! decision, and one sent back for a revision.

use std::process::ExitCode;
use std::time::Duration;

use loopstack::RunQuery;
use loopstack::llm::{
    Agent, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, Price, Prices, Reasoning, Role, ScriptedModel,
    StopReason, ToolUse, Usage,
};
use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

/// Retrieve the weather for a city.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
) -> Result<String, ToolError> {
    if location.trim().is_empty() {
        return Err(ToolError::new("the location is empty; name a city"));
    }
    Ok(format!("{location}: mostly sunny, 14C, rain in the afternoon."))
}

/// Draws the week's temperatures as a bar chart: a tool that returns an image, which
/// Studio shows in the conversation.
#[tool]
async fn forecast_chart(
    /// City or location name
    location: String,
) -> Result<ToolOutput, ToolError> {
    let temperatures = [14u32, 16, 11, 9, 13, 17, 18];
    let chart = png(140, 70, |x, y| {
        let day = (x / 20) as usize;
        let bar = x % 20 >= 4 && x % 20 < 16 && 70 - y <= temperatures[day] * 3;
        if bar { [0x3b, 0x82, 0xf6] } else { [0xff, 0xff, 0xff] }
    });
    let image = loopstack::llm::Image::from_bytes(&chart).map_err(ToolError::new)?;
    Ok(ToolOutput::text(format!("{location}: the week's temperatures, 9C to 18C.")).with_image(image))
}

/// A PNG of `width` x `height` RGB pixels (uncompressed: zlib's stored blocks).
fn png(width: u32, height: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { 0xedb8_8320 ^ (crc >> 1) } else { crc >> 1 };
            }
        }
        !crc
    }
    let mut raw = Vec::new();
    for y in 0..height {
        raw.push(0); // no filter
        (0..width).for_each(|x| raw.extend(pixel(x, y)));
    }
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        zlib.extend(len.to_le_bytes());
        zlib.extend((!len).to_le_bytes());
        zlib.extend(*block);
    }
    let (a, b) =
        raw.iter().fold((1u32, 0u32), |(a, b), &x| ((a + u32::from(x)) % 65_521, (b + a + u32::from(x)) % 65_521));
    zlib.extend(((b << 16) | a).to_be_bytes());
    let mut header = Vec::new();
    header.extend(width.to_be_bytes());
    header.extend(height.to_be_bytes());
    header.extend([8, 2, 0, 0, 0]); // 8 bits, RGB
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    for (kind, data) in [(b"IHDR", header), (b"IDAT", zlib), (b"IEND", Vec::new())] {
        out.extend((data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend(kind);
        out.extend(&data);
        let crc = crc32(&out[start..]);
        out.extend(crc.to_be_bytes());
    }
    out
}

/// The offline model: it asks for the weather of the city in the question, then
/// answers from the tool's result. It takes a moment per turn, as a real one would,
/// so Studio's live view has something to follow.
fn weather_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().ok_or_else(|| LlmError::Script {
            model: request.model.clone(),
            message: "the conversation is empty".into(),
        })?;
        if let Some(result) = last.tool_results_iter().next() {
            let answer =
                format!("Here is the forecast. {} Take an umbrella if you go out after lunch.", result.content);
            return Ok(ChatResponse::new(
                Message::assistant(answer),
                StopReason::EndTurn,
                Usage::new(182, 31),
                "scripted-weather",
            ));
        }
        let question = last.text();
        let tool = if question.contains("chart") { "forecast_chart" } else { "get_weather" };
        let city = question
            .rsplit_once(" in ")
            .map(|(_, rest)| rest.trim_matches(|c: char| !c.is_alphanumeric() && c != ' ').to_owned())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "Berlin".to_owned());
        let call = ToolUse::new("call_0", tool, serde_json::json!({ "location": city }));
        // What the model thought first: a reasoning model's turn shows it, folded.
        let thought = format!("The user asks about {city}; get_weather knows its weather.");
        let message = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning(Reasoning::new("scripted", thought, serde_json::Value::Null)),
                ContentBlock::text("Let me look that up."),
                ContentBlock::ToolUse(call),
            ],
        };
        Ok(ChatResponse::new(message, StopReason::ToolUse, Usage::new(143, 22), "scripted-weather"))
    })
    .latency(Duration::from_millis(300))
}

/// The weather agent, registered as the workflow `agent` (its input is the question).
fn weather_agent() -> Result<Agent, BoxError> {
    let tools = ToolRegistry::new().with(GetWeather)?.with(ForecastChart)?;
    Ok(Agent::new(weather_model(), "scripted-weather", tools)
        .system("You answer questions about the weather. Use get_weather.")
        .prices(Prices::new().model("scripted-weather", Price::per_million(3.0, 15.0))))
}

/// Resets a user's password; a person approves each call.
#[tool(approve)]
async fn reset_password(
    /** The user's login */
    user: String,
) -> String {
    format!("the password of {user} is reset")
}

/// The helpdesk's offline model: it asks to reset the password of each user the
/// question names (ada, bob, grace), then answers with the results. As the front
/// desk, it hands every question to the helpdesk.
fn helpdesk_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let (Some(first), Some(last)) = (request.messages.first(), request.messages.last()) else {
            return Err(LlmError::Script { model: request.model.clone(), message: "the conversation is empty".into() });
        };
        if request.settings.system.as_deref() == Some(FRONT_DESK) {
            return Ok(ScriptedModel::new().tool_call_response("transfer_to_helpdesk", serde_json::json!({})));
        }
        let results: Vec<String> = last
            .tool_results_iter()
            .filter(|r| !r.content.starts_with("transferred to"))
            .map(|r| r.content.clone())
            .collect();
        if results.is_empty() {
            let question = first.text();
            let calls = ["ada", "bob", "grace"]
                .into_iter()
                .filter(|user| question.contains(user))
                .map(|user| ("reset_password", serde_json::json!({ "user": user })));
            return Ok(ScriptedModel::new().tool_calls_response(calls));
        }
        Ok(ScriptedModel::new().text_response(format!("Done: {}.", results.join("; "))))
    })
}

/// The helpdesk agent, the workflow `helpdesk`: its resets wait for approval.
fn helpdesk_agent() -> Result<Agent, BoxError> {
    let tools = ToolRegistry::new().with(ResetPassword)?;
    Ok(Agent::new(helpdesk_model(), "scripted-helpdesk", tools)
        .system("You reset passwords. Use reset_password.")
        .named("helpdesk")?)
}

/// Refunds an order, at most once: a run whose process died during the call does
/// not make it again, but waits for a person to say what happened. With
/// `STUDIO_REFUND_HANGS` set (the browser test), the call says so on stderr and
/// hangs, for its process to be killed.
#[tool(effect = at_most_once)]
async fn refund(
    /** The order's number, such as A-17 */
    order: String,
) -> String {
    if std::env::var_os("STUDIO_REFUND_HANGS").is_some() {
        eprintln!("refunding {order}");
        std::future::pending::<()>().await;
    }
    format!("refunded {order}")
}

/// The refunds agent, the workflow `refunds`: it refunds the order the question
/// ends with, then says what the refund returned.
fn refunds_agent() -> Result<Agent, BoxError> {
    let model = ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
        if let Some(result) = request.messages.last().and_then(|m| m.tool_results_iter().next()) {
            return Ok(ScriptedModel::new().text_response(format!("Done: {}.", result.content)));
        }
        let order = last.split_whitespace().last().unwrap_or("A-1").trim_end_matches('.');
        Ok(ScriptedModel::new().tool_call_response("refund", serde_json::json!({ "order": order })))
    });
    Ok(Agent::new(model, "scripted-refunds", ToolRegistry::new().with(Refund)?)
        .system("You refund orders. Use refund.")
        .named("refunds")?)
}

/// Books the return of an order's items, once a person says how many come back: the
/// call asks (its run waits for the answer), and runs again with it.
struct ReturnItems;

#[async_trait::async_trait]
impl Tool for ReturnItems {
    fn name(&self) -> &str {
        "return_items"
    }
    fn description(&self) -> &str {
        "Books the return of an order's items, asking a person how many come back."
    }
    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]})
    }
    async fn call(&self, args: serde_json::Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let order = args["order"].as_str().unwrap_or("A-1").to_owned();
        Ok(match cx.input().map(|answer| &answer.response) {
            None => ToolOutput::needs_input(loopstack::InputRequest::new(
                format!("How many items of {order} come back?"),
                serde_json::json!({
                    "type": "object",
                    "properties": {"items": {"type": "integer", "minimum": 1, "description": "items returned"}},
                    "required": ["items"],
                }),
            )),
            Some(loopstack::InputResponse::Accept(answer)) => {
                ToolOutput::text(format!("the return of {} items of {order} is booked", answer["items"]))
            }
            Some(_) => ToolOutput::text(format!("no return of {order} is booked: the person declined")),
        })
    }
}

/// The returns agent, the workflow `returns`: it books the return of the order the
/// question ends with, asking how many items come back.
fn returns_agent() -> Result<Agent, BoxError> {
    let model = ScriptedModel::from_fn(|request: &ChatRequest| {
        if let Some(result) = request.messages.last().and_then(|m| m.tool_results_iter().next()) {
            return Ok(ScriptedModel::new().text_response(format!("Done: {}.", result.content)));
        }
        let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
        let order = last.split_whitespace().last().unwrap_or("A-1").trim_end_matches('.').to_owned();
        Ok(ScriptedModel::new().tool_call_response("return_items", serde_json::json!({ "order": order })))
    });
    Ok(Agent::new(model, "scripted-returns", ToolRegistry::new().with(ReturnItems)?).named("returns")?)
}

const FRONT_DESK: &str = "You greet the caller and hand the question to who can answer it.";

/// The front desk, the workflow `frontdesk`: it hands each question to the helpdesk
/// agent, which continues the run.
fn front_desk_agent(helpdesk: &Agent) -> Result<Agent, BoxError> {
    Ok(Agent::new(helpdesk_model(), "scripted-helpdesk", ToolRegistry::new())
        .system(FRONT_DESK)
        .named("frontdesk")?
        .handoff(helpdesk, "Resets passwords.")?)
}

/// An expense report, as the run keeps it.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Expense {
    /// Who spent the money.
    employee: String,
    /// How much, in EUR.
    amount: f64,
    /// What for.
    purpose: String,
    /// How many times it was sent back.
    #[serde(default)]
    revisions: u32,
    /// The decision, once made.
    #[serde(default)]
    decision: Option<String>,
}

/// The report as a document: one key, a new version at each revision.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    employee: String,
    amount: f64,
    purpose: String,
}

impl DocumentType for Report {
    const TYPE: &'static str = "expense_report";
}

/// A manager's decision.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Decision {
    /// Who decides.
    manager: String,
    /// Whether the expense is paid.
    approve: bool,
    /// Why, for the employee.
    #[serde(default)]
    comment: Option<String>,
}

/// What the manager sends back: the report changed.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Revision {
    /// The corrected amount, in EUR.
    amount: f64,
    /// The corrected purpose.
    purpose: String,
}

struct ExpenseApproval;

#[workflow(name = "expense", input = Expense)]
impl ExpenseApproval {
    /// Checks the report and files it.
    #[transition(to = Submitted)]
    async fn submit(&self, expense: &mut Expense, cx: &mut RunContext) -> Result<()> {
        if expense.amount <= 0.0 || expense.amount.is_nan() {
            return Err(format!("the amount must be above 0, not {}", expense.amount).into());
        }
        file(expense, cx)
    }

    /// Waits for a manager's decision.
    #[transition(from = Submitted, to = Decided, wait)]
    async fn decide(&self, expense: &mut Expense, _cx: &mut RunContext, decision: Decision) -> Result<()> {
        if decision.manager.trim().is_empty() {
            return Err("the decision needs the manager's name".into());
        }
        let verdict = if decision.approve { "approved" } else { "rejected" };
        expense.decision = Some(match decision.comment.filter(|c| !c.trim().is_empty()) {
            Some(comment) => format!("{verdict} by {}: {comment}", decision.manager),
            None => format!("{verdict} by {}", decision.manager),
        });
        Ok(())
    }

    /// Sends the report back with changes; it waits for a decision again.
    #[transition(from = Submitted, to = Submitted, wait)]
    async fn revise(&self, expense: &mut Expense, cx: &mut RunContext, revision: Revision) -> Result<()> {
        if revision.amount <= 0.0 || revision.amount.is_nan() {
            return Err(format!("the amount must be above 0, not {}", revision.amount).into());
        }
        expense.amount = revision.amount;
        expense.purpose = revision.purpose;
        expense.revisions += 1;
        file(expense, cx)
    }

    /// Nobody decided within a week.
    #[transition(from = Submitted, to = End, after = "168h")]
    async fn expire(&self, expense: &mut Expense, _cx: &mut RunContext) -> Result<()> {
        expense.decision = Some("expired: nobody decided within a week".to_owned());
        Ok(())
    }

    /// Tells the employee.
    #[transition(from = Decided, to = End)]
    async fn notify(&self, expense: &mut Expense, cx: &mut RunContext) -> Result<()> {
        let decision = expense.decision.as_deref().unwrap_or("decided");
        tracing::info!(employee = %expense.employee, decision, run = %cx.run_id(), "expense decided");
        Ok(())
    }
}

/// Saves the report as the next version of its document.
fn file(expense: &Expense, cx: &mut RunContext) -> Result<()> {
    let report =
        Report { employee: expense.employee.clone(), amount: expense.amount, purpose: expense.purpose.clone() };
    cx.save_with(&report, SaveOptions::new().key("report"))?;
    Ok(())
}

/// The runtime with both workflows, as the command line gets it.
fn register(runtime: Runtime) -> Runtime {
    let agent = weather_agent().expect("the weather tool has a valid name");
    let helpdesk = helpdesk_agent().expect("the helpdesk's tool and name are valid");
    let front = front_desk_agent(&helpdesk).expect("the front desk's handoff is valid");
    let refunds = refunds_agent().expect("the refund tool and the name are valid");
    let returns = returns_agent().expect("the return tool and the name are valid");
    runtime
        .register(agent)
        .register(helpdesk)
        .register(front)
        .register(refunds)
        .register(returns)
        .register(ExpenseApproval)
}

/// Starts the demo runs on an empty store, so a first `serve` shows some.
async fn seed(runtime: &Runtime) -> Result<(), BoxError> {
    let first = runtime.store().list_runs(&RunQuery::new().limit(1)).await?;
    if !first.runs.is_empty() {
        return Ok(());
    }
    let question = serde_json::json!("What is the weather in Lisbon?");
    let weather = runtime.submit_by_name("agent", question).await?;
    runtime.drive_by_name(weather).await?;
    let report = serde_json::json!({ "employee": "Ada", "amount": 86.4, "purpose": "Train to the Lyon meetup" });
    let waiting = runtime.submit_by_name("expense", report).await?;
    runtime.drive_by_name(waiting).await?;
    let report = serde_json::json!({ "employee": "Grace", "amount": 1250, "purpose": "Conference" });
    let revised = runtime.submit_by_name("expense", report).await?;
    runtime.drive_by_name(revised).await?;
    let revision = serde_json::json!({ "amount": 980, "purpose": "Conference ticket, without the dinner" });
    runtime.signal_by_name(revised, "revise", revision).await?;
    eprintln!("started three demo runs");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let serving = std::env::args().skip(1).any(|a| a == "serve");
    loopstack::cli::main(|runtime| {
        let runtime = register(runtime);
        if serving {
            // Alongside the server, so the page can watch them move.
            let runtime = runtime.clone();
            tokio::spawn(async move {
                if let Err(e) = seed(&runtime).await {
                    eprintln!("could not start the demo runs: {e}");
                }
            });
        }
        runtime
    })
    .await
}
