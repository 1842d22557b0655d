//! A request to the SQLite store that panics: its caller gets a typed error that
//! says so, the transaction it held is rolled back, and the store goes on serving.

use loopstack_core::serde_json::value::RawValue;
use loopstack_core::*;
use loopstack_store::SqliteStore;

fn runs(conn: &loopstack_store::rusqlite::Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_request_that_panics_is_an_error_and_the_store_goes_on() {
    let store = SqliteStore::memory().await.unwrap();
    let state = RawValue::from_string("{}".into()).unwrap();
    let kept = store.create_run(NewRun::new(RunId::new(), "kept", "h", state.clone())).await.unwrap();

    // A write the panic interrupts, inside its transaction: rolled back.
    let err = store
        .with_connection(|conn| {
            let tx = conn.transaction().unwrap();
            tx.execute("DELETE FROM runs", []).unwrap();
            panic!("the caller's bug");
        })
        .await
        .map(|_: ()| ())
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
    assert!(err.to_string().contains("panicked: the caller's bug"), "{err}");

    // The connection's thread is alive, and nothing the panic began was kept.
    assert_eq!(store.with_connection(|conn| runs(conn)).await.unwrap(), 1);
    assert_eq!(store.load_run(kept.run_id).await.unwrap().workflow, "kept");
    let another = store.create_run(NewRun::new(RunId::new(), "another", "h", state)).await.unwrap();
    assert_eq!(store.load_run(another.run_id).await.unwrap().step, 0);
}
