//! Why a command failed.

use super::*;

/// Why a command failed: one line for the user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// A run could not be driven, or a workflow is not registered.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The store failed, or a run is not there.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A schedule could not be made, stored or changed.
    #[error(transparent)]
    Schedule(#[from] loopstack_core::ScheduleError),
    /// `resume` found the run held by a driver whose lease has not run out.
    #[error(
        "run {run_id} is leased by `{owner}` until {until}: its driver may be alive; \
         if its process is dead, take the run over with `resume {run_id} --take-over`"
    )]
    Leased {
        /// The run.
        run_id: RunId,
        /// The lease's holder.
        owner: String,
        /// When the lease runs out.
        until: loopstack_core::Timestamp,
    },
    /// An argument is not valid JSON.
    #[error("{what} is not valid JSON: {source}")]
    Json {
        /// Which argument.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The API could not be served.
    #[error("{0}")]
    Serve(String),
    /// A command that reads runs already there (`runs`, `show`, `signal`, ...) was
    /// pointed at a SQLite file that does not exist.
    #[error(
        "there is no database at `{db}`: `{command}` reads runs already stored and does not create one \
         (a command that starts a run does; --db names another)"
    )]
    NoDatabase {
        /// The SQLite path.
        db: String,
        /// The command.
        command: &'static str,
    },
    /// `approve` or `deny` named a run that waits for no decision on tool calls.
    #[error("run {run_id} does not wait for approval: {why}")]
    NotAwaitingApproval {
        /// The run.
        run_id: RunId,
        /// How it stands instead, in words (what it waits for, or that it ended).
        why: String,
    },
    /// `approve` or `deny` named a call that does not wait for a decision.
    #[error("call `{call_id}` does not wait for a decision on run {run_id}; the calls that wait: {}", .pending.join(", "))]
    NotPending {
        /// The run.
        run_id: RunId,
        /// The call named.
        call_id: String,
        /// The calls that wait, as `id (tool)`.
        pending: Vec<String>,
    },
    /// Cases of an eval failed; `output` is its report, printed before the error.
    #[error("{failed} of {cases} eval cases failed")]
    CasesFailed {
        /// The cases that failed.
        failed: usize,
        /// The cases run.
        cases: usize,
        /// The report (table or JSON).
        output: String,
    },
    /// An eval's dataset, scorer or earlier report does not read.
    #[error("eval: {0}")]
    Eval(String),
    /// `deny` was given an empty `--reason`.
    #[error("the --reason is empty: the model reads it to know why its call was denied")]
    EmptyReason,
    /// The app's own command failed.
    #[error("{0}")]
    App(#[source] loopstack_core::BoxError),
    /// An MCP server of `--mcp` or `--mcp-url` could not be started, connected or
    /// its tools registered.
    #[cfg(feature = "mcp")]
    #[error(transparent)]
    Mcp(#[from] loopstack_llm::mcp::McpError),
    /// MCP servers were declared (`--mcp`, `--mcp-url`, the configuration file,
    /// [`App::mcp_server`]) for an app whose register closure takes no tools
    /// ([`App::run`], [`App::run_with`] rather than [`App::run_mcp`]).
    #[error(
        "this app takes no MCP servers: --mcp, --mcp-url, a configuration file's and App::mcp_server's servers need \
         an app built with App::run_mcp"
    )]
    NoMcpTools,
    /// The configuration file (`--config`, `LOOPSTACK_CONFIG`) could not be read, or
    /// says something it may not.
    #[error("the configuration file {path}: {message}")]
    Config {
        /// The file, as named.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The store could not be opened.
    #[error("could not open the store `{db}`: {reason}")]
    Open {
        /// The `--db` given.
        db: String,
        /// Why.
        reason: String,
    },
}
