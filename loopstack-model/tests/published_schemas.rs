//! The request bodies each provider sends, validated against the machine-readable API
//! description its maker publishes: OpenAI's OpenAPI document (`POST /chat/completions`
//! takes a `CreateChatCompletionRequest`, `POST /responses` a `CreateResponse`), and
//! Google's discovery documents of the Gemini API (`GenerateContentRequest`) and of
//! Vertex AI (`GoogleCloudAiplatformV1GenerateContentRequest`).
//!
//! The requests are built as a user builds them (a conversation with a system prompt,
//! text, images, tool definitions, parallel tool calls with a malformed one, tool
//! results with an error and an image, each provider's reasoning items or thought
//! signatures, structured output, reasoning effort, typed provider options), sent by
//! the providers to a local [`Server`] that records each body, and each body is checked.
//!
//! The documents are not in the repository: `.ci/provider-specs` fetches them, pinned,
//! from PyPI into `target/provider-specs/` (or `$LOOPSTACK_PROVIDER_SPECS`), and this
//! test reads them from `$LOOPSTACK_PROVIDER_SPECS` (or that default). Without them it
//! is skipped with the command to get them, except under CI (`CI` set), where it fails.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use futures::StreamExt as _;
use loopstack_model::options::{GeminiOptions, HarmBlockThreshold, OpenAiOptions};
use loopstack_model::testing::{Reply, Server};
use loopstack_model::{
    ChatModel, ChatRequest, ContentBlock, Gemini, Image, LlmError, Message, OpenAi, OpenAiResponses, Reasoning,
    ReasoningEffort, ResponseSchema, RetryPolicy, ToolDefinition, ToolResult, ToolUse,
};
use serde_json::{Map, Value, json};

/// Where the documents are.
const SPECS_VAR: &str = "LOOPSTACK_PROVIDER_SPECS";
const OPENAI: &str = "openai-openapi.json";
const GEMINI: &str = "generativelanguage.v1beta.json";
const VERTEX: &str = "aiplatform.v1.json";

/// The directory with the three documents; `None` (the test skipped) when they are
/// missing outside CI.
///
/// # Panics
/// When they are missing under CI.
fn specs() -> Option<PathBuf> {
    let dir = std::env::var_os(SPECS_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/provider-specs"));
    let missing: Vec<&str> = [OPENAI, GEMINI, VERTEX].into_iter().filter(|f| !dir.join(f).is_file()).collect();
    if missing.is_empty() {
        return Some(dir);
    }
    let message = format!(
        "the providers' published API descriptions ({}) are not in {}: run `.ci/provider-specs` from the \
         repository's root, and set {SPECS_VAR} to the directory it prints if that is not target/provider-specs",
        missing.join(", "),
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("skipped: {message}");
    None
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------
// The requests, as a user builds them.
// ---------------------------------------------------------------------------------

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn tools() -> Vec<Arc<ToolDefinition>> {
    // Strict-mode ready: every property required, no others.
    let weather = json!({"type": "object", "properties": {
        "city": {"type": "string", "description": "The city."},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    }, "required": ["city", "unit"], "additionalProperties": false});
    // An optional property: not strict.
    let notes = json!({"type": "object", "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
    }, "required": ["query"]});
    // No parameters.
    let clock = json!({"type": "object", "properties": {}});
    vec![
        Arc::new(ToolDefinition::new("get_weather", "The weather in a city.", weather)),
        Arc::new(ToolDefinition::new("search_notes", "Searches the user's notes.", notes)),
        Arc::new(ToolDefinition::new("now", "The time now.", clock)),
    ]
}

fn answer_schema() -> ResponseSchema {
    ResponseSchema::new(
        "weather_summary",
        json!({"type": "object", "properties": {
            "cities": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "celsius": {"type": "number"},
            }, "required": ["name", "celsius"], "additionalProperties": false}},
            "summary": {"type": "string"},
        }, "required": ["cities", "summary"], "additionalProperties": false}),
    )
}

/// A tool loop of two turns, with `reasoning` (the provider's own blocks, as it
/// returned them) before each assistant turn's content.
fn conversation(reasoning: &dyn Fn(usize) -> Vec<ContentBlock>) -> Vec<Arc<Message>> {
    let user = Message::user_with_images(
        "What's the weather where this photo was taken, and in Rome?",
        [Image::base64("image/png", PNG).unwrap(), Image::url("https://example.com/photos/harbour.png").unwrap()],
    );
    let mut calls = reasoning(1);
    calls.push(ContentBlock::text("Let me check both cities."));
    calls.push(ContentBlock::ToolUse(ToolUse::new(
        "call_1",
        "get_weather",
        json!({"city": "Oslo", "unit": "celsius"}),
    )));
    calls.push(ContentBlock::ToolUse(ToolUse::new(
        "call_2",
        "get_weather",
        json!({"city": "Rome", "unit": "celsius"}),
    )));
    // Arguments the model wrote that do not parse.
    calls.push(ContentBlock::ToolUse(ToolUse::from_raw_arguments("call_3", "search_notes", "{\"query\": oslo")));
    let results = Message {
        role: loopstack_model::Role::User,
        content: vec![
            ContentBlock::ToolResult(ToolResult {
                tool_use_id: "call_1".into(),
                content: "sunny, 21 °C".into(),
                is_error: false,
            }),
            ContentBlock::ToolResult(ToolResult {
                tool_use_id: "call_2".into(),
                content: r#"{"celsius": 25, "sky": "clear"}"#.into(),
                is_error: false,
            }),
            ContentBlock::ToolResult(ToolResult {
                tool_use_id: "call_3".into(),
                content: "the arguments are not JSON".into(),
                is_error: true,
            }),
            // A tool's image: the radar map of call_1.
            ContentBlock::Image {
                source: Image::base64("image/png", PNG).unwrap(),
                tool_use_id: Some("call_1".into()),
            },
        ],
    };
    let mut answer = reasoning(2);
    answer.push(ContentBlock::text("Oslo is sunny at 21 °C; Rome is clear at 25 °C."));
    vec![
        Arc::new(user),
        Arc::new(Message { role: loopstack_model::Role::Assistant, content: calls }),
        Arc::new(results),
        Arc::new(Message { role: loopstack_model::Role::Assistant, content: answer }),
        Arc::new(Message::user("Thanks. Sum it up, please.")),
    ]
}

/// The requests of a provider: the tool loop with every setting, the same asking for a
/// typed answer with reasoning off, and the least request there is.
fn requests_of(
    model: &str,
    reasoning: &dyn Fn(usize) -> Vec<ContentBlock>,
    options: &dyn Fn(ChatRequest) -> ChatRequest,
) -> Vec<ChatRequest> {
    let full = ChatRequest::new(model, conversation(reasoning))
        .system("You are a weather assistant. Be brief.")
        .tools(tools())
        .max_tokens(1024)
        .temperature(0.5)
        .stop_sequences(["END"])
        .prompt_cache_key("tenant-7")
        .reasoning_effort(ReasoningEffort::High);
    let full = options(full);
    let typed = ChatRequest::new(model, conversation(reasoning))
        .system("Answer in JSON.")
        .tools(tools())
        .reasoning_effort(ReasoningEffort::None)
        .response_schema(answer_schema());
    let low = ChatRequest::new(model, conversation(reasoning)).reasoning_effort(ReasoningEffort::Low);
    vec![full, typed, low, ChatRequest::new(model, vec![Message::user("Hi")])]
}

/// Sends each request plainly and streamed to `model`, which talks to `server` (which
/// refuses each with a 400 in the provider's shape), and returns what was sent: each
/// body with its label and path.
async fn sent(server: &Server, model: &dyn ChatModel, requests: &[ChatRequest]) -> Vec<(String, String, Value)> {
    let before = server.requests().len();
    let mut labels = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let err = model.chat(request).await.unwrap_err();
        assert!(matches!(err, LlmError::InvalidRequest { status: 400, .. }), "request {i}: {err:?}");
        labels.push(format!("{} request {i}", model.provider()));
        let mut stream = model.stream(request);
        let mut failed = false;
        while let Some(event) = stream.next().await {
            if let Err(err) = event {
                assert!(matches!(err, LlmError::InvalidRequest { status: 400, .. }), "request {i}: {err:?}");
                failed = true;
                break;
            }
        }
        assert!(failed, "request {i}, streamed: the refusal did not come back");
        labels.push(format!("{} request {i}, streamed", model.provider()));
    }
    let seen = server.requests().split_off(before);
    assert_eq!(seen.len(), labels.len(), "one HTTP request per call");
    labels.into_iter().zip(seen).map(|(label, r)| (label, r.path, r.body)).collect()
}

/// At most 2000 characters of `text`.
fn cut(text: &str) -> String {
    match text.char_indices().nth(2000) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// Fails with every reason of every body that does not fit.
fn assert_all_fit(problems: Vec<String>) {
    assert!(problems.is_empty(), "request bodies that do not fit the published schema:\n{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------
// OpenAPI: the document made JSON Schema, validated with boon.
// ---------------------------------------------------------------------------------

/// The OpenAPI document (3.1, whose Schema Object is JSON Schema 2020-12 with a few
/// keywords of its own) changed, minimally, so a JSON Schema validator checks what the
/// API takes:
///
/// 1. `nullable: true`, OpenAPI 3.0's, which this 3.1 document still has in places:
///    `null` is added to the schema's `type` (and `enum`), or, without a `type`, the
///    schema becomes `anyOf: [schema, {type: null}]`.
/// 2. `oneOf` becomes `anyOf`: the document's alternatives overlap (a user message
///    fits both `EasyInputMessage` and `InputMessage` in `InputItem`), and its
///    `discriminator`s (annotations to JSON Schema) say the API picks one by its
///    `type`; a body must fit at least one.
/// 3. `$recursiveAnchor`/`$recursiveRef: "#"` (draft 2019-09's, in one schema that
///    contains itself) become a `$ref` to that schema.
/// 4. Unknown fields: the document leaves objects open (no `additionalProperties`),
///    where the API refuses a field it does not know. Each object schema with
///    `properties` or `allOf` gets `unevaluatedProperties: false`, which counts the
///    properties of its `allOf`, `anyOf` and `$ref` parts; the parts themselves stay
///    open (a part of an `allOf`, and a branch or `$ref` of a schema with properties
///    of its own), since a part alone does not see its siblings' properties: a part's
///    `$ref` names an open copy of its schema, which stays closed where it is whole.
///    Free-form objects (no `properties`) stay open.
///
/// Returns how many schemas were made closed.
fn openapi_as_json_schema(doc: &mut Value) -> usize {
    let schemas = doc["components"]["schemas"].as_object_mut().expect("components.schemas");
    for (name, schema) in schemas.iter_mut() {
        let itself = format!("#/components/schemas/{name}");
        visit(schema, false, &mut |map, _| {
            map.remove("$recursiveAnchor");
            if map.remove("$recursiveRef").is_some() {
                map.insert("$ref".into(), itself.clone().into());
            }
            if let Some(nullable) = map.remove("nullable")
                && nullable == json!(true)
            {
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    values.push(Value::Null);
                }
                match map.get_mut("type") {
                    Some(Value::String(t)) => {
                        let t = std::mem::take(t);
                        map.insert("type".into(), json!([t, "null"]));
                    }
                    Some(Value::Array(types)) => types.push("null".into()),
                    _ => {
                        let inner = std::mem::take(map);
                        map.insert("anyOf".into(), json!([inner, {"type": "null"}]));
                    }
                }
            }
            if let Some(alternatives) = map.remove("oneOf") {
                map.insert("anyOf".into(), alternatives);
            }
        });
    }
    // A part refers to an open copy of the schema it names (`<name>__open`); the schema
    // stays closed where it is whole. A copy's own parts are parts too.
    let mut wanted = Vec::new();
    for schema in schemas.values_mut() {
        visit(schema, false, &mut |map, part| refer_to_open_copies(map, part, &mut wanted));
    }
    let mut made = HashSet::new();
    while let Some(name) = wanted.pop() {
        if !made.insert(name.clone()) {
            continue;
        }
        let mut copy = schemas.get(&name).unwrap_or_else(|| panic!("no schema {name}")).clone();
        visit(&mut copy, true, &mut |map, part| refer_to_open_copies(map, part, &mut wanted));
        schemas.insert(format!("{name}{OPEN}"), copy);
    }
    let mut closed = 0;
    for (name, schema) in schemas.iter_mut() {
        visit(schema, name.ends_with(OPEN), &mut |map, part| {
            let composed = map.contains_key("properties") || map.contains_key("allOf");
            if !part
                && composed
                && !map.contains_key("additionalProperties")
                && !map.contains_key("unevaluatedProperties")
            {
                map.insert("unevaluatedProperties".into(), false.into());
                closed += 1;
            }
        });
    }
    closed
}

/// The suffix of an open copy of a schema.
const OPEN: &str = "__open";

/// Points a `$ref` that is a part (of an `allOf`, or beside properties) at the open
/// copy of its schema, and asks for that copy.
fn refer_to_open_copies(map: &mut Map<String, Value>, part: bool, wanted: &mut Vec<String>) {
    let beside = ["properties", "allOf", "anyOf"].iter().any(|k| map.contains_key(*k));
    if let Some(Value::String(target)) = map.get_mut("$ref")
        && (part || beside)
        && let Some(name) = target.strip_prefix("#/components/schemas/")
        && !name.ends_with(OPEN)
    {
        wanted.push(name.to_owned());
        target.push_str(OPEN);
    }
}

/// Calls `on` with each schema in `schema` (itself first, then its subschemas), and
/// whether it is a part of an object described beside it (see
/// [`openapi_as_json_schema`]). Only schema keywords are followed, never `example`s.
fn visit(schema: &mut Value, part: bool, on: &mut dyn FnMut(&mut Map<String, Value>, bool)) {
    let Value::Object(map) = schema else { return };
    on(map, part);
    let beside = part || map.contains_key("properties") || map.contains_key("allOf");
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" => {
                for child in child.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
                    visit(child, false, on);
                }
            }
            "items" | "additionalProperties" | "not" | "contains" | "propertyNames" => visit(child, false, on),
            "prefixItems" => {
                for child in child.as_array_mut().into_iter().flatten() {
                    visit(child, false, on);
                }
            }
            "allOf" => {
                for child in child.as_array_mut().into_iter().flatten() {
                    visit(child, true, on);
                }
            }
            "anyOf" | "oneOf" => {
                for child in child.as_array_mut().into_iter().flatten() {
                    visit(child, beside, on);
                }
            }
            _ => {}
        }
    }
}

/// A compiled OpenAPI document: its request schemas by name.
struct OpenApi {
    schemas: boon::Schemas,
    compiled: Vec<(String, boon::SchemaIndex)>,
}

const OPENAPI_URL: &str = "https://api.openai.com/openapi.json";

impl OpenApi {
    /// Compiles the schemas of the request bodies of these `POST` paths.
    fn compile(mut doc: Value, paths: &[&str]) -> (Self, usize) {
        let closed = openapi_as_json_schema(&mut doc);
        let refs: Vec<(String, String)> = paths
            .iter()
            .map(|path| {
                let body = &doc["paths"][*path]["post"]["requestBody"]["content"]["application/json"]["schema"];
                let reference = body["$ref"].as_str().unwrap_or_else(|| panic!("POST {path}: no request body schema"));
                ((*path).to_owned(), reference.to_owned())
            })
            .collect();
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        compiler.add_resource(OPENAPI_URL, doc).expect("the document");
        let mut schemas = boon::Schemas::new();
        let compiled = refs
            .into_iter()
            .map(|(path, reference)| {
                let index = compiler
                    .compile(&format!("{OPENAPI_URL}{reference}"), &mut schemas)
                    .unwrap_or_else(|e| panic!("POST {path}'s schema {reference}: {e:#}"));
                (path, index)
            })
            .collect();
        (Self { schemas, compiled }, closed)
    }

    /// Why `body` does not fit the request schema of `POST path`.
    fn check(&self, path: &str, body: &Value) -> Result<(), String> {
        let (_, index) = self.compiled.iter().find(|(p, _)| p == path).expect("a compiled path");
        self.schemas.validate(body, *index).map_err(|e| {
            let mut reasons = Vec::new();
            leaves(&e, &mut reasons);
            reasons.sort();
            reasons.dedup();
            reasons.join("; ")
        })
    }
}

/// The innermost reasons of a validation error, where each is.
fn leaves(e: &boon::ValidationError<'_, '_>, out: &mut Vec<String>) {
    if e.causes.is_empty() {
        out.push(format!("at `{}`: {}", e.instance_location, e.kind));
    }
    for cause in &e.causes {
        leaves(cause, out);
    }
}

/// Refuses a request in OpenAI's error shape.
fn openai_refusal(_: &loopstack_model::testing::Request) -> Reply {
    Reply::json(
        400,
        json!({"error": {"message": "recorded", "type": "invalid_request_error", "param": null, "code": null}}),
    )
}

/// The Responses API's reasoning items, as the provider keeps them.
fn responses_reasoning(turn: usize) -> Vec<ContentBlock> {
    let data = json!({"id": format!("rs_{turn}"), "encrypted_content": format!("gAAAAB-secret-{turn}"), "summary": [
        {"type": "summary_text", "text": "**Checking the weather**\n\nTwo cities."},
    ]});
    // Another provider's reasoning, which is not sent.
    let other = Reasoning::new("anthropic", "Hmm.", json!({"signature": "EqQB"}));
    vec![
        ContentBlock::Reasoning(other),
        ContentBlock::Reasoning(Reasoning::new("openai-responses", "**Checking the weather**", data)),
    ]
}

#[tokio::test]
async fn openai_request_bodies_fit_openais_openapi_document() {
    let Some(dir) = specs() else { return };
    let (api, closed) = OpenApi::compile(read_json(&dir.join(OPENAI)), &["/chat/completions", "/responses"]);
    assert!(closed > 100, "only {closed} schemas closed to unknown fields");

    // The checks catch what they should.
    let good = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "Hi"}]});
    api.check("/chat/completions", &good).unwrap();
    for (bad, why) in [
        (json!({"model": "gpt-5", "messages": [{"role": "user", "content": "Hi"}], "bogus": 1}), "unknown field"),
        (
            json!({"model": "gpt-5", "messages": [{"role": "user", "content": "Hi", "name2": "x"}]}),
            "unknown message field",
        ),
        (json!({"model": "gpt-5", "messages": [{"role": "robot", "content": "Hi"}]}), "unknown role"),
        (json!({"model": "gpt-5"}), "no messages"),
        (
            json!({"model": "gpt-5", "messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "huge"}),
            "bad enum",
        ),
        (json!({"model": "gpt-5", "messages": [{"role": "user", "content": "Hi"}], "stream": "yes"}), "bad type"),
    ] {
        assert!(api.check("/chat/completions", &bad).is_err(), "{why} accepted: {bad}");
    }
    let bad = json!({"model": "gpt-5", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "extra": 1}]});
    assert!(api.check("/responses", &bad).is_err(), "an unknown field of an input item accepted");
    // Earlier assistant text as an `output_text` part without the output message's
    // fields (as this provider once sent it) does not fit; as a string it does.
    let bare = json!({"model": "gpt-5", "input": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]}]});
    assert!(api.check("/responses", &bare).is_err(), "a bare output_text part accepted");
    api.check(
        "/responses",
        &json!({"model": "gpt-5", "input": [{"type": "message", "role": "assistant", "content": "Hi"}]}),
    )
    .unwrap();
    api.check("/responses", &json!({"model": "gpt-5", "input": "Hi"})).unwrap();

    let mut problems = Vec::new();
    let mut checked = 0;

    // Chat Completions, with each wire setting.
    let server = Server::handle(openai_refusal).await;
    let options = |r: ChatRequest| {
        r.for_provider(
            OpenAiOptions::new()
                .service_tier("flex")
                .seed(7)
                .top_p(0.9)
                .safety_identifier("user-42")
                .parallel_tool_calls(true),
        )
    };
    // (Chat Completions sends no reasoning back: the Responses API's is left out.)
    let requests = requests_of("gpt-5-mini", &responses_reasoning, &options);
    let base = || OpenAi::new().api_key("sk-test").base_url(server.url()).retry_policy(RetryPolicy::disabled());
    let models =
        [base(), base().max_completion_tokens(true), base().structured_output(false), base().text_tool_calls(true)];
    for model in &models {
        for (label, path, body) in sent(&server, model, &requests).await {
            assert!(path.ends_with("/chat/completions"), "{label}: {path}");
            checked += 1;
            if let Err(why) = api.check("/chat/completions", &body) {
                problems.push(format!("{label}: {}\n  {}", cut(&why), cut(&body.to_string())));
            }
        }
    }

    // The Responses API: stateless with encrypted reasoning (the default), stored.
    let server = Server::handle(openai_refusal).await;
    let options = |r: ChatRequest| {
        r.for_provider(
            OpenAiOptions::new()
                .responses()
                .service_tier("priority")
                .top_p(0.9)
                .safety_identifier("user-42")
                .parallel_tool_calls(false),
        )
    };
    let requests = requests_of("gpt-5-mini", &responses_reasoning, &options);
    let base = || OpenAiResponses::new("sk-test").base_url(server.url()).retry_policy(RetryPolicy::disabled());
    for model in [base(), base().store(true).encrypted_reasoning(false), base().structured_output(false)] {
        for (label, path, body) in sent(&server, &model, &requests).await {
            assert!(path.ends_with("/responses"), "{label}: {path}");
            checked += 1;
            if let Err(why) = api.check("/responses", &body) {
                problems.push(format!("{label}: {}\n  {}", cut(&why), cut(&body.to_string())));
            }
        }
    }
    assert_eq!(checked, 4 * 8 + 3 * 8);
    assert_all_fit(problems);
}

// ---------------------------------------------------------------------------------
// Google's discovery documents: a checker of their own schema dialect.
// ---------------------------------------------------------------------------------

/// A discovery document's schemas, and a check of a value against one.
///
/// Discovery documents describe schemas in a dialect of Google's: `type` (`object`,
/// `array`, `string`, `integer`, `number`, `boolean`, `any`), `properties`, `items`,
/// `additionalProperties`, `$ref` by a schema's `id`, `enum`, `format` (`int32`,
/// `int64` and `uint64` as strings, `byte` as base64, ...), and "Required." at the start
/// of a field's description. It is not JSON Schema (`$ref` names an id, not a URI;
/// `required` is prose), and no crate of the field reads it (crates.io's discovery
/// crates generate clients from it, none validates a value), so this is a small
/// checker of it. It checks what the API checks of a body: no field it does not
/// know (Google's JSON parser refuses an unknown field with 400 `INVALID_ARGUMENT`),
/// each value of its type and format, each enum value one of the listed ones, and
/// each required field present (except the ones the method takes from its URL path).
struct Discovery {
    doc: Value,
}

impl Discovery {
    fn schema(&self, id: &str) -> Option<&Value> {
        self.doc["schemas"].get(id)
    }

    /// The problems of `body` as the request of method `method` (such as
    /// `models.generateContent`), each naming where.
    fn check(&self, method: &str, body: &Value) -> Vec<String> {
        let method = self.method(method);
        let request = method["request"]["$ref"].as_str().expect("the method's request schema");
        let in_path: Vec<&str> = method["parameters"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, p)| p["location"] == "path")
            .map(|(name, _)| name.as_str())
            .collect();
        let mut problems = Vec::new();
        self.value(&json!({"$ref": request}), body, "", &in_path, &mut problems);
        problems
    }

    /// A method by its dotted path among the document's resources.
    fn method(&self, dotted: &str) -> &Value {
        let (resources, name) = dotted.rsplit_once('.').expect("resource.method");
        let mut at = &self.doc;
        for resource in resources.split('.') {
            at = &at["resources"][resource];
        }
        let method = &at["methods"][name];
        assert!(method.is_object(), "the document has no method {dotted}");
        method
    }

    fn value(&self, schema: &Value, value: &Value, at: &str, in_path: &[&str], out: &mut Vec<String>) {
        let place = if at.is_empty() { "the body" } else { at };
        if let Some(id) = schema["$ref"].as_str() {
            match self.schema(id) {
                Some(target) => self.value(target, value, at, in_path, out),
                None => out.push(format!("{place}: its schema `{id}` is not in the document")),
            }
            return;
        }
        let kind = schema["type"].as_str().unwrap_or("any");
        let format = schema["format"].as_str().unwrap_or("");
        let fits = match (kind, value) {
            ("any", _) => true,
            ("object", Value::Object(fields)) => {
                self.object(schema, fields, at, in_path, out);
                true
            }
            ("array", Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    self.value(&schema["items"], item, &format!("{at}[{i}]"), &[], out);
                }
                true
            }
            ("string", Value::String(s)) => {
                if let Some(values) = schema["enum"].as_array()
                    && !values.iter().any(|v| v == s)
                {
                    out.push(format!("{place}: `{s}` is not one of {}", Value::Array(values.clone())));
                }
                match format {
                    "byte" if !is_base64(s) => out.push(format!("{place}: `{s}` is not base64 (format byte)")),
                    "int64" | "uint64" if s.parse::<i128>().is_err() => {
                        out.push(format!("{place}: `{s}` is not an integer (format {format})"));
                    }
                    _ => {}
                }
                true
            }
            // A 64-bit integer is a string in the document; Google's JSON parser takes a
            // number too.
            ("string", Value::Number(n)) => matches!(format, "int64" | "uint64") && (n.is_i64() || n.is_u64()),
            ("integer", Value::Number(n)) => match format {
                "int32" => n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                "uint32" => n.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
                _ => n.is_i64() || n.is_u64(),
            },
            ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => true,
            _ => false,
        };
        if !fits {
            let shown = if format.is_empty() { kind.to_owned() } else { format!("{kind} ({format})") };
            out.push(format!("{place}: `{value}` is not of type {shown}"));
        }
    }

    fn object(&self, schema: &Value, fields: &Map<String, Value>, at: &str, in_path: &[&str], out: &mut Vec<String>) {
        let properties = schema["properties"].as_object();
        let extra = schema.get("additionalProperties");
        for (name, value) in fields {
            let here = if at.is_empty() { name.clone() } else { format!("{at}.{name}") };
            match (properties.and_then(|p| p.get(name)), extra) {
                (Some(property), _) | (None, Some(property)) => self.value(property, value, &here, &[], out),
                (None, None) => {
                    let id = schema["id"].as_str().unwrap_or("the object");
                    out.push(format!("{here}: `{name}` is not a field of {id}"));
                }
            }
        }
        for (name, property) in properties.into_iter().flatten() {
            let required = property["description"].as_str().is_some_and(|d| d.starts_with("Required."));
            if required && !fields.contains_key(name) && !in_path.contains(&name.as_str()) {
                let id = schema["id"].as_str().unwrap_or("the object");
                let place = if at.is_empty() { "the body" } else { at };
                out.push(format!("{place}: {id}'s required field `{name}` is missing"));
            }
        }
    }
}

/// Base64, standard or URL-safe, padded or not: what Google's parser takes for `byte`.
fn is_base64(s: &str) -> bool {
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines.iter().any(|e| e.decode(s).is_ok())
}

/// Refuses a request in Google's error shape.
fn google_refusal(_: &loopstack_model::testing::Request) -> Reply {
    Reply::json(400, json!({"error": {"code": 400, "message": "recorded", "status": "INVALID_ARGUMENT"}}))
}

/// Gemini's reasoning as the provider keeps it: a thought summary with its
/// signature, and a bare signature that goes on the next part.
fn thoughts(provider: &'static str) -> impl Fn(usize) -> Vec<ContentBlock> {
    move |turn| {
        let signature = |s: String| json!({"thought_signature": base64::engine::general_purpose::STANDARD.encode(s)});
        vec![
            ContentBlock::Reasoning(Reasoning::new(
                provider,
                "**Planning**\n\nCheck both.",
                signature(format!("sig-{turn}a")),
            )),
            ContentBlock::Reasoning(Reasoning::new(provider, "", signature(format!("sig-{turn}b")))),
        ]
    }
}

/// The requests to a Gemini model, for Gemini 3 (a thinking level) and Gemini 2.5 (a
/// budget), with the typed options.
fn gemini_requests(provider: &'static str, options: GeminiOptions) -> Vec<ChatRequest> {
    let options = |r: ChatRequest| r.for_provider(options.clone());
    let mut all = requests_of("gemini-3-pro-preview", &thoughts(provider), &options);
    all.extend(requests_of("gemini-2.5-flash", &thoughts(provider), &options));
    // A conversation from another provider: no signatures, the documented skip value.
    all.push(ChatRequest::new("gemini-3-pro-preview", conversation(&responses_reasoning)).tools(tools()));
    all
}

#[tokio::test]
async fn gemini_request_bodies_fit_googles_discovery_documents() {
    let Some(dir) = specs() else { return };
    let gemini = Discovery { doc: read_json(&dir.join(GEMINI)) };
    let vertex = Discovery { doc: read_json(&dir.join(VERTEX)) };
    assert_eq!(
        (gemini.doc["name"].as_str(), gemini.doc["version"].as_str()),
        (Some("generativelanguage"), Some("v1beta"))
    );
    assert_eq!((vertex.doc["name"].as_str(), vertex.doc["version"].as_str()), (Some("aiplatform"), Some("v1")));
    let gemini_method = "models.generateContent";
    let vertex_method = "projects.locations.publishers.models.generateContent";
    for (doc, method, stream) in [
        (&gemini, gemini_method, "models.streamGenerateContent"),
        (&vertex, vertex_method, "projects.locations.publishers.models.streamGenerateContent"),
    ] {
        // Streaming takes the same request.
        assert_eq!(doc.method(method)["request"], doc.method(stream)["request"]);
    }

    // The checker catches what it should.
    let good = json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]});
    assert_eq!(gemini.check(gemini_method, &good), Vec::<String>::new());
    assert_eq!(vertex.check(vertex_method, &good), Vec::<String>::new());
    for (bad, why) in [
        (json!({"contents": [{"role": "user", "parts": [{"text": "Hi", "bogus": 1}]}]}), "unknown field"),
        (json!({"contents": [{"role": "user", "parts": [{"text": 7}]}]}), "bad type"),
        (json!({"contents": [], "generationConfig": {"thinkingConfig": {"thinkingLevel": "HUGE"}}}), "bad enum"),
        (json!({"contents": [], "generationConfig": {"maxOutputTokens": 1.5}}), "not an integer"),
        (
            json!({"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "not base64!"}}]}]}),
            "bad bytes",
        ),
        (json!({"contents": [{"parts": [{"functionCall": {"args": {}}}]}]}), "a required field missing"),
        (
            json!({"contents": [], "tools": [{"functionDeclarations": [{"name": "f", "description": "d", "parameters": {"type": "object"}}]}]}),
            "a lowercase schema type",
        ),
    ] {
        assert!(!gemini.check(gemini_method, &bad).is_empty(), "{why} accepted: {bad}");
    }

    let mut problems = Vec::new();
    let mut checked = 0;
    let options = || GeminiOptions::new().safety("HARM_CATEGORY_DANGEROUS_CONTENT", HarmBlockThreshold::BlockOnlyHigh);

    // The Gemini API.
    let server = Server::handle(google_refusal).await;
    let requests = gemini_requests("gemini", options().cached_content("cachedContents/abc123"));
    let base = || Gemini::new("key").base_url(server.url()).retry_policy(RetryPolicy::disabled());
    for model in [base(), base().include_thoughts(false)] {
        for (label, path, body) in sent(&server, &model, &requests).await {
            let model = body_model(&requests, &label);
            let plain = format!("/v1beta/models/{model}:generateContent");
            let streamed = format!("/v1beta/models/{model}:streamGenerateContent?alt=sse");
            assert!(path == plain || path == streamed, "{label}: {path}");
            checked += 1;
            for problem in gemini.check(gemini_method, &body) {
                problems.push(format!("{label}: {problem}\n  {body}"));
            }
        }
    }

    // Vertex AI.
    let server = Server::handle(google_refusal).await;
    let requests = gemini_requests(
        "vertex",
        options().vertex().cached_content("projects/p/locations/us-central1/cachedContents/abc123"),
    );
    let model =
        Gemini::vertex("p", "us-central1", "token").base_url(server.url()).retry_policy(RetryPolicy::disabled());
    for (label, path, body) in sent(&server, &model, &requests).await {
        let name = body_model(&requests, &label);
        let resource = format!("/v1/projects/p/locations/us-central1/publishers/google/models/{name}");
        assert!(path.starts_with(&resource), "{label}: {path}");
        checked += 1;
        for problem in vertex.check(vertex_method, &body) {
            problems.push(format!("{label}: {problem}\n  {body}"));
        }
    }
    assert_eq!(checked, 3 * 9 * 2);
    assert_all_fit(problems);
}

/// The model of the request a label names (`<provider> request <i>...`).
fn body_model<'a>(requests: &'a [ChatRequest], label: &str) -> &'a str {
    let i: usize =
        label.split(' ').nth(2).and_then(|i| i.trim_end_matches(',').parse().ok()).expect("a request number");
    &requests[i].model
}
