//! Azure OpenAI: the Chat Completions and Responses models `Azure` builds, against
//! strict imitations of Azure's URLs (the v1 API and the deployment URLs of an
//! `api-version`), its `api-key` header and Microsoft Entra ID bearer tokens.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use loopstack_model::openai::Azure;
use loopstack_model::testing::imitation::responses_api::{ResponsesApi, invalid};
use loopstack_model::testing::{Reply, Request, Server};
use loopstack_model::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, Reasoning, ReasoningEffort, StopReason,
    StreamEvent, ToolDefinition, ToolResult, Usage,
};
use serde_json::{Value, json};

const KEY: &str = "azure-key-0123456789abcdef";
const DEPLOYMENT: &str = "gpt-4o-prod";

/// The Responses imitation at Azure's v1 path (or `path`), with the key as `api-key`.
async fn responses_imitation(path: &str) -> (Server, ResponsesApi) {
    let mut api = ResponsesApi::openai(KEY);
    api.path = path.into();
    api.auth = ("api-key", KEY.into());
    api.no_header = Some("authorization");
    (Server::handle(api.clone().handler()).await, api)
}

/// A strict imitation of Chat Completions at `path`, with the credential in `auth`:
/// checks the body's required fields and answers in the published shapes (with
/// Azure's content-filter results), as a body or as chunks.
fn chat_completions(path: &'static str, auth: (&'static str, String)) -> impl Fn(&Request) -> Reply + Send + Sync {
    move |request| {
        if request.method != "POST" || request.path != path {
            return Reply::json(404, json!({"error": {"code": "404", "message": "Resource not found"}}));
        }
        if request.header(auth.0) != Some(auth.1.as_str()) {
            return Reply::json(
                401,
                json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint."}}),
            );
        }
        let other = if auth.0 == "api-key" { "authorization" } else { "api-key" };
        if request.header(other).is_some() {
            return invalid(
                format!("Only one of `api-key` and `authorization` may be sent, not `{other}` too."),
                None,
                None,
            );
        }
        let body = &request.body;
        let messages = match body["messages"].as_array() {
            Some(m) if !m.is_empty() => m,
            _ => return invalid("'messages' is a required property", Some("messages"), None),
        };
        for message in messages {
            let role = message["role"].as_str().unwrap_or_default();
            if !["system", "developer", "user", "assistant", "tool"].contains(&role)
                || (role == "tool" && !message["tool_call_id"].is_string())
                || (message.get("content").is_none() && message.get("tool_calls").is_none())
            {
                return invalid(format!("Invalid message: {message}"), Some("messages"), None);
            }
        }
        if body.get("max_tokens").is_some() {
            return invalid(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                Some("max_tokens"),
                Some("unsupported_parameter"),
            );
        }
        let text = format!("Hello from {}.", body["model"].as_str().unwrap_or("?"));
        let usage = json!({"prompt_tokens": 19, "completion_tokens": 5, "total_tokens": 24,
                           "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                           "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}});
        if body["stream"] == true {
            let chunk = |delta: Value, finish: Value, usage: Value| {
                json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1_750_000_000, "model": "gpt-4o-2024-11-20",
                       "choices": if finish.is_null() && delta.is_null() { json!([]) } else {
                           json!([{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}]) },
                       "usage": usage})
            };
            let mut events = vec![json!({"id": "", "object": "", "created": 0, "model": "", "choices": [],
                                         "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]})];
            events.push(chunk(json!({"role": "assistant", "content": ""}), Value::Null, Value::Null));
            events.extend(
                text.as_bytes()
                    .chunks(4)
                    .map(|c| chunk(json!({"content": String::from_utf8_lossy(c)}), Value::Null, Value::Null)),
            );
            events.push(chunk(json!({}), json!("stop"), Value::Null));
            events.push(chunk(Value::Null, Value::Null, usage));
            let mut sse: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
            sse.push_str("data: [DONE]\n\n");
            return Reply::sse(sse).pieces(&[11, 5]);
        }
        Reply::json(
            200,
            json!({
                "id": "chatcmpl-9", "object": "chat.completion", "created": 1_750_000_000, "model": "gpt-4o-2024-11-20",
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
                             "message": {"role": "assistant", "content": text, "refusal": null},
                             "content_filter_results": {"hate": {"filtered": false, "severity": "safe"}}}],
                "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
                "usage": usage,
            }),
        )
    }
}

fn weather() -> Arc<ToolDefinition> {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
    Arc::new(ToolDefinition::new("get_weather", "The weather in a city.", schema))
}

fn weather_turn(messages: Vec<Arc<Message>>) -> ChatRequest {
    ChatRequest::new(DEPLOYMENT, messages).tools(vec![weather()]).reasoning_effort(ReasoningEffort::Medium)
}

async fn collect<M: ChatModel>(model: &M, request: &ChatRequest) -> Result<(Vec<StreamEvent>, ChatResponse), LlmError> {
    let mut stream = model.stream(request);
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::Done(response) => return Ok((events, response)),
            other => events.push(other),
        }
    }
    panic!("the stream ended without Done")
}

#[tokio::test]
async fn responses_through_the_v1_api_with_an_api_key_and_azures_reasoning() {
    let (server, _) = responses_imitation("/openai/v1/responses").await;
    let azure = Azure::new(server.url(), KEY);
    let model = azure.responses();
    assert_eq!(model.provider(), "azure-responses");
    let first = model.chat(&weather_turn(vec![Arc::new(Message::user("Weather in Oslo?"))])).await.unwrap();
    let [ContentBlock::Reasoning(reasoning), ContentBlock::ToolUse(call)] = &first.message.content[..] else {
        panic!("{:?}", first.message.content)
    };
    assert_eq!((reasoning.provider.as_str(), reasoning.data["id"].as_str()), ("azure-responses", Some("rs_1")));
    let sent = &server.requests()[0];
    assert_eq!((sent.header("api-key"), sent.header("authorization")), (Some(KEY), None));
    assert_eq!((sent.body["model"].clone(), sent.body["store"].clone()), (json!(DEPLOYMENT), json!(false)));
    assert_eq!(sent.body["include"], json!(["reasoning.encrypted_content"]));

    // The reasoning goes back to Azure before its call; the imitation checks it.
    let results =
        Message::tool_results([ToolResult { tool_use_id: call.id.clone(), content: "sunny".into(), is_error: false }]);
    let second = weather_turn(vec![
        Arc::new(Message::user("Weather in Oslo?")),
        Arc::new(first.message.clone()),
        Arc::new(results),
    ]);
    let answer = model.chat(&second).await.unwrap();
    assert_eq!(answer.message.text(), "The weather: sunny.");
    let kinds: Vec<String> = server.requests()[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["message", "reasoning", "function_call", "function_call_output"]);

    // Streamed, the same answer.
    let (events, streamed) = collect(&model, &second).await.unwrap();
    assert_eq!((streamed.message.text(), streamed.stop_reason), (answer.message.text(), StopReason::EndTurn));
    assert!(events.iter().any(|e| matches!(e, StreamEvent::ReasoningDelta { .. })));

    // OpenAI's reasoning is not Azure's: left out, not refused.
    let mut foreign = first.message.clone();
    for block in &mut foreign.content {
        if let ContentBlock::Reasoning(r) = block {
            *r = Reasoning::new("openai-responses", r.text.clone(), r.data.clone());
        }
    }
    let request =
        ChatRequest::new(DEPLOYMENT, vec![Message::user("Weather in Oslo?"), foreign, Message::user("Thanks")]);
    model.chat(&request).await.unwrap_err(); // the imitation wants the reasoning before its call
    let input = server.requests().last().unwrap().body["input"].clone();
    assert!(input.as_array().unwrap().iter().all(|i| i["type"] != "reasoning"), "{input}");
}

#[tokio::test]
async fn chat_completions_at_a_deployment_url_with_an_api_version() {
    let path = "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21";
    let server = Server::handle(chat_completions(path, ("api-key", KEY.into()))).await;
    let model = Azure::new(server.url(), KEY).api_version("2024-10-21").chat();
    assert_eq!(model.provider(), "azure");
    let request = ChatRequest::new(DEPLOYMENT, vec![Message::user("Hi")]).system("Be brief.").max_tokens(64);
    let reply = model.chat(&request).await.unwrap();
    assert_eq!(reply.message.text(), "Hello from gpt-4o-prod.");
    assert_eq!((reply.stop_reason.clone(), reply.usage), (StopReason::EndTurn, Usage::new(19, 5)));
    let sent = &server.requests()[0];
    assert_eq!(sent.body["max_completion_tokens"], 64);
    assert_eq!(sent.body["messages"][0], json!({"role": "system", "content": "Be brief."}));
    // Streamed (Azure's first chunk has no choices, only its filter results): the same.
    let (events, streamed) = collect(&model, &request).await.unwrap();
    assert_eq!(streamed.message, reply.message);
    assert_eq!((streamed.stop_reason, streamed.usage), (reply.stop_reason, reply.usage));
    assert!(events.iter().all(|e| matches!(e, StreamEvent::TextDelta { index: 0, .. })));
}

#[tokio::test]
async fn an_entra_token_is_a_bearer_token_on_the_v1_paths() {
    let server =
        Server::handle(chat_completions("/openai/v1/chat/completions", ("authorization", "Bearer entra-token".into())))
            .await;
    let model = Azure::with_token(format!("{}/openai/v1/", server.url()), "entra-token").chat();
    let reply = model.chat(&ChatRequest::new(DEPLOYMENT, vec![Message::user("Hi")])).await.unwrap();
    assert_eq!(reply.message.text(), "Hello from gpt-4o-prod.");
    assert!(!format!("{model:?}").contains("entra-token"));
    let (server, _) = responses_imitation("/openai/v1/responses").await;
    // A wrong key: an authentication error named after Azure, not retried.
    let model = Azure::new(server.url(), "wrong").responses();
    let err = model.chat(&ChatRequest::new(DEPLOYMENT, vec![Message::user("Hi")])).await.unwrap_err();
    assert!(matches!(err, LlmError::Authentication { provider: "azure-responses", status: 401, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_fixed_deployment_and_the_dated_responses_url() {
    let (server, _) = responses_imitation("/openai/responses?api-version=2025-04-01-preview").await;
    let model = Azure::new(server.url(), KEY).api_version("2025-04-01-preview").deployment("o4-mini-eu").responses();
    let reply = model.chat(&ChatRequest::new("any", vec![Message::user("Hi")])).await.unwrap();
    assert_eq!(reply.message.text(), "Hello there, how can I help?");
    assert_eq!(server.requests()[0].body["model"], "o4-mini-eu");
    // The v1 preview: its paths, with the `api-version` query.
    let (server, _) = responses_imitation("/openai/v1/responses?api-version=preview").await;
    let model = Azure::new(server.url(), KEY).api_version("preview").responses();
    model.chat(&ChatRequest::new(DEPLOYMENT, vec![Message::user("Hi")])).await.unwrap();
    // And a chat deployment fixed on the deployment URLs.
    let path = "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21";
    let server = Server::handle(chat_completions(path, ("api-key", KEY.into()))).await;
    let model = Azure::new(server.url(), KEY).api_version("2024-10-21").deployment(DEPLOYMENT).chat();
    let reply = model.chat(&ChatRequest::new("whatever", vec![Message::user("Hi")])).await.unwrap();
    assert_eq!(reply.message.text(), "Hello from gpt-4o-prod.");
}

#[tokio::test]
async fn errors_name_azure_and_are_retried_as_at_openai() {
    let (server, api) = responses_imitation("/openai/v1/responses").await;
    let sleeps = Arc::new(Mutex::new(Vec::new()));
    let recorder = sleeps.clone();
    let model = Azure::new(server.url(), KEY).responses().__sleep_with(move |d| {
        recorder.lock().unwrap().push(d);
        std::future::ready(())
    });
    let limited = json!({"error": {"code": "429", "message": "Requests to the Responses API have exceeded the rate limit. Please retry after 3 seconds."}});
    api.fault(Reply::json(429, limited).header("retry-after", "3"));
    api.fault(Reply::json(500, json!({"error": {"code": "InternalServerError", "message": "The service is temporarily unable to process your request."}})));
    let request = ChatRequest::new(DEPLOYMENT, vec![Message::user("Hi")]);
    model.chat(&request).await.unwrap();
    let waited = sleeps.lock().unwrap().clone();
    assert_eq!((waited.len(), waited[0]), (2, Duration::from_secs(3)));
    api.fault(Reply::raw(200, "application/json", "<html>gateway</html>"));
    let err = model.chat(&request).await.unwrap_err();
    assert!(matches!(err, LlmError::MalformedResponse { provider: "azure-responses", .. }), "{err:?}");
    // A Chat Completions model's errors carry `azure`.
    let path = "/openai/v1/chat/completions";
    let server = Server::handle(chat_completions(path, ("api-key", KEY.into()))).await;
    let model = Azure::new(server.url(), "wrong").chat();
    let err = model.chat(&request).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Authentication { provider: "azure", message, .. } if message.contains("Access denied")),
        "{err:?}"
    );
    let empty = ChatRequest::new(DEPLOYMENT, Vec::<Message>::new());
    let err = Azure::new(server.url(), KEY).chat().chat(&empty).await.unwrap_err();
    assert!(matches!(err, LlmError::InvalidRequest { provider: "azure", status: 400, .. }), "{err:?}");
}
