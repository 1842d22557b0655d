//! Opening the store a command line names.

use super::*;

/// Opens the store `--db` names.
pub async fn open(db: &str) -> Result<std::sync::Arc<dyn Store>, CliError> {
    if db == "memory" {
        return Ok(std::sync::Arc::new(loopstack_core::MemoryStore::new()));
    }
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let store = loopstack_store::PostgresStore::connect(db)
                .await
                .map_err(|e| CliError::Open { db: redact_url(db), reason: e.to_string() })?;
            return Ok(std::sync::Arc::new(store));
        }
        #[cfg(not(feature = "postgres"))]
        return Err(CliError::Open { db: redact_url(db), reason: "built without the `postgres` feature".into() });
    }
    let store = loopstack_store::SqliteStore::open(db)
        .await
        .map_err(|e| CliError::Open { db: db.to_owned(), reason: e.to_string() })?;
    Ok(std::sync::Arc::new(store))
}

/// Opens the store `db` names for a command that reads runs already there: a
/// SQLite file that does not exist is [`CliError::NoDatabase`], not a new empty
/// store. `command` is the command's name, for the message.
pub async fn open_existing(db: &str, command: &'static str) -> Result<std::sync::Arc<dyn Store>, CliError> {
    let url = db.starts_with("postgres://") || db.starts_with("postgresql://");
    if db != "memory" && !url && !std::path::Path::new(db).exists() {
        return Err(CliError::NoDatabase { db: db.to_owned(), command });
    }
    open(db).await
}

/// A database URL without its password (in the authority or as a `password=`
/// parameter).
pub(super) fn redact_url(url: &str) -> String {
    let url = match url.split_once('?') {
        Some((base, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| {
                    if kv.to_ascii_lowercase().starts_with("password=") {
                        "password=***".to_owned()
                    } else {
                        kv.to_owned()
                    }
                })
                .collect();
            format!("{base}?{}", query.join("&"))
        }
        None => url.to_owned(),
    };
    let url = url.as_str();
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let auth = &url[scheme + 3..at];
            match auth.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
