//! Durable stores for [loopstack](https://docs.rs/loopstack) runs, behind the
//! [`Store`](loopstack_core::Store) trait: [`SqliteStore`] (one file; the embedded
//! default, feature `sqlite`) and [`PostgresStore`] (many workers; feature
//! `postgres`).
//!
//! Both keep the same schema shape: a narrow `runs` row per run, rewritten by each
//! commit under a compare-and-set on its epoch and step, and append-only
//! `checkpoints`, `documents` and `signals` that refer to it by the row's integer id.
//! One transition is one database transaction, with the signal it sends another run
//! if any ([`OutSignal`](loopstack_core::store::OutSignal): a child telling its parent
//! that it finished). A checkpoint keeps the state after its
//! step in full, or as an exact patch of the state before it (chains of at most 16),
//! or not at all when the step left it as it was; a run's current state is its latest
//! checkpoint's. Queries are checked at run time, so the crate builds without a
//! database; the schema is embedded and migrated when a store opens.
//!
//! Both keep an event log too (`events`, `event_listeners`), so that run events reach
//! subscribers in every process that shares the store
//! ([`loopstack_core::events`]): written only while someone listens, in one
//! `INSERT` per batch, and pruned by age and count. On SQLite a follower polls it
//! every [`SQLITE_EVENT_POLL`]; on PostgreSQL appends `NOTIFY` the newest id (see
//! [`NOTIFY_CHANNEL`]) and followers poll every [`POSTGRES_FALLBACK_POLL`] besides.
//!
//! The SQLite store runs on rusqlite, its one connection on a thread of its own
//! that takes each store call as a whole (so the async runtime never waits on the
//! disk); the PostgreSQL store on sqlx. Both record their migrations in sqlx's
//! `_sqlx_migrations` table, so files and schemas written by earlier versions open
//! as they are.
//!
//! What it costs against the plain drivers writing the same steps is the overhead
//! benchmark's W4 (`cargo run --release --example bench -- --workload W4 --compare`;
//! its figures are in the repository's `docs/benchmarks.md`): a checkpointed agent
//! run is about 2 KB of SQLite and 3 KB of PostgreSQL.
//!
//! ```
//! use loopstack_core::{RunQuery, RunStatus, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), loopstack_core::StoreError> {
//! let store = loopstack_store::SqliteStore::memory().await?;
//! let waiting = store.list_runs(&RunQuery::new().status(RunStatus::Waiting)).await?;
//! assert!(waiting.runs.is_empty());
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod events;
#[cfg(feature = "postgres")]
mod schedules;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;

#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use events::SQLITE_EVENT_POLL;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use events::{NOTIFY_CHANNEL, POSTGRES_FALLBACK_POLL};

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::SqliteStore;

/// The SQLite driver the [`SqliteStore`] runs on, for
/// [`SqliteStore::with_connection`].
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use rusqlite;

/// The lease a runtime takes on a run of a SQL store while it drives it, unless the
/// store is set otherwise: renewed with every commit and every 10 s in between.
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(30);
