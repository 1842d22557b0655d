//! A PostgreSQL schema of its own for one test, on the server of
//! `LOOPSTACK_DATABASE_URL` (by default the local one `.ci/run` starts). A test that
//! needs it fails without it: it never skips.

use loopstack::RunId;
use loopstack_store::PostgresStore;

/// A fresh schema, `loopstack_test_<tag>_<id>`; stores connect to it and
/// [`TestSchema::drop`] removes it with everything in it.
pub(crate) struct TestSchema {
    pub(crate) url: String,
    pub(crate) name: String,
}

/// The server the PostgreSQL tests use.
pub(crate) fn url() -> String {
    std::env::var("LOOPSTACK_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

impl TestSchema {
    /// A new schema's name; nothing is created until a store connects.
    pub(crate) fn new(tag: &str) -> Self {
        Self { url: url(), name: format!("loopstack_test_{tag}_{}", RunId::new().0.simple()) }
    }

    /// A new schema with a store connected to it.
    pub(crate) async fn connect(tag: &str) -> (Self, PostgresStore) {
        let schema = Self::new(tag);
        let store = schema.store().await;
        (schema, store)
    }

    /// A store in the schema (each call its own pool), creating the schema the first
    /// time. Panics, saying what is missing, when the server cannot be reached.
    pub(crate) async fn store(&self) -> PostgresStore {
        PostgresStore::connect_schema(&self.url, &self.name).await.unwrap_or_else(|e| {
            panic!(
                "PostgreSQL at {} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}",
                self.url
            )
        })
    }

    /// The command-line arguments that open the schema's store.
    pub(crate) fn args(&self) -> Vec<String> {
        vec!["--postgres".to_owned(), self.url.clone(), "--schema".to_owned(), self.name.clone()]
    }

    /// Drops the schema and everything in it.
    pub(crate) async fn drop(self) {
        PostgresStore::drop_schema(&self.url, &self.name).await.unwrap();
    }
}
