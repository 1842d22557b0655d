//! A tool loop with reasoning continues in a new process, on each provider whose
//! models reason: what the provider needs back (Anthropic's thinking signature, the
//! encrypted content of an OpenAI Responses reasoning item, Gemini's thought
//! signature, Bedrock's signed reasoning) is saved with the run's messages and sent
//! back exactly, by a process that never saw the first turn. A fork of the waiting
//! run, continued in the new process, sends it back too.
//!
//! The test starts an imitation of the provider's API, then runs this test binary
//! twice as a child process over one SQLite file: the first asks the agent, whose
//! model reasons and calls a tool that needs approval, so the run waits and the
//! process exits (and, for the fork case, forks the waiting run under another system
//! prompt first); the second approves the call, and the model's next turn must carry
//! the first turn's reasoning unchanged, or the imitation refuses it as the provider
//! would.
//!
//! Each imitation is small and knows only this two-turn loop (the strict imitations of
//! each API are the tests of `loopstack-model`), but checks what matters here: the
//! path, the key header, that reasoning is asked for, and the reasoning sent back
//! exactly where the API wants it, refusing anything else in the API's error shape.
//! Anthropic and OpenAI (with Azure) are covered by default; Gemini and Bedrock with
//! `--features gemini,bedrock`.

use std::process::Command;
use std::sync::Arc;

use loopstack::llm::{Agent, AgentStatus, ChatModel, ReasoningEffort, ToolDecision, ToolDecisions};
use loopstack::prelude::*;
use loopstack::{ForkEdits, SqliteStore, Store};
use loopstack_model::testing::{Reply, Request, Server};
use serde_json::{Value, json};

/// Which half of the loop a child process runs: `ask` or `approve`.
const PHASE: &str = "LOOPSTACK_REASONING_PHASE";

/// The system prompt of the fork: its second turn must carry it with the reasoning.
const FORK_SYSTEM: &str = "Say which unit you restarted.";

/// What every provider's model answers once the unit is restarted.
const ANSWER: &str = "The web unit is back.";

/// What the model thinks before it calls the tool.
const THOUGHT: &str = "The web unit is down: restart it.";

/// Restarts the unit: a person approves each call.
#[tool(approve)]
async fn restart_unit(unit: String) -> Result<String, ToolError> {
    Ok(format!("{unit} restarted"))
}

/// A provider the test covers.
struct Provider {
    /// Its name, as the child processes are told it.
    name: &'static str,
    /// Its model, pointed at the imitation's URL.
    model: fn(&str) -> Arc<dyn ChatModel>,
    /// The model (or deployment) the agent asks for.
    model_name: &'static str,
    /// The imitation of its API for the loop.
    imitation: fn(&Request) -> Result<Reply, String>,
    /// The field of a request body that holds the conversation, and how many items
    /// it has in the first turn and in the second.
    conversation: (&'static str, [usize; 2]),
}

/// The providers this build covers.
fn providers() -> Vec<Provider> {
    let mut all = vec![Provider {
        name: "anthropic",
        model: |url| Arc::new(loopstack::llm::Anthropic::new("test-key").base_url(url)),
        model_name: "reasoner-1",
        imitation: anthropic,
        conversation: ("messages", [1, 3]),
    }];
    #[cfg(feature = "openai")]
    all.extend(responses::providers());
    #[cfg(feature = "gemini")]
    all.push(gemini::provider());
    #[cfg(feature = "bedrock")]
    all.push(bedrock::provider());
    all
}

fn provider(name: &str) -> Provider {
    providers().into_iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no provider {name}"))
}

fn agent(provider: &Provider, url: &str) -> Agent {
    let tools = ToolRegistry::new().with(RestartUnit).unwrap();
    Agent::new((provider.model)(url), provider.model_name, tools).reasoning_effort(ReasoningEffort::High)
}

/// A child process: one half of the loop, over the store at `LOOPSTACK_DB`.
async fn child(phase: &str) {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let (provider, url) = (provider(&var("LOOPSTACK_PROVIDER")), var("LOOPSTACK_URL"));
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(var("LOOPSTACK_DB")).await.unwrap());
    let runtime = Runtime::with_shared_store(store);
    let agent = agent(&provider, &url);
    match phase {
        "ask" => {
            let reply = agent.ask(&runtime, "The web unit is down.").await.unwrap();
            let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
            if std::env::var("LOOPSTACK_FORK").is_err() {
                println!("RUN {} {}", reply.run_id, calls[0].call_id);
                return;
            }
            // A what-if from where the run waits, after the first turn: another system
            // prompt, kept in the fork's state for the process that approves.
            let step = runtime.store().load_run(reply.run_id).await.unwrap().step;
            let edits = ForkEdits::new().system(FORK_SYSTEM);
            let fork = agent.fork_with(&runtime, reply.run_id, step, edits).await.unwrap();
            let AgentStatus::AwaitingApproval { calls: fork_calls } = fork.status else { panic!("{:?}", fork.status) };
            assert_eq!(fork_calls, calls, "the fork waits for the same call");
            let record = runtime.store().load_run(fork.run_id).await.unwrap();
            assert_eq!(record.forked_from, Some((reply.run_id, step)));
            println!("RUN {} {}", fork.run_id, fork_calls[0].call_id);
        }
        "approve" => {
            let run_id: RunId = var("LOOPSTACK_RUN").parse().unwrap();
            let decisions = ToolDecisions::new([ToolDecision::approve(var("LOOPSTACK_CALL"))]);
            let done = agent.decide(&runtime, run_id, decisions).await.unwrap();
            assert_eq!(done.status, AgentStatus::Completed, "{}", done.text);
            println!("ANSWER {}", done.text);
        }
        other => panic!("unknown phase {other}"),
    }
}

/// Runs this test in a child process for `phase`; its stdout.
fn run_child(phase: &str, env: &[(&str, String)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", "a_tool_loop_with_reasoning_continues_in_a_new_process", "--nocapture", "--test-threads=1"])
        .env(PHASE, phase)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the {phase} process failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// One case: the loop of `provider` across two processes, on the run itself or on a
/// fork of it.
async fn restart(provider: &Provider, fork: bool) {
    let name = provider.name;
    let case = if fork { format!("{name} (fork)") } else { name.to_owned() };
    let answer = provider.imitation;
    let server = Server::handle(move |request| {
        answer(request).unwrap_or_else(|problem| Reply::raw(418, "text/plain", format!("imitation: {problem}")))
    })
    .await;
    let db = std::env::temp_dir().join(format!("loopstack-reasoning-{name}-{}.db", RunId::new()));
    let mut env = vec![
        ("LOOPSTACK_PROVIDER", name.to_owned()),
        ("LOOPSTACK_URL", server.url()),
        ("LOOPSTACK_DB", db.display().to_string()),
    ];
    if fork {
        env.push(("LOOPSTACK_FORK", "1".to_owned()));
    }

    let ask_env = env.clone();
    let asked = tokio::task::spawn_blocking(move || run_child("ask", &ask_env)).await.unwrap();
    let line =
        asked.lines().find_map(|l| l.split_once("RUN ").map(|(_, rest)| rest)).unwrap_or_else(|| panic!("{asked}"));
    let (run, call) = line.split_once(' ').unwrap();
    env.retain(|(k, _)| *k != "LOOPSTACK_FORK");
    env.extend([("LOOPSTACK_RUN", run.to_owned()), ("LOOPSTACK_CALL", call.to_owned())]);
    let approved = tokio::task::spawn_blocking(move || run_child("approve", &env)).await.unwrap();
    assert!(approved.contains(&format!("ANSWER {ANSWER}")), "{case}: {approved}");

    // Two turns, each answered once: the second carried the reasoning back.
    let requests = server.requests();
    let (field, sizes) = provider.conversation;
    let sent: Vec<_> = requests.iter().map(|r| r.body[field].as_array().map(Vec::len)).collect();
    assert_eq!(sent, sizes.map(Some), "{case}");
    // The fork's turn is taken under the fork's prompt, kept across the restart.
    let prompts: Vec<bool> = requests.iter().map(|r| r.body.to_string().contains(FORK_SYSTEM)).collect();
    assert_eq!(prompts, [false, fork], "{case}");
    let _ = std::fs::remove_file(&db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_loop_with_reasoning_continues_in_a_new_process() {
    if let Ok(phase) = std::env::var(PHASE) {
        return child(&phase).await;
    }
    for provider in providers() {
        for fork in [false, true] {
            restart(&provider, fork).await;
        }
    }
}

/// An imitation of Anthropic's Messages API for the loop: the first turn thinks
/// (signed) and calls the tool; the next must send the signed thinking back, unchanged
/// and before the call, with the tool's result, as the API requires.
fn anthropic(request: &Request) -> Result<Reply, String> {
    let error = |status: u16, kind: &str, message: String| {
        Reply::json(status, json!({"type": "error", "error": {"type": kind, "message": message}}))
    };
    if request.method != "POST" || request.path != "/v1/messages" {
        return Ok(error(404, "not_found_error", format!("no route {} {}", request.method, request.path)));
    }
    if request.header("x-api-key") != Some("test-key") {
        return Ok(error(401, "authentication_error", "invalid x-api-key".into()));
    }
    if request.header("anthropic-version").is_none() {
        return Ok(error(400, "invalid_request_error", "anthropic-version: header is required".into()));
    }
    let body = &request.body;
    if body["thinking"] != json!({"type": "enabled", "budget_tokens": 16384}) {
        return Err(format!("thinking not asked for: {}", body["thinking"]));
    }
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let reply = |content: Value, stop: &str| {
        Reply::json(
            200,
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "reasoner-1", "content": content,
                "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": 20, "output_tokens": 40},
            }),
        )
    };
    let turn = json!([
        {"type": "thinking", "thinking": THOUGHT, "signature": "c2lnLTE="},
        {"type": "tool_use", "id": "toolu_1", "name": "restart_unit", "input": {"unit": "web"}},
    ]);
    match messages.len() {
        1 => Ok(reply(turn, "tool_use")),
        3 => {
            if messages[1]["content"] != turn {
                return Ok(error(
                    400,
                    "invalid_request_error",
                    format!(
                        "messages.1.content.0: the thinking block must come back unchanged, got {}",
                        messages[1]["content"]
                    ),
                ));
            }
            if messages[2]["content"][0]["tool_use_id"] != "toolu_1" {
                return Ok(error(
                    400,
                    "invalid_request_error",
                    "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after".into(),
                ));
            }
            if request.header("anthropic-beta") != Some("interleaved-thinking-2025-05-14") {
                return Err("no interleaved thinking header".into());
            }
            Ok(reply(json!([{"type": "text", "text": ANSWER}]), "end_turn"))
        }
        n => Err(format!("{n} messages")),
    }
}

/// The OpenAI Responses API, at OpenAI and at Azure: the first turn's `reasoning`
/// item comes with its `encrypted_content` (nothing is stored, `store: false`), and
/// must come back unchanged, before the `function_call` it preceded.
#[cfg(feature = "openai")]
mod responses {
    use super::*;

    pub(super) fn providers() -> [Provider; 2] {
        [
            Provider {
                name: "openai-responses",
                model: |url| Arc::new(loopstack::llm::OpenAiResponses::new("test-key").base_url(url)),
                model_name: "reasoner-1",
                imitation: openai,
                conversation: ("input", [1, 4]),
            },
            Provider {
                name: "azure-responses",
                model: |url| Arc::new(loopstack::llm::AzureOpenAi::new(url, "test-key").responses()),
                model_name: "reasoner-deployment",
                imitation: azure,
                conversation: ("input", [1, 4]),
            },
        ]
    }

    /// A 400 in the API's error shape.
    fn invalid(message: String, param: Option<&str>, code: Option<&str>) -> Reply {
        Reply::json(
            400,
            json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}),
        )
    }

    /// OpenAI: `POST /v1/responses`, the key as `Authorization: Bearer`.
    fn openai(request: &Request) -> Result<Reply, String> {
        if request.method != "POST" || request.path != "/v1/responses" {
            let message = format!("Invalid URL ({} {})", request.method, request.path);
            return Ok(Reply::json(
                404,
                json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
            ));
        }
        if request.header("authorization") != Some("Bearer test-key") || request.header("api-key").is_some() {
            return Ok(Reply::json(
                401,
                json!({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                  "param": null, "code": "invalid_api_key"}}),
            ));
        }
        answer(request, "reasoner-1")
    }

    /// Azure's v1 API: `POST /openai/v1/responses`, the key as `api-key`, the
    /// deployment as the body's `model`.
    fn azure(request: &Request) -> Result<Reply, String> {
        if request.method != "POST" || request.path != "/openai/v1/responses" {
            return Ok(Reply::json(404, json!({"error": {"code": "404", "message": "Resource not found"}})));
        }
        if request.header("api-key") != Some("test-key") || request.header("authorization").is_some() {
            return Ok(Reply::json(
                401,
                json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong \
                      API endpoint. Make sure to provide a valid key for an active subscription and use a correct \
                      regional API endpoint for your resource."}}),
            ));
        }
        answer(request, "reasoner-deployment")
    }

    /// The two turns, once the request reached the API.
    fn answer(request: &Request, model: &str) -> Result<Reply, String> {
        let body = &request.body;
        if body["model"] != model {
            return Ok(invalid(format!("The model `{}` does not exist.", body["model"]), Some("model"), None));
        }
        if body["store"] != false || body["include"] != json!(["reasoning.encrypted_content"]) {
            return Err(format!("not stateless with encrypted reasoning: {} {}", body["store"], body["include"]));
        }
        if body["reasoning"]["effort"] != "high" {
            return Err(format!("reasoning not asked for: {}", body["reasoning"]));
        }
        let input = body["input"].as_array().ok_or("no input")?;
        let reasoning = json!({
            "type": "reasoning", "id": "rs_1",
            "summary": [{"type": "summary_text", "text": THOUGHT}],
            "encrypted_content": "gAAAAB-sealed-reasoning-1",
        });
        let (output, tokens) = match input.len() {
            1 => {
                let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "restart_unit",
                                  "arguments": "{\"unit\":\"web\"}", "status": "completed"});
                (json!([reasoning, call]), 40)
            }
            4 => {
                // Stateless: the reasoning item, exactly as issued, then the call it preceded.
                if input[1]["type"] != "reasoning" {
                    return Ok(invalid(
                        "Item 'call_1' of type 'function_call' was provided without its required 'reasoning' item: \
                         'rs_1'."
                            .into(),
                        Some("input[1]"),
                        None,
                    ));
                }
                if input[1] != reasoning {
                    return Ok(invalid(
                        format!("The encrypted content for item rs_1 could not be verified: got {}", input[1]),
                        Some("input[1]"),
                        Some("invalid_encrypted_content"),
                    ));
                }
                if input[2]["type"] != "function_call" || input[2]["call_id"] != "call_1" {
                    return Ok(invalid(format!("Invalid input item: {}", input[2]), Some("input[2]"), None));
                }
                if input[3]["type"] != "function_call_output" || input[3]["call_id"] != "call_1" {
                    return Ok(invalid(
                        format!("No tool output found for function call call_1: {}", input[3]),
                        Some("input[3]"),
                        None,
                    ));
                }
                let text = json!({"type": "message", "id": "msg_2", "status": "completed", "role": "assistant",
                                  "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]});
                (json!([text]), 10)
            }
            n => return Err(format!("{n} input items")),
        };
        Ok(Reply::json(
            200,
            json!({
                "id": format!("resp_{}", input.len()), "object": "response", "created_at": 1_750_000_000,
                "status": "completed", "error": null, "incomplete_details": null,
                "model": format!("{model}-2025-08-07"), "output": output, "store": false,
                "usage": {
                    "input_tokens": 20, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": tokens, "output_tokens_details": {"reasoning_tokens": 12},
                    "total_tokens": 20 + tokens,
                },
            }),
        ))
    }
}

/// Gemini's `generateContent`: the first turn's function call part carries a
/// `thoughtSignature`, which must come back on that same part.
#[cfg(feature = "gemini")]
mod gemini {
    use super::*;

    const MODEL: &str = "gemini-3-pro-preview";
    const SIGNATURE: &str = "Z2VtaW5pLXRob3VnaHQtMQ==";

    pub(super) fn provider() -> Provider {
        Provider {
            name: "gemini",
            model: |url| Arc::new(loopstack::llm::Gemini::new("test-key").base_url(url)),
            model_name: MODEL,
            imitation,
            conversation: ("contents", [1, 3]),
        }
    }

    /// An error in Google's shape.
    fn error(code: u16, status: &str, message: &str) -> Reply {
        Reply::json(code, json!({"error": {"code": code, "message": message, "status": status}}))
    }

    fn imitation(request: &Request) -> Result<Reply, String> {
        if request.method != "POST" || request.path != format!("/v1beta/models/{MODEL}:generateContent") {
            return Ok(error(404, "NOT_FOUND", &format!("no such path: {}", request.path)));
        }
        if request.header("x-goog-api-key") != Some("test-key") || request.header("authorization").is_some() {
            return Ok(Reply::json(
                400,
                json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                    "status": "INVALID_ARGUMENT",
                    "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                 "domain": "googleapis.com"}]}}),
            ));
        }
        let body = &request.body;
        let thinking = &body["generationConfig"]["thinkingConfig"];
        if *thinking != json!({"thinkingLevel": "HIGH", "includeThoughts": true}) {
            return Err(format!("thinking not asked for: {thinking}"));
        }
        let contents = body["contents"].as_array().ok_or("no contents")?;
        let (parts, finish) = match contents.len() {
            1 => (
                json!([
                    {"text": THOUGHT, "thought": true},
                    {"functionCall": {"name": "restart_unit", "args": {"unit": "web"}}, "thoughtSignature": SIGNATURE},
                ]),
                "STOP",
            ),
            3 => {
                let turn = &contents[1];
                let parts = turn["parts"].as_array().filter(|_| turn["role"] == "model").ok_or("no model turn")?;
                // Any signature sent must be one issued; the call's must be on its part.
                if parts.iter().any(|p| p.get("thoughtSignature").is_some_and(|s| s != SIGNATURE)) {
                    return Ok(error(400, "INVALID_ARGUMENT", "contents[1]: Corrupted thought signature."));
                }
                let call = parts.iter().find(|p| p.get("functionCall").is_some()).ok_or("no function call")?;
                if call["thoughtSignature"] != SIGNATURE {
                    // A missing signature (or the documented skip value, which the
                    // model sends for a call that came without one) is not what was
                    // issued.
                    return Ok(error(
                        400,
                        "INVALID_ARGUMENT",
                        &format!(
                            "Function call is missing a thought_signature in functionCall parts. This is required \
                             for tools to work correctly, and missing thought_signature may lead to degraded model \
                             performance. (contents[1]: {call})"
                        ),
                    ));
                }
                if call["functionCall"]["name"] != "restart_unit"
                    || call["functionCall"]["args"] != json!({"unit": "web"})
                {
                    return Ok(error(400, "INVALID_ARGUMENT", &format!("contents[1]: not the call made: {call}")));
                }
                if contents[2]["parts"][0]["functionResponse"]["name"] != "restart_unit" {
                    return Ok(error(
                        400,
                        "INVALID_ARGUMENT",
                        "Please ensure that the number of function response parts is equal to the number of function \
                         call parts of the function call turn.",
                    ));
                }
                (json!([{"text": ANSWER}]), "STOP")
            }
            n => return Err(format!("{n} contents")),
        };
        Ok(Reply::json(
            200,
            json!({
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
                "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 30, "thoughtsTokenCount": 12,
                                  "totalTokenCount": 62},
                "modelVersion": MODEL, "responseId": "resp-gemini-1",
            }),
        ))
    }
}

/// Bedrock's Converse API with a Bedrock API key (`Authorization: Bearer`, no SigV4):
/// a Claude model's `reasoningContent` comes with its signature, and must come back
/// unchanged before the `toolUse` it preceded.
#[cfg(feature = "bedrock")]
mod bedrock {
    use super::*;

    const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

    pub(super) fn provider() -> Provider {
        Provider {
            name: "bedrock",
            model: |url| Arc::new(loopstack::llm::Bedrock::with_api_key("us-west-2", "test-key").endpoint_url(url)),
            model_name: MODEL,
            imitation,
            conversation: ("messages", [1, 3]),
        }
    }

    /// An error as Bedrock sends it: the type in `x-amzn-errortype`, a `message`.
    fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::json(status, json!({"message": message}))
            .header("x-amzn-errortype", &format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"))
            .header("x-amzn-requestid", "req-err")
    }

    fn imitation(request: &Request) -> Result<Reply, String> {
        let path = format!("/model/{}/converse", MODEL.replace(':', "%3A"));
        if request.method != "POST" || request.path != path {
            return Ok(error(404, "UnknownOperationException", &format!("no operation at {}", request.path)));
        }
        if request.header("authorization") != Some("Bearer test-key") || request.header("x-amz-date").is_some() {
            return Ok(error(
                403,
                "AccessDeniedException",
                "Authentication failed: Please make sure your API Key is valid.",
            ));
        }
        let body = &request.body;
        let thinking = &body["additionalModelRequestFields"]["thinking"];
        if *thinking != json!({"type": "enabled", "budget_tokens": 16384}) {
            return Err(format!("thinking not asked for: {thinking}"));
        }
        let messages = body["messages"].as_array().ok_or("no messages")?;
        let turn = json!([
            {"reasoningContent": {"reasoningText": {"text": THOUGHT, "signature": "YmVkcm9jay1zaWctMQ=="}}},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "restart_unit", "input": {"unit": "web"}}},
        ]);
        let (content, stop) = match messages.len() {
            1 => (turn, "tool_use"),
            3 => {
                // The assistant's turn as it came (a cache point may follow it).
                let sent: Vec<&Value> = messages[1]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b.get("cachePoint").is_none())
                    .collect();
                if messages[1]["role"] != "assistant" || sent != turn.as_array().unwrap().iter().collect::<Vec<_>>() {
                    return Ok(error(
                        400,
                        "ValidationException",
                        &format!(
                            "messages.1.content.0.reasoningContent: the signed reasoning must come back unchanged, \
                             before the toolUse it preceded; got {}",
                            messages[1]["content"]
                        ),
                    ));
                }
                if messages[2]["content"][0]["toolResult"]["toolUseId"] != "tooluse_1" {
                    return Ok(error(
                        400,
                        "ValidationException",
                        "The number of toolResult blocks at messages.2.content exceeds the number of toolUse blocks \
                         of previous turn.",
                    ));
                }
                (json!([{"text": ANSWER}]), "end_turn")
            }
            n => return Err(format!("{n} messages")),
        };
        Ok(Reply::json(
            200,
            json!({
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop,
                "usage": {"inputTokens": 20, "outputTokens": 40, "totalTokens": 60},
                "metrics": {"latencyMs": 42},
            }),
        )
        .header("x-amzn-requestid", "req-1"))
    }
}
