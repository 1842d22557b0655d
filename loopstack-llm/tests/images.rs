//! Images: a user's and a tool's, on the wire of both providers, through the
//! scripted model, stored once in the run, and refused when too large or of a type
//! no provider takes.

mod common;

use common::{Reply, Server};
use loopstack_core::{Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::image::IMAGE_DOCUMENT;
use loopstack_llm::{
    Agent, Anthropic, ChatModel, ChatRequest, ContentBlock, Image, ImageError, MediaType, Message, OpenAi, Role,
    ScriptedModel, ToolCallResult, ToolUse,
};
use serde_json::{Value, json};

/// A PNG header and `extra` bytes of a pattern: a payload whose base64 is unique.
fn png(extra: usize) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    bytes.extend((0..extra).map(|i| (i * 7 % 251) as u8));
    bytes
}

fn data_of(image: &Image) -> String {
    match image {
        Image::Base64 { data, .. } => data.to_string(),
        other => panic!("not base64: {other:?}"),
    }
}

/// A request with a user's image and URL image, a call, and its result with an image.
fn request(user: &Image, chart: &Image) -> ChatRequest {
    let call = ToolUse::new("call_1", "chart", json!({"month": "May"}));
    let result = ToolCallResult::new("call_1", "chart", ToolOutput::text("the chart of May").with_image(chart.clone()));
    ChatRequest::new(
        "m",
        vec![
            Message::user_with_images(
                "What is in these?",
                [user.clone(), Image::url("https://example.com/a.png").unwrap()],
            ),
            Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] },
            ToolCallResult::message(&[result]),
        ],
    )
}

#[tokio::test]
async fn anthropic_sends_image_blocks_and_images_inside_tool_results() {
    let reply = json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "A chart."}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    });
    let server = Server::start(vec![Reply::json(200, reply)]).await;
    let (user, chart) = (Image::from_bytes(&png(10)).unwrap(), Image::from_bytes(&png(20)).unwrap());
    let model = Anthropic::new("k").base_url(server.url());
    model.chat(&request(&user, &chart)).await.unwrap();
    let mut body = server.requests()[0].body.clone();
    // Prompt caching marks the last blocks; what is checked here is the images.
    for message in body["messages"].as_array_mut().unwrap() {
        for block in message["content"].as_array_mut().unwrap() {
            block.as_object_mut().unwrap().remove("cache_control");
        }
    }
    let messages = &body["messages"];
    assert_eq!(
        messages[0]["content"],
        json!([
            {"type": "text", "text": "What is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data_of(&user)}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        ])
    );
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(
        result["content"],
        json!([
            {"type": "text", "text": "the chart of May"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data_of(&chart)}},
        ])
    );
    // The tool's image is in its result, not beside it (the cache mark aside).
    assert_eq!(messages[2]["content"].as_array().unwrap().len(), 1);
}

fn openai_reply() -> Value {
    json!({"id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "A chart."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
}

#[tokio::test]
async fn openai_sends_image_parts_and_a_tools_images_in_a_user_message_after_its_result() {
    let server = Server::start(vec![Reply::json(200, openai_reply())]).await;
    let (user, chart) = (Image::from_bytes(&png(10)).unwrap(), Image::from_bytes(&png(20)).unwrap());
    let model = OpenAi::new().api_key("k").base_url(server.url());
    model.chat(&request(&user, &chart)).await.unwrap();
    let messages = server.requests()[0].body["messages"].clone();
    assert_eq!(
        messages[0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": user.data_url().unwrap()}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ]})
    );
    // A tool message takes text only: the result's text there, its image right after.
    assert_eq!(messages[2], json!({"role": "tool", "tool_call_id": "call_1", "content": "the chart of May"}));
    assert_eq!(
        messages[3],
        json!({"role": "user", "content": [
            {"type": "text", "text": "The result of call call_1 came with this image:"},
            {"type": "image_url", "image_url": {"url": chart.data_url().unwrap()}},
        ]})
    );
    assert_eq!(messages.as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn text_tool_calls_name_a_tools_image_and_send_a_users_as_parts() {
    let server = Server::start(vec![Reply::json(200, openai_reply())]).await;
    let (user, chart) = (Image::from_bytes(&png(10)).unwrap(), Image::from_bytes(&png(20)).unwrap());
    let model = OpenAi::new().base_url(server.url()).text_tool_calls(true);
    model.chat(&request(&user, &chart)).await.unwrap();
    let messages = server.requests()[0].body["messages"].clone();
    assert_eq!(messages[0]["content"][1], json!({"type": "image_url", "image_url": {"url": user.data_url().unwrap()}}));
    assert_eq!(
        messages[2],
        json!({"role": "user", "content":
            r#"{"name": "chart", "arguments": {"month":"May"}} returned: the chart of May [image/png image, not shown]"#})
    );
}

/// A tool that returns a chart: text and an image, the same image at every call.
struct Chart(Image);

#[async_trait::async_trait]
impl Tool for Chart {
    fn name(&self) -> &str {
        "chart"
    }
    fn description(&self) -> &str {
        "Draws a chart."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("the chart").with_image(self.0.clone()))
    }
}

#[tokio::test]
async fn the_scripted_model_sees_the_images_and_the_store_keeps_each_once() {
    let photo = Image::from_bytes(&png(3000)).unwrap();
    let chart = Image::from_bytes(&png(4000)).unwrap();
    let mut model = ScriptedModel::new();
    for n in 0..4 {
        model = model.tool_call("chart", json!({"n": n}));
    }
    let model = model.text("Four charts.");
    let tools = ToolRegistry::new().with(Chart(chart.clone())).unwrap();
    let agent = Agent::new(model.clone(), "scripted", tools);
    let runtime = Runtime::new();
    let reply = agent.ask_with_images(&runtime, "Chart it", [photo.clone()]).await.unwrap();
    assert_eq!(reply.text, "Four charts.");

    // Every turn's request shows the data of both: the photo, then each chart.
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    let last = &requests[4].messages;
    assert_eq!(last[0].images().next(), Some((&photo, None)));
    let charts: Vec<_> = last.iter().flat_map(|m| m.images()).filter(|(_, call)| call.is_some()).collect();
    assert_eq!(charts.len(), 4);
    assert!(charts.iter().all(|(image, _)| *image == &chart));

    // The store holds each image's data once: one document each, the messages and
    // every checkpoint refer to it.
    let store = runtime.store();
    let (photo_data, chart_data) = (data_of(&photo), data_of(&chart));
    let mut stored = String::new();
    for doc in store.document_versions(reply.run_id).await.unwrap() {
        stored.push_str(doc.content.get());
    }
    let history = store.history(reply.run_id).await.unwrap();
    assert_eq!(history.len(), 10, "five turns, four batches of calls and the answer: ten checkpoints");
    for step in std::iter::once(0).chain(history.iter().map(|s| s.step)) {
        stored.push_str(store.checkpoint(reply.run_id, step).await.unwrap().state.get());
    }
    stored.push_str(store.load_run(reply.run_id).await.unwrap().state.get());
    assert_eq!(stored.matches(&photo_data).count(), 1);
    assert_eq!(stored.matches(&chart_data).count(), 1);
    let images = store.documents(reply.run_id).await.unwrap();
    let images: Vec<_> = images.iter().filter(|d| d.doc_type == IMAGE_DOCUMENT).collect();
    assert_eq!(images.len(), 2);
    assert_eq!(images[0].metadata.get("media_type"), Some(json!("image/png")));
}

#[test]
fn images_over_the_limit_or_of_another_type_are_typed_errors() {
    let big = png(loopstack_llm::image::DEFAULT_MAX_IMAGE_BYTES);
    let err = Image::from_bytes(&big).unwrap_err();
    assert_eq!(err, ImageError::TooLarge { bytes: big.len(), limit: 5 * 1024 * 1024 });
    assert_eq!(err.to_string(), format!("the image is {} bytes, over the limit of 5242880 bytes", big.len()));
    assert!(Image::from_bytes_with_limit(&big, big.len()).is_ok());
    assert_eq!(Image::from_bytes(b"BM not a bitmap we take"), Err(ImageError::UnknownFormat));
    let err = Image::base64("image/bmp", "AAAA").unwrap_err();
    assert_eq!(err, ImageError::UnsupportedMediaType("image/bmp".into()));
    assert!(err.to_string().contains("image/png, image/jpeg, image/gif or image/webp"));
    assert_eq!(Image::base64("image/webp", "AAAA").unwrap().media_type(), Some(MediaType::Webp));
}

#[test]
fn messages_without_images_read_and_write_as_before() {
    // A message saved before images existed reads back unchanged, and writes the same.
    let old =
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"sunny","is_error":false}]}"#;
    let message: Message = serde_json::from_str(old).unwrap();
    assert_eq!(serde_json::to_string(&message).unwrap(), old);
    let with = Message::user("Look").with_image(Image::url("https://example.com/a.png").unwrap());
    let text = serde_json::to_string(&with).unwrap();
    assert!(text.contains(r#"{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}"#), "{text}");
    assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), with);
    assert_eq!(with.to_string(), "user: Look; image https://example.com/a.png");
}
