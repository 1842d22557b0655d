//! A command line for your own binary: register your workflows and agents once,
//! and operate their runs from a shell (feature `cli`).
//!
//! ```no_run
//! use loopstack::prelude::*;
//! # struct MyFlow;
//! # static DEF: loopstack::Definition = loopstack::Definition::new("my_flow", &[loopstack::START, loopstack::END], &[loopstack::TransitionDef::new("go", &[loopstack::START], loopstack::END)]);
//! # impl Workflow for MyFlow {
//! #     type State = (); type Input = ();
//! #     fn definition(&self) -> &'static loopstack::Definition { &DEF }
//! #     fn init(&self, _: ()) {}
//! #     fn guard(&self, _: usize, _: &()) -> bool { true }
//! #     fn transition<'a>(&'a self, _: usize, _: &'a mut (), _: &'a mut RunContext, _: Option<serde_json::Value>)
//! #         -> loopstack::BoxFuture<'a, Result<(), loopstack::TransitionError>> { Box::pin(async { Ok(()) }) }
//! # }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     loopstack::cli::main(|runtime| runtime.register(MyFlow)).await
//! }
//! ```
//!
//! ```text
//! my-app run my_flow --input '{"topic": "rust"}' --wait   # start a run and drive it here
//! my-app runs --status waiting                            # list runs, newest first
//! my-app show RUN_ID                                      # history, conversation, state, documents
//! my-app signal RUN_ID approve '{"reviewer": "ada"}'      # answer what a run waits for
//! my-app approve RUN_ID [CALL_ID...]                      # let an agent's waiting tool calls run
//! my-app deny RUN_ID [CALL_ID...] --reason "not today"    # or refuse them, telling the model why
//! my-app resume RUN_ID | retry RUN_ID | cancel RUN_ID
//! my-app schedule add nightly report --cron "0 7 * * *" --input '{"team": "ops"}'
//! my-app schedule list | pause ID | resume ID | delete ID  # recurring runs, which workers start
//! my-app worker                                           # drive queued and woken runs until Ctrl-C
//! my-app mcp                                              # the workflows as an MCP server's tools, over stdio
//! my-app --db postgres://postgres@127.0.0.1/app runs      # the store: a SQLite file (default), memory, PostgreSQL
//! ```
//!
//! A binary with a name, a version, a default database and commands of its own
//! builds on [`App`] (`main` is `App` over `loopstack.db`, unnamed): every command
//! uses the app's store, and the commands that only read runs (`runs`, `show`, ...)
//! refuse a SQLite file that is not there rather than create an empty one.
//!
//! Every command takes `--json` for output scripts read (one JSON object), and
//! `--db` for the store. Exit status: 0 when the command did what it was asked (a
//! run that waits is a success: it prints what it waits for), 1 with one line
//! `error: ...` on standard error when it did not (an unknown run or workflow, a
//! refused signal, a run that failed), 2 for a command line that does not parse.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::{RunError, RunId, RunOutcome, RunQuery, RunStatus, Runtime, Store, StoreError};

mod app;
mod args;
mod error;
mod eval;
mod execute;
#[cfg(feature = "mcp")]
mod mcp;
mod output;
mod store;

pub use app::{App, DEFAULT_DB, main};
pub use args::{Cli, Command, EvalCommand, ForkFlags, LogFormat, ScheduleCommand};
pub use error::CliError;
pub use eval::EVAL_FAILED;
use eval::{EvalArgs, eval};
pub use execute::execute;
use output::{outcome_text, show};
use store::redact_url;
pub use store::{open, open_existing};

/// A token cancelled when the process is asked to stop: SIGTERM (what Kubernetes,
/// systemd and `docker stop` send) or SIGINT (Ctrl-C). The `worker` and `serve`
/// commands shut down gracefully on it and exit 0; give it to
/// [`Worker::run`](loopstack_core::Worker::run) in a binary of your own for the same.
///
/// The handlers are installed when it returns, so a signal that comes right after
/// is not lost to the default action (which ends the process at once). Must be
/// called within a Tokio runtime: it spawns the task that waits.
pub fn shutdown_on_signal() -> loopstack_core::CancellationToken {
    let token = loopstack_core::CancellationToken::new();
    let stop = token.clone();
    #[cfg(unix)]
    let (mut term, mut interrupt) = {
        use tokio::signal::unix::{SignalKind, signal};
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    };
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            /// The next delivery of a signal whose handler is installed; never otherwise.
            async fn next(signal: &mut std::io::Result<tokio::signal::unix::Signal>) {
                match signal {
                    Ok(signal) => {
                        signal.recv().await;
                    }
                    Err(_) => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(&mut term) => {}
                () = next(&mut interrupt) => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("asked to stop: shutting down gracefully");
        stop.cancel();
    });
    token
}

/// Installs the command line's `tracing` subscriber, writing to standard error in
/// `format`, filtered by `RUST_LOG` or else `default` (an `EnvFilter` directive).
/// An app that installed a subscriber of its own before keeps it.
fn init_logging(format: LogFormat, default: &str) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // An error means a subscriber is already installed: the app's own, kept.
    let _ = match format {
        LogFormat::Json => logs.json().try_init(),
        LogFormat::Human => logs.with_ansi(std::io::stderr().is_terminal()).try_init(),
    };
}

/// The filter of a command's logs unless `RUST_LOG` is set: the long-running
/// commands say what they do; the others answer on standard output, and their
/// errors as one `error:` line.
fn default_log_filter(command: Option<&Command>) -> &'static str {
    match command {
        Some(Command::Worker { once: false, .. }) => "info",
        #[cfg(feature = "serve")]
        Some(Command::Serve { .. }) => "info",
        #[cfg(feature = "mcp-server")]
        Some(Command::Mcp) => "info",
        _ => "off",
    }
}

/// One line `error: ...` on standard error, and exit status 1.
fn fail(message: &str) -> ExitCode {
    eprintln!("error: {}", one_line(message));
    ExitCode::FAILURE
}

/// How a command needs its store.
enum Opening {
    /// It opens none (`workflows`).
    None,
    /// It may create it (`run`, `worker`, `serve`, the app's own commands).
    Create,
    /// It reads runs that must be there (named for the error).
    Existing(&'static str),
}

impl Opening {
    fn for_command(command: &Command) -> Self {
        match command {
            Command::Workflows => Self::None,
            Command::Run { .. } | Command::Worker { .. } => Self::Create,
            #[cfg(feature = "serve")]
            Command::Serve { .. } => Self::Create,
            #[cfg(feature = "mcp-server")]
            Command::Mcp => Self::Create,
            Command::Runs { .. } => Self::Existing("runs"),
            Command::Show { .. } => Self::Existing("show"),
            Command::Export { .. } => Self::Existing("export"),
            Command::Signal { .. } => Self::Existing("signal"),
            Command::Approve { .. } => Self::Existing("approve"),
            Command::Deny { .. } => Self::Existing("deny"),
            Command::Answer { .. } => Self::Existing("answer"),
            Command::Resolve { .. } => Self::Existing("resolve"),
            Command::Resume { .. } => Self::Existing("resume"),
            Command::Retry { .. } => Self::Existing("retry"),
            Command::Fork { .. } => Self::Existing("fork"),
            Command::Eval(_) => Self::Create,
            Command::Cancel { .. } => Self::Existing("cancel"),
            Command::Schedule { action } if matches!(**action, ScheduleCommand::Add { .. }) => Self::Create,
            Command::Schedule { .. } => Self::Existing("schedule"),
        }
    }
}

/// A parsed command line: one of loopstack's commands, or one of the app's.
#[derive(Debug)]
#[non_exhaustive]
pub enum Parsed<E> {
    /// One of loopstack's, with `db` resolved; run it with [`execute`].
    Loopstack(Cli),
    /// One of the app's.
    App {
        /// The app's command.
        command: E,
        /// The store: `--db`, the environment variable, or the app's default.
        db: String,
        /// Whether `--json` was given.
        json: bool,
    },
}

/// What the app's own command gets beside itself.
#[derive(Clone)]
#[non_exhaustive]
pub struct CommandContext {
    /// The runtime, with the app's workflows, over the store the command line names.
    pub runtime: Runtime,
    /// That store, as named (`--db`, the environment variable, or the default).
    pub db: String,
    /// Whether `--json` was given: print one JSON object instead of text.
    pub json: bool,
}

impl std::fmt::Debug for CommandContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandContext")
            .field("db", &redact_url(&self.db))
            .field("json", &self.json)
            .finish_non_exhaustive()
    }
}

/// No commands of the app's own: [`App::run`]'s `E`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoCommands {}

impl clap::FromArgMatches for NoCommands {
    fn from_arg_matches(_: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))
    }
    fn update_from_arg_matches(&mut self, _: &clap::ArgMatches) -> Result<(), clap::Error> {
        match *self {}
    }
}

impl Subcommand for NoCommands {
    fn augment_subcommands(command: clap::Command) -> clap::Command {
        command
    }
    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        command
    }
    fn has_subcommand(_: &str) -> bool {
        false
    }
}

/// A message as one line: line breaks and other control characters (a tab aside)
/// written as escapes (`\n`, `\u{2028}`), so `error: ...` stays one line whatever
/// the message holds (a name, a model's reply, a panic).
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    let breaks = |c: char| (c.is_control() && c != '\t') || matches!(c, '\u{2028}' | '\u{2029}');
    if !text.contains(breaks) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if breaks(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Subcommand)]
    enum Own {
        /// Says hello.
        Hello {
            #[arg(long)]
            to: String,
        },
    }

    fn parse(args: &[&str]) -> Parsed<Own> {
        let app = App::new("desk").version("1.2.3").default_db("desk.db").db_env("LOOPSTACK_TEST_UNSET_DB_VAR");
        app.try_parse_from(args.iter().copied()).unwrap()
    }

    #[test]
    fn every_command_uses_the_apps_database_unless_db_names_another() {
        match parse(&["desk", "runs"]) {
            Parsed::Loopstack(cli) => assert!(cli.db == "desk.db" && matches!(cli.command, Command::Runs { .. })),
            other => panic!("{other:?}"),
        }
        match parse(&["desk", "show", &RunId::new().to_string(), "--db", "b.db"]) {
            Parsed::Loopstack(cli) => assert_eq!(cli.db, "b.db"),
            other => panic!("{other:?}"),
        }
        match parse(&["desk", "--json", "hello", "--to", "ada"]) {
            Parsed::App { command, db, json } => {
                assert_eq!((command, db.as_str(), json), (Own::Hello { to: "ada".into() }, "desk.db", true));
            }
            other => panic!("{other:?}"),
        }
        match parse(&["desk", "--db", "memory", "hello", "--to", "ada"]) {
            Parsed::App { db, .. } => assert_eq!(db, "memory"),
            other => panic!("{other:?}"),
        }
        let version = App::new("desk").version("1.2.3").try_parse_from::<Own, _, _>(["desk", "--version"]).unwrap_err();
        assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
        assert_eq!(version.to_string(), "desk 1.2.3\n");
        let unknown = App::new("desk").try_parse_from::<Own, _, _>(["desk", "frobnicate"]).unwrap_err();
        assert_eq!(unknown.kind(), clap::error::ErrorKind::InvalidSubcommand);
    }

    #[tokio::test]
    async fn a_read_only_command_refuses_a_sqlite_file_that_is_not_there() {
        let db = std::env::temp_dir().join(format!("loopstack-cli-unit-{}.db", RunId::new()));
        let db = db.to_str().unwrap();
        let error = open_existing(db, "runs").await.err().unwrap();
        assert!(matches!(&error, CliError::NoDatabase { command: "runs", .. }), "{error:?}");
        assert!(!std::path::Path::new(db).exists());
        assert!(open_existing("memory", "runs").await.is_ok());
    }

    #[test]
    fn database_urls_are_shown_without_their_password() {
        assert_eq!(redact_url("postgres://ada:s3cret@db:5432/app"), "postgres://ada:***@db:5432/app");
        assert_eq!(redact_url("postgres://ada@db/app"), "postgres://ada@db/app");
        assert_eq!(redact_url("runs.db"), "runs.db");
        assert_eq!(
            redact_url("postgres://ada@db/app?password=s3cret&sslmode=require"),
            "postgres://ada@db/app?password=***&sslmode=require"
        );
    }
}
