//! The PostgreSQL store.

use std::str::FromStr as _;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

/// The PostgreSQL migrations, in order.
const MIGRATIONS: &[(i64, &str, &str)] = &[(1, "runs", include_str!("../migrations/postgres/0001_runs.sql"))];

/// A [`Store`](loopstack_core::Store) in PostgreSQL: for many workers and processes
/// sharing runs.
///
/// Every write of a drive is a compare-and-set on the run row (its epoch and step),
/// so a worker whose lease was taken over cannot commit. Commits use synchronous
/// commit as the server is configured. The schema is created and migrated on
/// connect, in the connection's schema (`search_path`).
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    lease: Option<Duration>,
    last: std::sync::Arc<crate::sql::LastStates>,
}

impl PostgresStore {
    /// Connects to `url` (such as `postgres://postgres@127.0.0.1:5432/postgres`) and
    /// brings the schema up to date.
    pub async fn connect(url: &str) -> Result<Self, loopstack_core::StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(crate::sql::backend)?;
        Self::connect_with(options, PgPoolOptions::new().max_connections(8)).await
    }

    /// Connects to `url` with every table in `schema` (created if missing): for
    /// several independent stores in one database, such as one per test.
    pub async fn connect_schema(url: &str, schema: &str) -> Result<Self, loopstack_core::StoreError> {
        let valid = !schema.is_empty() && schema.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(loopstack_core::StoreError::Corrupt(format!(
                "schema name `{schema}` must be ASCII letters, digits and underscores"
            )));
        }
        let options = PgConnectOptions::from_str(url).map_err(crate::sql::backend)?;
        let setup = PgPool::connect_with(options.clone()).await.map_err(crate::sql::backend)?;
        sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .execute(&setup)
            .await
            .map_err(crate::sql::backend)?;
        setup.close().await;
        let options = options.options([("search_path", schema)]);
        Self::connect_with(options, PgPoolOptions::new().max_connections(8)).await
    }

    /// Connects with options and a pool of your own.
    pub async fn connect_with(
        options: PgConnectOptions,
        pool: PgPoolOptions,
    ) -> Result<Self, loopstack_core::StoreError> {
        let pool = pool.connect_with(options).await.map_err(crate::sql::backend)?;
        let migrator = crate::sql::migrator(crate::sql::Embedded(MIGRATIONS)).await?;
        migrator.run(&pool).await.map_err(|e| loopstack_core::StoreError::Backend(Box::new(e)))?;
        Ok(Self { pool, lease: Some(crate::DEFAULT_LEASE), last: Default::default() })
    }

    /// Sets the lease runtimes and workers take on runs they drive (30 s unless set).
    #[must_use]
    pub fn with_lease(mut self, lease: Option<Duration>) -> Self {
        self.lease = lease;
        self
    }

    /// The connection pool, for queries of your own.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

crate::sql::sql_store!(PostgresStore, sqlx::Postgres, " FOR UPDATE SKIP LOCKED");
