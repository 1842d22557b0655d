//! sqlx 0.8's migrator on SQLite, which the previous SQLite store ran: files it wrote
//! are the ones the store must keep opening. Written here on rusqlite so the tests
//! need no second SQLite driver (only one crate in a build may link `sqlite3`); it
//! does what `sqlx-core` 0.8.6's `Migrator::run` and `sqlx-sqlite` 0.8.6's `Migrate`
//! did: the same bookkeeping table, versions and descriptions from file names, the
//! SHA-384 of each migration's SQL, each migration in a transaction with its row,
//! and the same refusals (a dirty version, an applied version it lacks, a checksum
//! that differs).

use sha2::{Digest as _, Sha384};

/// One migration as sqlx read it from a file name: `0002_parent_signal.sql` is
/// version 2, "parent signal".
pub(crate) struct Migration {
    pub(crate) version: i64,
    pub(crate) description: String,
    pub(crate) checksum: Vec<u8>,
    sql: &'static str,
}

pub(crate) fn migrations(files: &[(&str, &'static str)]) -> Vec<Migration> {
    files
        .iter()
        .map(|&(name, sql)| {
            let (version, rest) = name.split_once('_').expect("a migration file name is <version>_<description>.sql");
            Migration {
                version: version.parse().expect("a migration's version is a number"),
                description: rest.trim_end_matches(".sql").replace('_', " "),
                checksum: Sha384::digest(sql.as_bytes()).to_vec(),
                sql,
            }
        })
        .collect()
}

/// Why sqlx's migrator would stop.
#[derive(Debug, PartialEq)]
pub(crate) enum Refused {
    Dirty(i64),
    VersionMissing(i64),
    VersionMismatch(i64),
}

/// A connection as the previous store opened its file (WAL).
pub(crate) fn open(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn
}

/// `Migrator::run`: applies what is missing, or says why it will not.
pub(crate) fn run(conn: &mut rusqlite::Connection, migrations: &[Migration]) -> Result<(), Refused> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    success BOOLEAN NOT NULL,
    checksum BLOB NOT NULL,
    execution_time BIGINT NOT NULL
);",
    )
    .unwrap();
    let dirty: Option<i64> = conn
        .query_row("SELECT version FROM _sqlx_migrations WHERE success = false ORDER BY version LIMIT 1", [], |r| {
            r.get(0)
        })
        .ok();
    if let Some(version) = dirty {
        return Err(Refused::Dirty(version));
    }
    let applied = bookkeeping(conn);
    if let Some(missing) = applied.iter().find(|a| !migrations.iter().any(|m| m.version == a.0)) {
        return Err(Refused::VersionMissing(missing.0));
    }
    for migration in migrations {
        match applied.iter().find(|a| a.0 == migration.version) {
            Some(a) if a.3 != migration.checksum => return Err(Refused::VersionMismatch(migration.version)),
            Some(_) => {}
            None => {
                let tx = conn.transaction().unwrap();
                tx.execute_batch(migration.sql).unwrap();
                tx.execute(
                    "INSERT INTO _sqlx_migrations ( version, description, success, checksum, execution_time ) \
                     VALUES ( ?1, ?2, TRUE, ?3, -1 )",
                    rusqlite::params![migration.version, migration.description, migration.checksum],
                )
                .unwrap();
                tx.commit().unwrap();
                conn.execute(
                    "UPDATE _sqlx_migrations SET execution_time = ?1 WHERE version = ?2",
                    [0, migration.version],
                )
                .unwrap();
            }
        }
    }
    Ok(())
}

/// `(version, description, success, checksum)` of each applied migration.
pub(crate) fn bookkeeping(conn: &rusqlite::Connection) -> Vec<(i64, String, bool, Vec<u8>)> {
    let mut stmt =
        conn.prepare("SELECT version, description, success, checksum FROM _sqlx_migrations ORDER BY version").unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(Result::unwrap).collect()
}

/// What sqlx's migrator would write for each of `migrations`.
pub(crate) fn expected(migrations: &[Migration]) -> Vec<(i64, String, bool, Vec<u8>)> {
    migrations.iter().map(|m| (m.version, m.description.clone(), true, m.checksum.clone())).collect()
}
