//! A document row the SQLite store cannot read back as it wrote it (metadata that is
//! not a JSON object, or not JSON at all) is a typed `Corrupt` error, never a panic
//! or a silently empty value, and the store goes on reading the rest.

use std::sync::Arc;

use loopstack_core::serde_json::value::RawValue;
use loopstack_core::*;
use loopstack_store::SqliteStore;
use serde_json::json;

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

#[tokio::test]
async fn a_document_whose_metadata_is_not_an_object_is_a_corrupt_row() {
    let store = SqliteStore::memory().await.unwrap();
    let run = store.create_run(NewRun::new(RunId::new(), "notes", "h", raw("{}"))).await.unwrap();
    let other = store.create_run(NewRun::new(RunId::new(), "notes", "h", raw("{}"))).await.unwrap();
    for run in [&run, &other] {
        let mut cp = Checkpoint::new(
            run.run_id,
            run.fence(),
            StepRecord::new(1, "write", START, "written"),
            RunStatus::Running,
            raw("{}"),
        );
        cp.documents = vec![Arc::new(Document {
            seq: 0,
            doc_type: "note".into(),
            key: None,
            version: 1,
            tags: vec!["t".into()],
            metadata: Metadata::from_json(r#"{"by":"ada","usage":{"input_tokens":5}}"#.into()).unwrap(),
            content: raw(r#"{"text":"hi"}"#),
            step: 1,
        })];
        store.commit(cp).await.unwrap();
    }
    // What was written reads back as it was.
    let docs = store.documents(run.run_id).await.unwrap();
    assert_eq!(docs[0].metadata.get("by"), Some(json!("ada")));
    assert_eq!(docs[0].metadata.get_raw("usage").map(RawValue::get), Some(r#"{"input_tokens":5}"#));

    for bad in ["[1]", "\"by\"", "{\"by\":", "not json"] {
        store
            .with_connection(move |conn| {
                conn.execute("UPDATE documents SET metadata = ?1 WHERE run = 1", [bad]).unwrap();
            })
            .await
            .unwrap();
        let err = store.documents(run.run_id).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{bad}: {err:?}");
        // The other run's documents still read.
        assert_eq!(store.documents(other.run_id).await.unwrap()[0].metadata.get("by"), Some(json!("ada")));
    }
}
