//! One store of each kind for a test of the runtime's behaviour on all of them.

use std::sync::Arc;

use loopstack::{MemoryStore, RunId, Store};
use loopstack_store::SqliteStore;

use super::postgres::TestSchema;

/// A store for one test, and what removes it afterwards.
pub(crate) struct TestStore {
    pub(crate) store: Arc<dyn Store>,
    cleanup: Cleanup,
}

enum Cleanup {
    None,
    File(std::path::PathBuf),
    Schema(TestSchema),
}

impl TestStore {
    pub(crate) fn memory() -> Self {
        Self { store: Arc::new(MemoryStore::new()), cleanup: Cleanup::None }
    }

    /// A SQLite file of its own in the temporary directory.
    pub(crate) async fn sqlite() -> Self {
        let path = std::env::temp_dir().join(format!("loopstack-test-{}.db", RunId::new()));
        let store = SqliteStore::open(&path).await.unwrap();
        Self { store: Arc::new(store), cleanup: Cleanup::File(path) }
    }

    /// A PostgreSQL schema of its own.
    pub(crate) async fn postgres() -> Self {
        let (schema, store) = TestSchema::connect("runtime").await;
        Self { store: Arc::new(store), cleanup: Cleanup::Schema(schema) }
    }

    pub(crate) async fn remove(self) {
        drop(self.store);
        match self.cleanup {
            Cleanup::None => {}
            Cleanup::File(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut file = path.clone().into_os_string();
                    file.push(suffix);
                    let _ = std::fs::remove_file(file);
                }
            }
            Cleanup::Schema(schema) => schema.drop().await,
        }
    }
}

/// One test of the async fn `scenario(Arc<dyn Store>)` per store, in a module named
/// after it: `in_memory`, `on_sqlite`, `on_postgres`.
macro_rules! on_every_store {
    ($scenario:ident) => {
        mod $scenario {
            use $crate::common::stores::TestStore;

            #[tokio::test]
            async fn in_memory() {
                let store = TestStore::memory();
                super::$scenario(store.store.clone()).await;
                store.remove().await;
            }

            #[tokio::test]
            async fn on_sqlite() {
                let store = TestStore::sqlite().await;
                super::$scenario(store.store.clone()).await;
                store.remove().await;
            }

            #[tokio::test]
            async fn on_postgres() {
                let store = TestStore::postgres().await;
                super::$scenario(store.store.clone()).await;
                store.remove().await;
            }
        }
    };
}
pub(crate) use on_every_store;
