//! Images in a SQLite store: saved once however many steps follow, and shown to
//! the model again by a runtime that reads them back from the file after a restart.

use loopstack::SqliteStore;
use loopstack::llm::image::IMAGE_DOCUMENT;
use loopstack::llm::{Agent, AgentStatus, Image, ScriptedModel, ToolDecision, ToolDecisions};
use loopstack::prelude::*;

/// A PNG header and `extra` bytes of a pattern: a payload whose base64 is unique.
fn png(extra: usize, seed: usize) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    bytes.extend((0..extra).map(|i| ((i + seed) * 7 % 251) as u8));
    bytes
}

fn chart() -> Image {
    Image::from_bytes(&png(2000, 1)).unwrap()
}

/// Draws a chart; a person approves each call.
#[tool(approve)]
async fn draw_chart(month: String) -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::text(format!("the chart of {month}")).with_image(chart()))
}

fn data(image: &Image) -> String {
    let url = image.data_url().unwrap();
    url.split_once(',').unwrap().1.to_owned()
}

#[tokio::test]
async fn images_are_stored_once_and_read_back_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("loopstack-images-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("runs.db");
    let photo = Image::from_bytes(&png(3000, 2)).unwrap();
    let model = ScriptedModel::new().tool_call("draw_chart", serde_json::json!({"month": "May"})).text("May was warm.");
    let agent = || Agent::new(model.clone(), "scripted", ToolRegistry::new().with(DrawChart).unwrap());

    let first = Runtime::with_store(SqliteStore::open(&db).await.unwrap());
    let reply = agent().ask_with_images(&first, "Chart May like this", [photo.clone()]).await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    drop(first);

    // Another process: it has only the file.
    let second = Runtime::with_store(SqliteStore::open(&db).await.unwrap());
    let decision = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let reply = agent().decide(&second, reply.run_id, decision).await.unwrap();
    assert_eq!(reply.text, "May was warm.");
    let last = &model.requests()[1].messages;
    assert_eq!(last[0].images().next(), Some((&photo, None)));
    assert_eq!(last[2].images().next().map(|(image, _)| image), Some(&chart()));

    let store = second.store();
    let mut stored = String::new();
    for doc in store.document_versions(reply.run_id).await.unwrap() {
        stored.push_str(doc.content.get());
    }
    let history = store.history(reply.run_id).await.unwrap();
    for step in std::iter::once(0).chain(history.iter().map(|s| s.step)) {
        stored.push_str(store.checkpoint(reply.run_id, step).await.unwrap().state.get());
    }
    assert_eq!(stored.matches(&data(&photo)).count(), 1);
    assert_eq!(stored.matches(&data(&chart())).count(), 1);
    let documents = store.documents(reply.run_id).await.unwrap();
    assert_eq!(documents.iter().filter(|d| d.doc_type == IMAGE_DOCUMENT).count(), 2);
    drop(second);
    std::fs::remove_dir_all(&dir).unwrap();
}
