//! The agent on every provider: each provider of `loopstack-model`, pointed at the
//! strict imitation of its API (`loopstack_model::testing::imitation`), runs the
//! agent through a tool loop (plain and streamed), a call needing approval, a typed answer (structured
//! output where the provider has it, the `respond` tool otherwise), a user's image,
//! prompt caching (the breakpoints Anthropic and Bedrock mark, the cache reads every
//! provider reports), a fallback to another provider after an overload, compaction
//! with a summary, and a turn budget. Each request is read strictly by the imitation
//! (a request it refuses fails the test with its reason) and answered with the next
//! scripted turn; the tests check the agent's replies and what each request carried.
//!
//! `cargo test -p loopstack-llm --features gemini,bedrock --test agent_on_every_provider`
//! (Gemini and Bedrock only with their features; the fallbacks go to Anthropic and
//! OpenAI, so the whole test needs both, the default features.)
#![cfg(all(feature = "anthropic", feature = "openai"))]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use loopstack_core::{EventKind, Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::{
    Agent, AgentStatus, ChatModel, ContextPolicy, Image, Limit, RetryPolicy, Role, ToolDecisions, ToolUse, Usage,
};
use loopstack_model::testing::{Answer, Failure, Imitation, MODEL, Part, Reply, Request, Seen, Server, Turn};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------
// The driver: an imitation answering scripted turns.

/// A provider's imitation answering a queue of turns: each request is read strictly
/// (a refusal is kept and answered with a 400), then answered with the next turn.
struct Script {
    imitation: Box<dyn Imitation>,
    turns: Mutex<VecDeque<Turn>>,
    /// Each request answered: what the imitation read, and the body as sent.
    seen: Mutex<Vec<(Seen, Value)>>,
    /// Why requests were refused, or came with no turn left to answer them.
    refused: Mutex<Vec<String>>,
}

impl Script {
    fn answer(&self, request: &Request) -> Reply {
        let seen = match self.imitation.read(request) {
            Ok(seen) => seen,
            Err(why) => {
                self.refused.lock().unwrap_or_else(PoisonError::into_inner).push(why.clone());
                return Reply::json(400, json!({"error": {"message": why, "type": "invalid_request_error"}}));
            }
        };
        let Some(turn) = self.turns.lock().unwrap_or_else(PoisonError::into_inner).pop_front() else {
            let why = format!("a request no turn was scripted for: {seen:?}");
            self.refused.lock().unwrap_or_else(PoisonError::into_inner).push(why.clone());
            return Reply::json(400, json!({"error": {"message": why, "type": "invalid_request_error"}}));
        };
        let reply = self.imitation.reply(&turn, &seen);
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).push((seen, request.body.clone()));
        reply
    }

    /// What each answered request carried.
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(s, _)| s.clone()).collect()
    }

    /// The body of each answered request.
    fn bodies(&self) -> Vec<Value> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(_, b)| b.clone()).collect()
    }

    /// The result, once no request was refused (else the refusals fail the test).
    fn ok<T, E: std::fmt::Debug>(&self, name: &str, result: Result<T, E>) -> T {
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert!(refused.is_empty(), "{name}: the imitation refused requests: {refused:#?}");
        result.unwrap_or_else(|e| panic!("{name}: {e:?}"))
    }

    /// Every turn was asked for, and no request refused.
    fn finished(&self, name: &str) {
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert!(refused.is_empty(), "{name}: the imitation refused requests: {refused:#?}");
        let left = self.turns.lock().unwrap_or_else(PoisonError::into_inner).len();
        assert_eq!(left, 0, "{name}: {left} scripted turns were not asked for");
    }
}

/// A provider: its imitation, its model pointed at a server, what it has.
struct Provider {
    name: &'static str,
    /// The model name the agent asks for.
    model_name: &'static str,
    imitation: fn() -> Box<dyn Imitation>,
    /// The model at this base URL, with this retry policy.
    model: fn(&str, RetryPolicy) -> Arc<dyn ChatModel>,
    /// Whether typed answers go through structured output (else the `respond` tool).
    structured: bool,
    /// Where a request marks cache breakpoints (`tools`, `system`, `messages.<i>`).
    cache_marks: fn(&Value) -> Vec<String>,
}

/// A server imitating `provider`, answering these turns, and the model pointed at it.
async fn imitate(
    provider: &Provider,
    turns: Vec<Turn>,
    retry: RetryPolicy,
) -> (Server, Arc<Script>, Arc<dyn ChatModel>) {
    let script = Arc::new(Script {
        imitation: (provider.imitation)(),
        turns: Mutex::new(turns.into()),
        seen: Mutex::default(),
        refused: Mutex::default(),
    });
    let handler = script.clone();
    let server = Server::handle(move |request| handler.answer(request)).await;
    let model = (provider.model)(&server.url(), retry);
    (server, script, model)
}

/// Retries as the provider's defaults, without waiting long (no scenario retries).
fn retries() -> RetryPolicy {
    RetryPolicy::new()
}

// ---------------------------------------------------------------------------------
// The providers.

fn no_marks(_: &Value) -> Vec<String> {
    Vec::new()
}

fn anthropic() -> Provider {
    use loopstack_model::testing::imitation::anthropic::MessagesApi;
    fn marks(body: &Value) -> Vec<String> {
        let marked = |block: &Value| block.get("cache_control").is_some();
        let mut out = Vec::new();
        if body["tools"].as_array().and_then(|t| t.last()).is_some_and(marked) {
            out.push("tools".to_owned());
        }
        if body["system"].as_array().is_some_and(|s| s.iter().any(marked)) {
            out.push("system".to_owned());
        }
        for (i, message) in body["messages"].as_array().into_iter().flatten().enumerate() {
            if message["content"].as_array().is_some_and(|c| c.iter().any(marked)) {
                out.push(format!("messages.{i}"));
            }
        }
        out
    }
    Provider {
        name: "anthropic",
        model_name: MODEL,
        imitation: || Box::new(MessagesApi),
        model: |url, retry| {
            let key = loopstack_model::testing::API_KEY;
            Arc::new(loopstack_llm::Anthropic::new(key).base_url(url).retry_policy(retry))
        },
        structured: false,
        cache_marks: marks,
    }
}

fn openai() -> Provider {
    use loopstack_model::testing::imitation::openai::ChatCompletions;
    Provider {
        name: "openai",
        model_name: MODEL,
        imitation: || Box::new(ChatCompletions),
        model: |url, retry| {
            let key = loopstack_model::testing::API_KEY;
            Arc::new(loopstack_llm::OpenAi::new().api_key(key).base_url(url).retry_policy(retry))
        },
        structured: true,
        cache_marks: no_marks,
    }
}

fn openai_responses() -> Provider {
    use loopstack_model::testing::imitation::openai_responses::Responses;
    Provider {
        name: "openai_responses",
        model_name: MODEL,
        imitation: || Box::new(Responses::openai()),
        model: |url, retry| {
            let key = loopstack_model::testing::API_KEY;
            Arc::new(loopstack_llm::OpenAiResponses::new(key).base_url(url).retry_policy(retry))
        },
        structured: true,
        cache_marks: no_marks,
    }
}

fn azure_chat() -> Provider {
    use loopstack_model::testing::imitation::azure::AzureChat;
    Provider {
        name: "azure_chat",
        model_name: MODEL,
        imitation: || Box::new(AzureChat),
        model: |url, retry| {
            let key = loopstack_model::testing::API_KEY;
            Arc::new(loopstack_llm::AzureOpenAi::new(url, key).retry_policy(retry).chat())
        },
        structured: true,
        cache_marks: no_marks,
    }
}

fn azure_responses() -> Provider {
    use loopstack_model::testing::API_KEY;
    use loopstack_model::testing::imitation::azure::AzureResponses;
    use loopstack_model::testing::imitation::openai_responses::Responses;
    use loopstack_model::testing::imitation::responses_api::ResponsesApi;
    Provider {
        name: "azure_responses",
        model_name: MODEL,
        imitation: || {
            let mut api = ResponsesApi::openai(API_KEY);
            api.path = "/openai/v1/responses".into();
            api.auth = ("api-key", API_KEY.into());
            api.no_header = Some("authorization");
            Box::new(AzureResponses(Responses::at(api)))
        },
        model: |url, retry| Arc::new(loopstack_llm::AzureOpenAi::new(url, API_KEY).retry_policy(retry).responses()),
        structured: true,
        cache_marks: no_marks,
    }
}

#[cfg(feature = "gemini")]
fn gemini() -> Provider {
    use loopstack_model::testing::imitation::gemini::GeminiApi;
    Provider {
        name: "gemini",
        model_name: MODEL,
        imitation: || Box::new(GeminiApi::default()),
        model: |url, retry| {
            let key = loopstack_model::testing::API_KEY;
            Arc::new(loopstack_llm::Gemini::new(key).base_url(url).retry_policy(retry))
        },
        structured: true,
        cache_marks: no_marks,
    }
}

#[cfg(feature = "bedrock")]
fn bedrock() -> Provider {
    use loopstack_model::testing::imitation::bedrock::Converse;
    fn marks(body: &Value) -> Vec<String> {
        let has_point =
            |blocks: &Value| blocks.as_array().is_some_and(|b| b.iter().any(|b| b.get("cachePoint").is_some()));
        let mut out = Vec::new();
        if has_point(&body["toolConfig"]["tools"]) {
            out.push("tools".to_owned());
        }
        if has_point(&body["system"]) {
            out.push("system".to_owned());
        }
        for (i, message) in body["messages"].as_array().into_iter().flatten().enumerate() {
            if has_point(&message["content"]) {
                out.push(format!("messages.{i}"));
            }
        }
        out
    }
    Provider {
        name: "bedrock",
        // A Claude model: Bedrock marks cache points by default for the families that cache.
        model_name: "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        imitation: || Box::new(Converse::default()),
        model: |url, retry| {
            let key = loopstack_model::testing::API_KEY;
            Arc::new(loopstack_llm::Bedrock::with_api_key("us-west-2", key).endpoint_url(url).retry_policy(retry))
        },
        structured: false,
        cache_marks: marks,
    }
}

/// The provider a fallback from `provider` goes to: another one.
fn spare_for(provider: &Provider) -> Provider {
    if provider.name == "anthropic" { openai() } else { anthropic() }
}

// ---------------------------------------------------------------------------------
// Tools.

/// Weather for a city.
struct Weather;

#[async_trait::async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "The weather in a city."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("Mostly sunny in {}, 14C.", args["city"].as_str().unwrap_or("?"))))
    }
}

/// Resets a password: needs a person's approval.
struct ResetPassword;

#[async_trait::async_trait]
impl Tool for ResetPassword {
    fn name(&self) -> &str {
        "reset_password"
    }
    fn description(&self) -> &str {
        "Resets a user's password."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"user": {"type": "string"}}, "required": ["user"]})
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("password of {} reset", args["user"].as_str().unwrap_or("?"))))
    }
}

fn tools() -> ToolRegistry {
    ToolRegistry::new().with(Weather).expect("a valid tool")
}

fn call(id: &str, name: &str, input: Value) -> Turn {
    Turn::Answer(Answer::calls([ToolUse::new(id, name, input)]))
}

fn text(text: &str) -> Turn {
    Turn::Answer(Answer::text(text))
}

/// The text parts of a message.
fn texts(parts: &[Part]) -> String {
    parts.iter().filter_map(|p| if let Part::Text(t) = p { Some(t.as_str()) } else { None }).collect()
}

/// The calls of a request's messages, as (name, input).
fn calls_in(seen: &Seen) -> Vec<(String, Value)> {
    seen.parts()
        .filter_map(|p| match p {
            Part::ToolCall { name, input, .. } => Some((name.clone(), input.clone())),
            _ => None,
        })
        .collect()
}

/// The tool results of a request's messages, as (content, is_error).
fn results_in(seen: &Seen) -> Vec<(String, Option<bool>)> {
    seen.parts()
        .filter_map(|p| match p {
            Part::ToolResult { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// The scenarios.

/// A tool loop: a call, its result sent back, the answer.
async fn tool_loop(p: &Provider) {
    let turns = vec![call("call_w1", "get_weather", json!({"city": "Oslo"})), text("Sunny in Oslo.")];
    let (_server, script, model) = imitate(p, turns, retries()).await;
    let agent = Agent::new(model, p.model_name, tools()).system("Answer briefly.");
    let reply = script.ok(p.name, agent.ask(&Runtime::new(), "Weather in Oslo?").await);
    assert_eq!((reply.text.as_str(), &reply.status), ("Sunny in Oslo.", &AgentStatus::Completed), "{}", p.name);
    assert_eq!((reply.turns, reply.tool_calls), (2, 1), "{}", p.name);
    script.finished(p.name);
    let seen = script.seen();
    assert_eq!(seen[0].model, p.model_name, "{}", p.name);
    assert_eq!(seen[0].system.as_deref(), Some("Answer briefly."), "{}", p.name);
    assert_eq!(seen[0].tools, ["get_weather"], "{}", p.name);
    assert_eq!(texts(&seen[0].messages[0].parts), "Weather in Oslo?", "{}", p.name);
    // The second request: the prompt, the call, its result.
    let roles: Vec<Role> = seen[1].messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User], "{}", p.name);
    assert_eq!(calls_in(&seen[1]), [("get_weather".to_owned(), json!({"city": "Oslo"}))], "{}", p.name);
    let results = results_in(&seen[1]);
    assert_eq!(results.len(), 1, "{}: {results:?}", p.name);
    assert!(results[0].0.contains("Mostly sunny in Oslo, 14C."), "{}: {results:?}", p.name);
    assert_ne!(results[0].1, Some(true), "{}", p.name);
}

/// The tool loop streamed, as it is when someone follows the run's events: each
/// request asks for a stream, the answer's text arrives in pieces, and the call is
/// reported as it starts.
async fn streamed(p: &Provider) {
    let turns = vec![call("call_s1", "get_weather", json!({"city": "Oslo"})), text("Mostly sunny in Oslo today.")];
    let (_server, script, model) = imitate(p, turns, retries()).await;
    let agent = Agent::new(model, p.model_name, tools());
    let runtime = Runtime::new();
    let mut events = runtime.subscribe();
    let reply = script.ok(p.name, agent.ask(&runtime, "Weather in Oslo?").await);
    assert_eq!(reply.text, "Mostly sunny in Oslo today.", "{}", p.name);
    script.finished(p.name);
    assert!(script.seen().iter().all(|s| s.stream), "{}: a request did not stream", p.name);
    let kinds: Vec<EventKind> =
        std::iter::from_fn(|| events.try_recv()).map(|e| e.expect("no lag").kind.clone()).collect();
    let deltas: Vec<&str> = kinds
        .iter()
        .filter_map(|k| if let EventKind::TextDelta { text } = k { Some(text.as_str()) } else { None })
        .collect();
    assert!(deltas.len() > 1, "{}: the text came in one piece: {deltas:?}", p.name);
    assert_eq!(deltas.concat(), reply.text, "{}", p.name);
    let started: Vec<&str> = kinds
        .iter()
        .filter_map(|k| if let EventKind::ToolCallStarted { name, .. } = k { Some(name.as_str()) } else { None })
        .collect();
    assert_eq!(started, ["get_weather"], "{}", p.name);
    let results = results_in(&script.seen()[1]);
    assert!(results.len() == 1 && results[0].0.contains("Mostly sunny in Oslo, 14C."), "{}: {results:?}", p.name);
}

/// A call of a tool that needs approval waits for it; approved, it runs.
async fn approval(p: &Provider) {
    let turns = vec![call("call_r1", "reset_password", json!({"user": "ada"})), text("Ada's password is reset.")];
    let (_server, script, model) = imitate(p, turns, retries()).await;
    let mut tools = tools().with(ResetPassword).expect("a valid tool");
    tools.require_approval("reset_password").expect("a registered tool");
    let agent = Agent::new(model, p.model_name, tools);
    let runtime = Runtime::new();
    let reply = script.ok(p.name, agent.ask(&runtime, "Reset Ada's password.").await);
    let AgentStatus::AwaitingApproval { calls } = &reply.status else {
        panic!("{}: the run does not wait for approval: {:?}", p.name, reply.status)
    };
    assert_eq!(
        (calls[0].name.as_str(), &calls[0].arguments),
        ("reset_password", &json!({"user": "ada"})),
        "{}",
        p.name
    );
    // Nothing ran, nothing more was asked.
    assert_eq!(script.seen().len(), 1, "{}", p.name);
    let pending = script.ok(p.name, agent.pending(&runtime, reply.run_id).await);
    let reply = script.ok(p.name, agent.decide(&runtime, reply.run_id, ToolDecisions::approve_all(&pending)).await);
    assert_eq!(
        (reply.text.as_str(), &reply.status),
        ("Ada's password is reset.", &AgentStatus::Completed),
        "{}",
        p.name
    );
    script.finished(p.name);
    let results = results_in(&script.seen()[1]);
    assert!(
        results.len() == 1 && results[0].0.contains("password of ada reset") && results[0].1 != Some(true),
        "{}: {results:?}",
        p.name
    );
}

/// A typed answer.
#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct City {
    name: String,
    population: u64,
}

/// A typed answer: through structured output where the provider has it, else the
/// `respond` tool.
async fn typed_answer(p: &Provider) {
    let answer = json!({"name": "Oslo", "population": 717710});
    let turn = if p.structured { text(&answer.to_string()) } else { call("call_a1", "respond", answer) };
    let (_server, script, model) = imitate(p, vec![turn], retries()).await;
    assert_eq!(model.structured_output(), p.structured, "{}", p.name);
    let agent = Agent::new(model, p.model_name, tools()).answer::<City>();
    let answer = script.ok(p.name, agent.ask(&Runtime::new(), "The capital of Norway?").await);
    assert_eq!(answer.value, City { name: "Oslo".into(), population: 717710 }, "{}", p.name);
    assert_eq!(answer.reply.status, AgentStatus::Completed, "{}", p.name);
    script.finished(p.name);
    let seen = &script.seen()[0];
    if p.structured {
        let schema = seen.response_schema.as_ref().unwrap_or_else(|| panic!("{}: no response schema sent", p.name));
        assert_eq!(schema["required"], json!(["name", "population"]), "{}: {schema}", p.name);
        assert_eq!(seen.tools, ["get_weather"], "{}", p.name);
    } else {
        assert_eq!(seen.response_schema, None, "{}", p.name);
        assert_eq!(seen.tools, ["get_weather", "respond"], "{}", p.name);
    }
}

/// A user's image is shown to the model with the prompt.
async fn image(p: &Provider) {
    // A 1x1 PNG.
    let png: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00,
        0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d,
        0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    let image = Image::from_bytes(png).expect("a PNG");
    let Image::Base64 { data, .. } = &image else { panic!("an inline image") };
    let data = data.to_string();
    let (_server, script, model) = imitate(p, vec![text("A single pixel.")], retries()).await;
    let agent = Agent::new(model, p.model_name, tools());
    let reply = script.ok(p.name, agent.ask_with_images(&Runtime::new(), "What is this?", [image]).await);
    assert_eq!(reply.text, "A single pixel.", "{}", p.name);
    script.finished(p.name);
    let seen = &script.seen()[0];
    let parts = &seen.messages[0].parts;
    assert_eq!(texts(parts), "What is this?", "{}", p.name);
    let shown: Vec<(&str, &str)> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Image { media_type, data } => Some((media_type.as_str(), data.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(shown, [("image/png", data.as_str())], "{}", p.name);
}

/// Prompt caching: the breakpoints the provider marks (Anthropic's `cache_control`,
/// Bedrock's `cachePoint`: tools, system prompt, the newest message and the user
/// message before it), and the cache reads every provider reports, in the reply's
/// usage.
async fn prompt_caching(p: &Provider) {
    let mut answer = Answer::text("Sunny in Oslo.");
    answer.usage = Usage::new(40, 9);
    answer.usage.cache_read_input_tokens = 900;
    let turns = vec![call("call_c1", "get_weather", json!({"city": "Oslo"})), Turn::Answer(answer)];
    let (_server, script, model) = imitate(p, turns, retries()).await;
    let agent = Agent::new(model, p.model_name, tools()).system("Answer briefly.");
    let reply = script.ok(p.name, agent.ask(&Runtime::new(), "Weather in Oslo?").await);
    assert_eq!(reply.text, "Sunny in Oslo.", "{}", p.name);
    assert_eq!(reply.usage.cache_read_input_tokens, 900, "{}: {:?}", p.name, reply.usage);
    script.finished(p.name);
    let marks: Vec<Vec<String>> = script.bodies().iter().map(|b| (p.cache_marks)(b)).collect();
    if p.name == "anthropic" || p.name == "bedrock" {
        assert_eq!(marks[0], ["tools", "system", "messages.0"], "{}", p.name);
        assert_eq!(marks[1], ["tools", "system", "messages.0", "messages.2"], "{}", p.name);
    } else {
        assert!(marks.iter().all(Vec::is_empty), "{}: {marks:?}", p.name);
    }
}

/// A fallback: after a turn of this provider, it is overloaded and another provider
/// answers, reading the conversation so far (this provider's call and its result).
async fn fallback(p: &Provider) {
    let spare = spare_for(p);
    let turns = vec![call("call_f1", "get_weather", json!({"city": "Oslo"})), Turn::Fail(Failure::Overloaded)];
    let (_server, script, model) = imitate(p, turns, RetryPolicy::disabled()).await;
    let (_spare_server, spare_script, spare_model) = imitate(&spare, vec![text("Sunny in Oslo.")], retries()).await;
    let agent = Agent::new(model, p.model_name, tools()).fallback_named("spare", spare_model, spare.model_name);
    let reply = script.ok(p.name, agent.ask(&Runtime::new(), "Weather in Oslo?").await);
    assert_eq!((reply.text.as_str(), &reply.status), ("Sunny in Oslo.", &AgentStatus::Completed), "{}", p.name);
    script.finished(p.name);
    spare_script.finished(spare.name);
    assert_eq!(script.seen().len(), 2, "{}", p.name);
    let seen = &spare_script.seen()[0];
    assert_eq!(seen.model, spare.model_name, "{}", p.name);
    assert_eq!(calls_in(seen), [("get_weather".to_owned(), json!({"city": "Oslo"}))], "{}", p.name);
    assert!(results_in(seen).iter().any(|(c, _)| c.contains("Mostly sunny in Oslo")), "{}: {seen:?}", p.name);
}

/// Compaction: past the context policy's threshold, the oldest turns are summarized
/// by the provider's model and left out; the summary goes with the first message.
async fn compaction(p: &Provider) {
    let mut big = Answer::calls([ToolUse::new("call_k2", "get_weather", json!({"city": "Paris"}))]);
    big.usage = Usage::new(5_000, 9);
    let turns = vec![
        call("call_k1", "get_weather", json!({"city": "Oslo"})),
        Turn::Answer(big),
        text("Oslo was sunny."),
        text("Both are sunny."),
    ];
    let (_server, script, model) = imitate(p, turns, retries()).await;
    let agent = Agent::new(model, p.model_name, tools()).context(ContextPolicy::summarize(1_000).target_tokens(200));
    let reply = script.ok(p.name, agent.ask(&Runtime::new(), "Weather in Oslo, then Paris?").await);
    assert_eq!((reply.text.as_str(), &reply.status), ("Both are sunny.", &AgentStatus::Completed), "{}", p.name);
    script.finished(p.name);
    let seen = script.seen();
    // The summary call: its own prompt, the left-out turns as text.
    assert_eq!(seen[2].system.as_deref(), Some(loopstack_llm::context::SUMMARY_PROMPT), "{}", p.name);
    let input = texts(&seen[2].messages[0].parts);
    assert!(input.contains("Assistant called get_weather") && input.contains("Oslo"), "{}: {input}", p.name);
    // The turn after: the prompt with the summary, then the newest call and result.
    let last = &seen[3];
    let first = texts(&last.messages[0].parts);
    assert!(
        first.starts_with("Weather in Oslo, then Paris?") && first.contains("Oslo was sunny."),
        "{}: {first}",
        p.name
    );
    assert_eq!(last.messages.len(), 3, "{}: {last:?}", p.name);
    assert_eq!(calls_in(last), [("get_weather".to_owned(), json!({"city": "Paris"}))], "{}", p.name);
}

/// A turn budget: the run stops at it, with a typed status, having asked no more.
async fn budget(p: &Provider) {
    let turns = vec![
        call("call_b1", "get_weather", json!({"city": "Oslo"})),
        call("call_b2", "get_weather", json!({"city": "Paris"})),
    ];
    let (_server, script, model) = imitate(p, turns, retries()).await;
    let agent = Agent::new(model, p.model_name, tools()).max_turns(2);
    let reply = script.ok(p.name, agent.ask(&Runtime::new(), "Weather everywhere?").await);
    assert_eq!(reply.status, AgentStatus::LimitReached(Limit::Turns { max: 2 }), "{}", p.name);
    assert_eq!((reply.turns, reply.tool_calls), (2, 2), "{}", p.name);
    script.finished(p.name);
    assert_eq!(script.seen().len(), 2, "{}", p.name);
}

macro_rules! on_every_provider {
    ($($(#[$cfg:meta])* $provider:ident;)*) => {$(
        $(#[$cfg])*
        mod $provider {
            #[tokio::test]
            async fn tool_loop() {
                super::tool_loop(&super::$provider()).await;
            }
            #[tokio::test]
            async fn streamed() {
                super::streamed(&super::$provider()).await;
            }
            #[tokio::test]
            async fn approval() {
                super::approval(&super::$provider()).await;
            }
            #[tokio::test]
            async fn typed_answer() {
                super::typed_answer(&super::$provider()).await;
            }
            #[tokio::test]
            async fn image() {
                super::image(&super::$provider()).await;
            }
            #[tokio::test]
            async fn prompt_caching() {
                super::prompt_caching(&super::$provider()).await;
            }
            #[tokio::test]
            async fn fallback() {
                super::fallback(&super::$provider()).await;
            }
            #[tokio::test]
            async fn compaction() {
                super::compaction(&super::$provider()).await;
            }
            #[tokio::test]
            async fn budget() {
                super::budget(&super::$provider()).await;
            }
        }
    )*};
}

on_every_provider! {
    anthropic;
    openai;
    openai_responses;
    azure_chat;
    azure_responses;
    #[cfg(feature = "gemini")]
    gemini;
    #[cfg(feature = "bedrock")]
    bedrock;
}
