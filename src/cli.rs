//! A command line for your own binary: register your workflows and agents once,
//! and operate their runs from a shell (feature `cli`, on by default).
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

#[cfg(feature = "mcp")]
mod mcp;
use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::{RunError, RunId, RunOutcome, RunQuery, RunStatus, Runtime, Store, StoreError};

/// The command line: a store and a command.
#[derive(Debug, Parser)]
#[command(
    about = "Operate loopstack runs: start, list, show, signal, approve or deny, resume, retry and cancel them, and run a worker."
)]
#[non_exhaustive]
pub struct Cli {
    /// Where runs are kept: a SQLite file, `memory`, or a postgres:// URL (feature `postgres`).
    #[arg(long, global = true, default_value = "loopstack.db")]
    pub db: String,
    /// Print one JSON object instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Also give the app's agents the tools of the MCP server this command line starts,
    /// spoken to over stdio (repeatable, before the command): "npx -y @modelcontextprotocol/server-everything".
    #[cfg(feature = "mcp")]
    #[arg(long, value_name = "COMMAND ARGS...")]
    pub mcp: Vec<String>,
    /// Also give the app's agents the tools of the MCP server at this URL, over
    /// streamable HTTP (repeatable, before the command).
    #[cfg(feature = "mcp")]
    #[arg(long, value_name = "URL")]
    pub mcp_url: Vec<String>,
    /// The environment variable that holds the --mcp-url servers' bearer token (kept
    /// out of what runs record, as one of the runtime's secrets).
    #[cfg(feature = "mcp")]
    #[arg(long, value_name = "VAR")]
    pub mcp_token_env: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// A command.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Lists the registered workflows.
    Workflows,
    /// Starts a run of WORKFLOW: queued for a worker, or driven here with --wait.
    Run {
        /// The registered workflow.
        workflow: String,
        /// The run's input, as JSON (null when left out).
        #[arg(long)]
        input: Option<String>,
        /// Drive the run here until it ends or waits, and print how it stands.
        #[arg(long)]
        wait: bool,
    },
    /// Lists runs, newest first.
    Runs {
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// Only runs with this status (queued, running, waiting, completed, failed, cancelled).
        #[arg(long)]
        status: Option<RunStatus>,
        /// Only runs at this place.
        #[arg(long)]
        place: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Shows a run: how it stands, its history with times, its conversation, state and documents.
    Show {
        /// The run.
        run: RunId,
    },
    /// Prints a run as JSON (its record and every document) for replaying it
    /// offline: `loopstack::llm::RunExport::load` and `Recording::from_export` read it.
    Export {
        /// The run.
        run: RunId,
    },
    /// Sends a signal (a wait transition's name) with an optional JSON payload, and drives the run on.
    Signal {
        /// The run.
        run: RunId,
        /// The wait transition.
        name: String,
        /// The payload, as JSON (null when left out).
        payload: Option<String>,
    },
    /// Approves tool calls an agent's run waits to have decided (every waiting call
    /// when none is named), and drives the run on: the approved calls run.
    Approve {
        /// The run (of any agent, named or not), waiting at `awaiting_approval`.
        run: RunId,
        /// The calls' ids, as `show` lists them; all waiting calls when left out.
        calls: Vec<String>,
    },
    /// Says what an at-most-once tool call whose outcome is unknown returned (its run
    /// waits at `awaiting_outcome`: its process died mid-call), and drives the run
    /// on: the call is not run again, and the model reads RESULT as its result.
    /// (`approve` runs such a call again; `deny` answers it as not run.)
    Resolve {
        /// The run (of any agent, named or not), waiting at `awaiting_outcome`.
        run: RunId,
        /// The call's id, as `show` lists it.
        call: String,
        /// What the call did, for the model to read as its result.
        result: String,
    },
    /// Denies tool calls an agent's run waits to have decided (every waiting call
    /// when none is named), and drives the run on: the model reads the reason as
    /// each call's result.
    Deny {
        /// The run (of any agent, named or not), waiting at `awaiting_approval`.
        run: RunId,
        /// The calls' ids, as `show` lists them; all waiting calls when left out.
        calls: Vec<String>,
        /// Why, for the model to read.
        #[arg(long)]
        reason: String,
    },
    /// Continues a run from its last checkpoint. A run a live driver holds (its
    /// lease has not run out) is left alone, unless --take-over says its process is
    /// known to be dead.
    Resume {
        /// The run.
        run: RunId,
        /// Takes the run over from its driver now, without waiting for the lease to
        /// run out: for a run whose process was killed. The old driver's writes are
        /// refused from then on.
        #[arg(long)]
        take_over: bool,
    },
    /// Forks a run at a step, with edits, and drives the fork: what if it had gone
    /// on under another system prompt, model or state?
    Fork {
        /// The run.
        run: RunId,
        /// The step to fork from (`show RUN` lists them).
        #[arg(long)]
        step: u64,
        /// What the fork changes.
        #[command(flatten)]
        edits: Box<ForkFlags>,
    },
    /// Runs an eval: each case of DATASET (JSONL: {"id", "input", "expected"} a line)
    /// a run of the registered agent (--agent) or workflow (--workflow), scored,
    /// shown as a table (or JSON). The same --id over the same store resumes an eval that was interrupted: its
    /// finished cases are read back, not run again. Exit status: 0 when every case
    /// passed, 3 when some failed (the report is printed all the same), 1 on an
    /// error, 2 for a command line that does not parse.
    Eval(Box<EvalCommand>),
    /// Restarts a failed or cancelled run from its last checkpoint.
    Retry {
        /// The run.
        run: RunId,
    },
    /// Cancels a run that has not ended, and its children.
    Cancel {
        /// The run.
        run: RunId,
        /// Why, recorded with the run.
        #[arg(long, default_value = "cancelled from the command line")]
        reason: String,
    },
    /// Serves the HTTP API (`loopstack::serve`) until Ctrl-C.
    #[cfg(feature = "serve")]
    Serve {
        /// The address to listen on; beyond loopback a --token is required.
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// The port.
        #[arg(long, default_value_t = 7878)]
        port: u16,
        /// A bearer token every request must carry (also LOOPSTACK_TOKEN).
        #[arg(long, env = "LOOPSTACK_TOKEN")]
        token: Option<String>,
        /// Also drive the runs that can move, as `worker` does: runs queued from
        /// elsewhere (`run` without `--wait`), due timers, runs whose driver died.
        #[arg(long)]
        worker: bool,
    },
    /// Serves the registered workflows and agents as the tools of an MCP server over
    /// stdio (`loopstack::mcp_server`), until the client closes it: for Claude
    /// Desktop and other MCP clients that start the server. Standard output carries
    /// only the protocol.
    #[cfg(feature = "mcp-server")]
    Mcp,
    /// Recurring runs of a workflow, on a cron expression or an interval, which
    /// workers start at each due time: add, list, pause, resume, delete.
    Schedule {
        /// What to do with schedules (boxed: `add` has many flags).
        #[command(subcommand)]
        action: Box<ScheduleCommand>,
    },
    /// Drives the runs that can move (queued, woken by a signal or timer, orphaned)
    /// and starts due schedules, until Ctrl-C.
    Worker {
        /// How many runs at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Drive what can move now, once, and exit.
        #[arg(long)]
        once: bool,
    },
}

/// A `schedule` command.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum ScheduleCommand {
    /// Stores schedule ID: a run of WORKFLOW with --input at each time of --cron
    /// (UTC unless --timezone) or --every, started by the workers of WORKFLOW.
    Add {
        /// The schedule's id: ASCII letters, digits, `-`, `_`, `.`, `:`.
        id: String,
        /// The registered workflow.
        workflow: String,
        /// A cron expression: "0 7 * * *" (5 fields) or with seconds first (6).
        #[arg(long, required_unless_present = "every", conflicts_with = "every")]
        cron: Option<String>,
        /// An interval, counted from now: 90s, 15m, 1h30m, 1d.
        #[arg(long)]
        every: Option<String>,
        /// The IANA time zone the cron expression is read in (UTC unless given).
        #[arg(long, requires = "cron")]
        timezone: Option<String>,
        /// Each run's input, as JSON (null when left out).
        #[arg(long)]
        input: Option<String>,
        /// Due times no worker started in time: `skip` them, or `catch-up-once`.
        #[arg(long, default_value = "skip")]
        missed: String,
        /// How late a due time may still start as on time (60s unless given).
        #[arg(long)]
        grace: Option<String>,
        /// Store it paused.
        #[arg(long)]
        paused: bool,
    },
    /// Lists the schedules: when each is next due, and its last run.
    List,
    /// Pauses a schedule: it starts nothing until resumed.
    Pause {
        /// The schedule.
        id: String,
    },
    /// Resumes a schedule, next due at its first time from now.
    Resume {
        /// The schedule.
        id: String,
    },
    /// Deletes a schedule; the runs it started stay.
    Delete {
        /// The schedule.
        id: String,
    },
}

/// What `eval` is given (boxed in [`Command::Eval`], the largest command).
#[derive(Debug, clap::Args)]
#[non_exhaustive]
pub struct EvalCommand {
    /// The dataset, a JSONL file.
    pub dataset: std::path::PathBuf,
    /// The registered agent.
    #[arg(long, required_unless_present = "workflow", conflicts_with = "workflow")]
    pub agent: Option<String>,
    /// A registered workflow of any kind instead of an agent: each case's input is
    /// its input as JSON, and the scorers read its final state as JSON.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Runs per case.
    #[arg(long, default_value_t = 1)]
    pub repeats: u32,
    /// Cases run at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The eval's id: the id of an earlier eval resumes it.
    #[arg(long)]
    pub id: Option<RunId>,
    /// How each case is scored (repeatable): `contains` (the answer contains the
    /// case's `expected`), `exact`, `matches:REGEX`, `called:TOOL`.
    #[arg(long, default_value = "contains")]
    pub scorer: Vec<String>,
    /// An earlier report (`eval --json`) to compare with: which cases got better or worse.
    #[arg(long, value_name = "OLD.json")]
    pub compare: Option<std::path::PathBuf>,
}

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
    /// `--mcp` or `--mcp-url` was given to an app whose register closure takes no
    /// tools ([`App::run`], [`App::run_with`] rather than [`App::run_mcp`]).
    #[error("this app takes no MCP servers: --mcp and --mcp-url need an app built with App::run_mcp")]
    NoMcpTools,
    /// The store could not be opened.
    #[error("could not open the store `{db}`: {reason}")]
    Open {
        /// The `--db` given.
        db: String,
        /// Why.
        reason: String,
    },
}

/// Parses the process's arguments, opens the store, lets `register` add the
/// workflows to the runtime, runs the command, prints its output and returns the
/// exit status.
///
/// The framework's own command line, named after the binary, over `loopstack.db` by
/// default. A binary with a name, a version, a database and commands of its own
/// uses [`App`]; this is `App::loopstack().run(register)`.
pub async fn main(register: impl FnOnce(Runtime) -> Runtime) -> ExitCode {
    App::loopstack().run(register).await
}

/// Your binary's command line, with loopstack's commands beside your own.
///
/// The app names itself (usage and `--version` say so), gives its version, its
/// default database and an environment variable that overrides it, and may add
/// subcommands of its own: any `clap::Subcommand` enum, whose commands appear in
/// `--help` beside `run`, `runs`, `show` and the rest, and are handed to your code
/// with the runtime over the same store.
///
/// Which store a command uses: `--db`, else the environment variable
/// ([`App::db_env`]) when set and not empty, else [`App::default_db`]
/// (`loopstack.db` unless set), for every command, the app's own included.
///
/// A SQLite file is created only by the commands that start or drive runs (`run`,
/// `worker`, `serve`, `mcp`) and by the app's own commands. The others (`runs`, `show`,
/// `signal`, `approve`, `deny`, `resume`, `retry`, `cancel`) work on runs that
/// must already be there: on a file that does not exist they fail with
/// [`CliError::NoDatabase`] (one `error:` line, exit 1) instead of creating an
/// empty store and reporting nothing.
/// `workflows` lists what the binary registers and opens no store.
///
/// ```no_run
/// use clap::Subcommand;
/// use loopstack::prelude::*;
/// # struct Ticket;
/// # static DEF: loopstack::Definition = loopstack::Definition::new("ticket", &[loopstack::START, loopstack::END], &[loopstack::TransitionDef::new("go", &[loopstack::START], loopstack::END)]);
/// # impl Workflow for Ticket {
/// #     type State = (); type Input = ();
/// #     fn definition(&self) -> &'static loopstack::Definition { &DEF }
/// #     fn init(&self, _: ()) {}
/// #     fn guard(&self, _: usize, _: &()) -> bool { true }
/// #     fn transition<'a>(&'a self, _: usize, _: &'a mut (), _: &'a mut RunContext, _: Option<serde_json::Value>)
/// #         -> loopstack::BoxFuture<'a, Result<(), loopstack::TransitionError>> { Box::pin(async { Ok(()) }) }
/// # }
///
/// /// The helpdesk's own commands.
/// #[derive(Subcommand)]
/// enum Helpdesk {
///     /// Opens a ticket.
///     Open {
///         #[arg(long)]
///         subject: String,
///     },
/// }
///
/// #[tokio::main]
/// async fn main() -> std::process::ExitCode {
///     loopstack::cli::App::new("helpdesk")
///         .version(env!("CARGO_PKG_VERSION"))
///         .about("The helpdesk: tickets and their runs.")
///         .default_db("helpdesk.db")
///         .db_env("HELPDESK_DB")
///         .run_with(
///             |runtime| runtime.register(Ticket),
///             |command, cx| async move {
///                 match command {
///                     Helpdesk::Open { subject } => {
///                         let run = cx.runtime.submit_by_name("ticket", serde_json::json!({ "subject": subject })).await?;
///                         println!("{run} opened");
///                     }
///                 }
///                 Ok(())
///             },
///         )
///         .await
/// }
/// ```
///
/// ```text
/// helpdesk --version                  # helpdesk 0.1.0
/// helpdesk open --subject "Printer"   # the app's own command, over helpdesk.db
/// helpdesk runs                       # the same runs, from helpdesk.db
/// HELPDESK_DB=/srv/helpdesk.db helpdesk runs
/// ```
///
/// A subcommand of the app's that has the name of one of loopstack's is a
/// programming error clap reports when the command is built (in debug builds).
#[derive(Debug, Clone)]
#[must_use]
pub struct App {
    name: Option<&'static str>,
    version: Option<&'static str>,
    about: Option<&'static str>,
    default_db: String,
    db_env: Option<String>,
    /// Whether the register closure takes the MCP servers' tools ([`App::run_mcp`]).
    takes_mcp: bool,
}

/// The store [`App::default_db`] names when the app does not.
pub const DEFAULT_DB: &str = "loopstack.db";

impl App {
    /// An app named `name`: the name usage, help and `--version` show.
    pub fn new(name: &'static str) -> Self {
        Self { name: Some(name), ..Self::loopstack() }
    }

    /// The framework's own command line ([`main`]): named after the binary, no
    /// version, `loopstack.db`.
    fn loopstack() -> Self {
        Self {
            name: None,
            version: None,
            about: None,
            default_db: DEFAULT_DB.to_owned(),
            db_env: None,
            takes_mcp: false,
        }
    }

    /// The app's version, which `--version` prints (`env!("CARGO_PKG_VERSION")`).
    pub fn version(mut self, version: &'static str) -> Self {
        self.version = Some(version);
        self
    }

    /// The line `--help` starts with, in place of loopstack's.
    pub fn about(mut self, about: &'static str) -> Self {
        self.about = Some(about);
        self
    }

    /// The store every command uses when neither `--db` nor the environment
    /// variable names one: a SQLite file, `memory`, or a postgres:// URL.
    pub fn default_db(mut self, db: impl Into<String>) -> Self {
        self.default_db = db.into();
        self
    }

    /// An environment variable that, set and not empty, names the store in place of
    /// [`App::default_db`]; `--db` still wins.
    pub fn db_env(mut self, var: impl Into<String>) -> Self {
        self.db_env = Some(var.into());
        self
    }

    /// The store the process's environment and the app's default name, without `--db`.
    fn db_without_flag(&self) -> String {
        self.db_env
            .as_deref()
            .and_then(std::env::var_os)
            .filter(|value| !value.is_empty())
            .map(|value| value.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.default_db.clone())
    }

    /// The clap command: loopstack's subcommands and then `E`'s, under the app's
    /// name, version and about, with `--db` describing the app's default and
    /// variable. For help, completions or a man page.
    pub fn command<E: Subcommand>(&self) -> clap::Command {
        use clap::CommandFactory as _;
        let mut command = E::augment_subcommands(Cli::command());
        if let Some(name) = self.name {
            command = command.name(name).bin_name(name);
        }
        if let Some(version) = self.version {
            command = command.version(version);
        }
        if let Some(about) = self.about {
            command = command.about(about);
        }
        let mut help = format!(
            "Where runs are kept: a SQLite file, `memory`, or a postgres:// URL (feature `postgres`) [default: {}]",
            self.default_db
        );
        if let Some(var) = &self.db_env {
            let _ = write!(help, " [env: {var}]");
        }
        let command = command.mut_arg("db", |arg| arg.hide_default_value(true).help(help));
        // The MCP flags are shown only by an app that takes the servers' tools.
        #[cfg(feature = "mcp")]
        let command = if self.takes_mcp {
            command
        } else {
            ["mcp", "mcp_url", "mcp_token_env"].into_iter().fold(command, |c, id| c.mut_arg(id, |a| a.hide(true)))
        };
        command
    }

    /// Parses `args` (the binary's name first): one of loopstack's commands, or one
    /// of `E`'s, with the store resolved as [`App`] describes. For a binary that
    /// opens the store and runs the command itself ([`open`], [`execute`]); `--help`
    /// and `--version` are errors whose `print` shows them, as with clap.
    ///
    /// ```
    /// use clap::Subcommand;
    /// use loopstack::cli::{App, Parsed};
    ///
    /// #[derive(Debug, Subcommand)]
    /// enum Helpdesk {
    ///     /// Imports tickets from a file.
    ///     Import { file: String },
    /// }
    ///
    /// let app = App::new("helpdesk").version("1.4.0").default_db("helpdesk.db");
    /// match app.try_parse_from::<Helpdesk, _, _>(["helpdesk", "runs", "--limit", "5"])? {
    ///     Parsed::Loopstack(cli) => assert_eq!(cli.db, "helpdesk.db"),
    ///     other => panic!("{other:?}"),
    /// }
    /// match app.try_parse_from::<Helpdesk, _, _>(["helpdesk", "--db", "memory", "import", "tickets.csv"])? {
    ///     Parsed::App { command: Helpdesk::Import { file }, db, .. } => {
    ///         assert_eq!((file.as_str(), db.as_str()), ("tickets.csv", "memory"));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// let version = app.try_parse_from::<Helpdesk, _, _>(["helpdesk", "--version"]).unwrap_err();
    /// assert_eq!(version.to_string(), "helpdesk 1.4.0\n");
    /// # Ok::<(), clap::Error>(())
    /// ```
    pub fn try_parse_from<E, I, T>(&self, args: I) -> Result<Parsed<E>, clap::Error>
    where
        E: Subcommand,
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        self.parse(args).map(|(parsed, _)| parsed)
    }

    /// [`App::try_parse_from`], and the MCP servers the command line names.
    fn parse<E, I, T>(&self, args: I) -> Result<(Parsed<E>, McpServers), clap::Error>
    where
        E: Subcommand,
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::FromArgMatches as _;
        let mut command = self.command::<E>();
        let matches = command.try_get_matches_from_mut(args)?;
        #[cfg(feature = "mcp")]
        let servers = mcp::McpFlags::from_matches(&matches);
        #[cfg(not(feature = "mcp"))]
        let servers = McpServers;
        let db = match matches.value_source("db") {
            Some(clap::parser::ValueSource::CommandLine) => matches.get_one::<String>("db").cloned(),
            _ => None,
        }
        .unwrap_or_else(|| self.db_without_flag());
        if matches.subcommand_name().is_some_and(E::has_subcommand) {
            let json = matches.get_flag("json");
            let command = E::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
            return Ok((Parsed::App { command, db, json }, servers));
        }
        let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
        cli.db = db;
        Ok((Parsed::Loopstack(cli), servers))
    }

    /// [`App::run_with`] for an app with no commands of its own.
    pub async fn run(self, register: impl FnOnce(Runtime) -> Runtime) -> ExitCode {
        self.run_with::<NoCommands, _, _>(register, |never, _| async move { match never {} }).await
    }

    /// Parses the process's arguments, opens the store, lets `register` add the
    /// workflows, and runs the command: one of loopstack's, printed as [`main`]
    /// prints it, or one of `E`'s, handed to `handle` with the runtime. Returns the
    /// exit status: 0 when the command succeeded, 1 with one line `error: ...` on
    /// standard error when it failed (`handle`'s error included, with the runtime's
    /// secrets redacted), 2 for a command line that does not parse (0 for `--help`
    /// and `--version`).
    pub async fn run_with<E, F, Fut>(self, register: impl FnOnce(Runtime) -> Runtime, handle: F) -> ExitCode
    where
        E: Subcommand,
        F: FnOnce(E, CommandContext) -> Fut,
        Fut: Future<Output = Result<(), loopstack_core::BoxError>>,
    {
        self.run_inner(move |runtime, _| register(runtime), handle).await
    }

    /// [`App::run_with`], with the MCP servers' tools (an empty registry unless
    /// [`App::run_mcp_with`] set `takes_mcp`).
    async fn run_inner<E, F, Fut>(
        self,
        register: impl FnOnce(Runtime, loopstack_core::ToolRegistry) -> Runtime,
        handle: F,
    ) -> ExitCode
    where
        E: Subcommand,
        F: FnOnce(E, CommandContext) -> Fut,
        Fut: Future<Output = Result<(), loopstack_core::BoxError>>,
    {
        let (parsed, servers) = match self.parse::<E, _, _>(std::env::args_os()) {
            Ok(parsed) => parsed,
            Err(e) => {
                let _ = e.print();
                return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
            }
        };
        let (db, opening) = match &parsed {
            Parsed::Loopstack(cli) => (cli.db.clone(), Opening::for_command(&cli.command)),
            Parsed::App { db, .. } => (db.clone(), Opening::Create),
        };
        let store = match opening {
            Opening::None => Ok(std::sync::Arc::new(loopstack_core::MemoryStore::new()) as std::sync::Arc<dyn Store>),
            Opening::Create => open(&db).await,
            Opening::Existing(command) => open_existing(&db, command).await,
        };
        let runtime = match store {
            Ok(store) => Runtime::with_shared_store(store),
            Err(e) => return fail(&e.to_string()),
        };
        let tools = match servers.connect(self.takes_mcp, runtime.secrets()).await {
            Ok(tools) => tools,
            Err(e) => return fail(&runtime.secrets().redact(&e.to_string())),
        };
        let runtime = register(runtime, tools);
        let done = match parsed {
            // Served under the app's name and version.
            #[cfg(feature = "mcp-server")]
            Parsed::Loopstack(Cli { command: Command::Mcp, .. }) => {
                let name = self.name.map_or_else(|| self.command::<E>().get_name().to_owned(), str::to_owned);
                let version = self.version.unwrap_or(env!("CARGO_PKG_VERSION"));
                let handler = crate::mcp_server::McpHandler::new(runtime.clone()).server_info(name, version);
                crate::mcp_server::serve_stdio(handler).await.map_err(|e| CliError::Serve(e.to_string()))
            }
            Parsed::Loopstack(cli) => execute(&runtime, &cli).await.map(|text| print!("{text}")),
            Parsed::App { command, db, json } => {
                let cx = CommandContext { runtime: runtime.clone(), db, json };
                handle(command, cx).await.map_err(CliError::App)
            }
        };
        // Listeners in other processes (Studio's page of a run) get the last events
        // of what this command drove.
        runtime.flush_events().await;
        if let Err(CliError::CasesFailed { output, .. }) = &done {
            print!("{output}");
            let e = done.as_ref().err().map(ToString::to_string).unwrap_or_default();
            eprintln!("error: {}", one_line(&e));
            return ExitCode::from(EVAL_FAILED);
        }
        match done {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&runtime.secrets().redact(&e.to_string())),
        }
    }
}

/// The MCP servers a command line names (none without feature `mcp`).
#[cfg(feature = "mcp")]
use mcp::McpFlags as McpServers;

/// Without feature `mcp` a command line names no MCP servers.
#[cfg(not(feature = "mcp"))]
struct McpServers;

#[cfg(not(feature = "mcp"))]
impl McpServers {
    async fn connect(
        &self,
        _takes_mcp: bool,
        _secrets: &loopstack_core::secrets::Secrets,
    ) -> Result<loopstack_core::ToolRegistry, CliError> {
        Ok(loopstack_core::ToolRegistry::new())
    }
}

/// The exit status of an `eval` whose cases did not all pass.
pub const EVAL_FAILED: u8 = 3;

/// What `eval` was given.
struct EvalArgs<'a> {
    dataset: &'a std::path::Path,
    /// The agent's name, or the workflow's.
    agent: &'a str,
    /// Whether `agent` names a workflow of any kind (`--workflow`).
    workflow: bool,
    repeats: u32,
    concurrency: usize,
    id: Option<RunId>,
    scorers: &'a [String],
    compare: Option<&'a std::path::Path>,
}

/// Runs an eval of a registered agent, with a progress line on standard error.
async fn eval(runtime: &Runtime, args: EvalArgs<'_>, json: bool) -> Result<String, CliError> {
    use loopstack_llm::eval::{CalledTool, Contains, Dataset, Eval, EvalReport, Exact, Matches};
    use std::io::IsTerminal as _;
    if !runtime.is_registered(args.agent) {
        return Err(
            RunError::UnknownWorkflow { workflow: args.agent.to_owned(), registered: runtime.workflows() }.into()
        );
    }
    let bad = |e: &dyn std::fmt::Display| CliError::Eval(e.to_string());
    let before = match args.compare {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| bad(&format!("{}: {e}", path.display())))?;
            Some(EvalReport::from_json(&text).map_err(|e| bad(&format!("{}: {e}", path.display())))?)
        }
        None => None,
    };
    let dataset = Dataset::load_jsonl(args.dataset).map_err(|e| bad(&e))?;
    let eval = if args.workflow { Eval::workflow(dataset, args.agent) } else { Eval::named(dataset, args.agent) };
    let mut eval = eval.repeats(args.repeats).concurrency(args.concurrency);
    for scorer in args.scorers {
        eval = match scorer.split_once(':') {
            None if scorer == "contains" => eval.scorer(Contains::expected()),
            None if scorer == "exact" => eval.scorer(Exact),
            Some(("matches", pattern)) => eval.scorer(Matches::new(pattern).map_err(|e| bad(&e))?),
            Some(("called", tool)) => eval.scorer(CalledTool::new(tool)),
            _ => return Err(bad(&format!("unknown scorer `{scorer}`: contains, exact, matches:REGEX or called:TOOL"))),
        };
    }
    if let Some(id) = args.id {
        eval = eval.id(id);
    }
    let terminal = std::io::stderr().is_terminal();
    eval = eval.on_progress(move |done, total, case| {
        let status = if case.passed { "pass" } else { "FAIL" };
        if terminal {
            let filled = done * 20 / total.max(1);
            eprint!(
                "\r[{}{}] {done}/{total} {} {status}\x1b[K",
                "#".repeat(filled),
                ".".repeat(20 - filled),
                case.case
            );
            if done == total {
                eprintln!();
            }
        } else {
            eprintln!("[{done}/{total}] {} {status}", case.case);
        }
    });
    let report = eval.run(runtime).await.map_err(|e| bad(&e))?;
    let comparison = before.as_ref().map(|before| report.compare(before));
    let out = if json {
        let mut value = serde_json::to_value(&report).map_err(|e| bad(&e))?;
        if let Some(comparison) = &comparison {
            value["comparison"] = serde_json::to_value(comparison).map_err(|e| bad(&e))?;
        }
        value.to_string() + "\n"
    } else {
        let mut out = report.table();
        let _ = writeln!(out, "eval {} (run it again with --id {} over the same --db)", report.eval, report.id);
        if let Some(comparison) = &comparison {
            out += &comparison.text();
        }
        out
    };
    let (failed, cases) = (report.summary.cases - report.summary.passed, report.summary.cases);
    if failed > 0 {
        return Err(CliError::CasesFailed { failed, cases, output: out });
    }
    Ok(out)
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
fn redact_url(url: &str) -> String {
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

/// The edits of `fork`, as flags.
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct ForkFlags {
    /// The system prompt of the fork's model turns (agents).
    #[arg(long)]
    pub system: Option<String>,
    /// The model of the fork's turns, as PROVIDER:MODEL (agents).
    #[arg(long)]
    pub model: Option<String>,
    /// The whole state in place of the step's, as JSON.
    #[arg(long)]
    pub state: Option<String>,
    /// Keeps the first N messages of the conversation and drops the rest (the
    /// fork starts before the step that saved the first one dropped).
    #[arg(long, value_name = "N")]
    pub keep_messages: Option<usize>,
    /// Replaces the text of conversation message N (from 0), keeping its role and
    /// tool blocks; repeat for several.
    #[arg(long = "message", value_name = "N=TEXT", value_parser = message_edit)]
    pub messages: Vec<(usize, String)>,
}

/// `--message N=TEXT`: the message's index and its new text.
fn message_edit(arg: &str) -> Result<(usize, String), String> {
    let (index, text) = arg.split_once('=').ok_or("expected N=TEXT, such as 0=What is the weather in Oslo?")?;
    let index = index.trim().parse().map_err(|_| format!("`{index}` is not a message number (0, 1, ...)"))?;
    Ok((index, text.to_owned()))
}

fn parse_json(text: Option<&str>, what: &'static str) -> Result<Value, CliError> {
    match text {
        None => Ok(Value::Null),
        Some(text) => serde_json::from_str(text).map_err(|source| CliError::Json { what, source }),
    }
}

/// Runs a parsed command against `runtime` and returns what to print.
pub async fn execute(runtime: &Runtime, cli: &Cli) -> Result<String, CliError> {
    let json = cli.json;
    let mut out = String::new();
    match &cli.command {
        Command::Workflows => {
            let names = runtime.workflows();
            if json {
                out = json!({ "workflows": names }).to_string() + "\n";
            } else {
                for name in names {
                    let _ = writeln!(out, "{name}");
                }
            }
        }
        Command::Run { workflow, input, wait } => {
            let input = parse_json(input.as_deref(), "--input")?;
            let run_id = runtime.submit_by_name(workflow, input).await?;
            if *wait {
                let outcome = runtime.drive_by_name(run_id).await?;
                out = outcome_text(runtime, run_id, &outcome, json).await?;
            } else if json {
                out = json!({ "run_id": run_id, "status": "queued" }).to_string() + "\n";
            } else {
                let _ = writeln!(out, "{run_id} queued (a worker drives it; `run --wait` drives it here)");
            }
        }
        Command::Runs { workflow, status, place, limit } => {
            let mut query = RunQuery::new().limit(*limit);
            if let Some(workflow) = workflow {
                query = query.workflow(workflow.clone());
            }
            if let Some(status) = status {
                query = query.status(*status);
            }
            if let Some(place) = place {
                query = query.place(place.clone());
            }
            let page = runtime.store().list_runs(&query).await?;
            if json {
                let runs: Vec<Value> = page.runs.iter().map(crate::views::run).collect();
                out = json!({ "runs": runs, "next": page.next }).to_string() + "\n";
            } else {
                for run in &page.runs {
                    let _ = writeln!(
                        out,
                        "{}  {:<10} {:<20} v{:<3} {:<16} step {:<4} {}",
                        run.run_id,
                        run.status.as_str(),
                        run.workflow,
                        run.version,
                        run.place,
                        run.step,
                        run.updated_at
                    );
                }
                if let Some(next) = page.next {
                    let _ = writeln!(out, "(more: --limit, or list runs before {next})");
                }
            }
        }
        Command::Show { run } => out = show(runtime, *run, json).await?,
        Command::Export { run } => {
            let export = loopstack_llm::RunExport::of(runtime.store().as_ref(), *run).await?;
            out = export.to_json() + "\n";
        }
        Command::Signal { run, name, payload } => {
            let payload = parse_json(payload.as_deref(), "the payload")?;
            let outcome = runtime.signal_by_name(*run, name, payload).await?;
            out = outcome_text(runtime, *run, &outcome, json).await?;
        }
        Command::Approve { run, calls } => out = decide(runtime, *run, calls, Verdict::Approve, json).await?,
        Command::Resolve { run, call, result } => {
            let calls = std::slice::from_ref(call);
            out = decide(runtime, *run, calls, Verdict::Result(result), json).await?;
        }
        Command::Deny { run, calls, reason } => {
            if reason.trim().is_empty() {
                return Err(CliError::EmptyReason);
            }
            out = decide(runtime, *run, calls, Verdict::Deny(reason), json).await?;
        }
        Command::Resume { run, take_over } => {
            let outcome = if *take_over {
                runtime.resume_by_name(*run).await?
            } else {
                match runtime.drive_by_name(*run).await {
                    Err(RunError::Store(StoreError::Leased { run_id, owner, until })) => {
                        return Err(CliError::Leased { run_id, owner, until });
                    }
                    driven => driven?,
                }
            };
            out = outcome_text(runtime, *run, &outcome, json).await?;
        }
        Command::Retry { run } => {
            let outcome = runtime.retry_by_name(*run).await?;
            out = outcome_text(runtime, *run, &outcome, json).await?;
        }
        Command::Eval(e) => {
            let args = EvalArgs {
                dataset: &e.dataset,
                agent: e.agent.as_deref().or(e.workflow.as_deref()).unwrap_or_default(),
                workflow: e.workflow.is_some(),
                repeats: e.repeats,
                concurrency: e.concurrency,
                id: e.id,
                scorers: &e.scorer,
                compare: e.compare.as_deref(),
            };
            out = eval(runtime, args, json).await?;
        }
        Command::Fork { run, step, edits: flags } => {
            let ForkFlags { system, model, state, keep_messages, messages } = &**flags;
            let mut edits = loopstack_core::ForkEdits::new();
            for (index, text) in messages {
                edits = edits.message_text(*index, text.clone());
            }
            edits.keep_messages = *keep_messages;
            edits.system.clone_from(system);
            edits.model.clone_from(model);
            if let Some(state) = state {
                edits.state =
                    Some(serde_json::from_str(state).map_err(|e| CliError::Json { what: "--state", source: e })?);
            }
            let fork = RunId::new();
            let outcome = runtime.fork_by_name(*run, *step, edits, fork).await?;
            out = outcome_text(runtime, fork, &outcome, json).await?;
        }
        Command::Cancel { run, reason } => {
            runtime.cancel(*run, reason.clone()).await?;
            out = if json {
                json!({ "run_id": run, "status": "cancelled" }).to_string() + "\n"
            } else {
                format!("{run} cancelled\n")
            };
        }
        #[cfg(feature = "serve")]
        Command::Serve { bind, port, token, worker } => {
            if token.as_deref().is_some_and(|t| t.trim().is_empty()) {
                return Err(CliError::Serve("the --token is empty".to_owned()));
            }
            if !bind.is_loopback() && token.is_none() {
                return Err(CliError::Serve(format!(
                    "serving on {bind}, beyond loopback, needs a --token (or LOOPSTACK_TOKEN)"
                )));
            }
            let listener = tokio::net::TcpListener::bind((*bind, *port))
                .await
                .map_err(|e| CliError::Serve(format!("could not listen on {bind}:{port}: {e}")))?;
            let address = listener.local_addr().map_err(|e| CliError::Serve(e.to_string()))?;
            let mcp =
                if cfg!(feature = "mcp-server") { format!(", MCP at http://{address}/mcp") } else { String::new() };
            eprintln!("Studio on http://{address}/ and the API under http://{address}/api{mcp} (Ctrl-C to stop)");
            let mut options = crate::serve::ServeOptions::new();
            if let Some(token) = token {
                options = options.token(token.clone());
            }
            let shutdown = loopstack_core::CancellationToken::new();
            let driving = worker.then(|| {
                let worker = loopstack_core::Worker::new(runtime.clone());
                let shutdown = shutdown.clone();
                tokio::spawn(async move { worker.run(shutdown).await })
            });
            let result = tokio::select! {
                served = crate::serve::serve(listener, runtime.clone(), options) => {
                    served.map_err(|e| CliError::Serve(e.to_string()))
                }
                _ = tokio::signal::ctrl_c() => Ok(()),
            };
            shutdown.cancel();
            if let Some(driving) = driving {
                match driving.await {
                    Ok(Err(e)) => eprintln!("worker: {}", runtime.secrets().redact(&e.to_string())),
                    Err(e) => eprintln!("worker: {e}"),
                    Ok(Ok(())) => {}
                }
            }
            result?;
        }
        #[cfg(feature = "mcp-server")]
        Command::Mcp => {
            let handler = crate::mcp_server::McpHandler::new(runtime.clone());
            crate::mcp_server::serve_stdio(handler).await.map_err(|e| CliError::Serve(e.to_string()))?;
        }
        Command::Schedule { action } => out = schedule(runtime, action, json).await?,
        Command::Worker { concurrency, once } => {
            let worker = loopstack_core::Worker::new(runtime.clone()).concurrency(*concurrency);
            if *once {
                let driven = worker.run_once().await?;
                out = if json {
                    json!({ "driven": driven }).to_string() + "\n"
                } else {
                    format!("drove {driven} run(s)\n")
                };
            } else {
                let shutdown = loopstack_core::CancellationToken::new();
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    let _ = tokio::signal::ctrl_c().await;
                    stop.cancel();
                });
                eprintln!("worker: driving {} (Ctrl-C to stop)", runtime.workflows().join(", "));
                worker.run(shutdown).await?;
            }
        }
    }
    Ok(out)
}

/// A `schedule` command.
async fn schedule(runtime: &Runtime, action: &ScheduleCommand, json: bool) -> Result<String, CliError> {
    use loopstack_core::schedule::{Missed, Schedule, parse_interval};
    let mut out = String::new();
    let changed = match action {
        ScheduleCommand::Add { id, workflow, cron, every, timezone, input, missed, grace, paused } => {
            let input = parse_json(input.as_deref(), "--input")?;
            let mut when = match (cron, every) {
                (Some(cron), _) => Schedule::cron(cron)?,
                (None, Some(every)) => Schedule::every(parse_interval(every)?)?,
                // clap requires one of the two.
                (None, None) => {
                    return Err(loopstack_core::schedule::ScheduleError::InvalidCron {
                        expr: String::new(),
                        reason: "give --cron or --every".to_owned(),
                    }
                    .into());
                }
            };
            if let Some(timezone) = timezone {
                when = when.timezone(timezone)?;
            }
            when = when.missed(missed.parse::<Missed>()?);
            if let Some(grace) = grace {
                when = when.grace(parse_interval(grace)?);
            }
            if *paused {
                when = when.paused();
            }
            runtime.schedule(id, workflow, input, when).await?
        }
        ScheduleCommand::List => {
            let schedules = runtime.schedules().await?;
            if json {
                let list: Vec<Value> = schedules.iter().map(crate::views::schedule).collect();
                return Ok(json!({ "schedules": list }).to_string() + "\n");
            }
            if schedules.is_empty() {
                out.push_str("no schedules (`schedule add` stores one)\n");
            }
            for s in &schedules {
                let _ = writeln!(out, "{}", schedule_line(s));
            }
            return Ok(out);
        }
        ScheduleCommand::Pause { id } => runtime.pause_schedule(id).await?,
        ScheduleCommand::Resume { id } => runtime.resume_schedule(id).await?,
        ScheduleCommand::Delete { id } => {
            runtime.delete_schedule(id).await?;
            return Ok(if json {
                json!({ "id": id, "deleted": true }).to_string() + "\n"
            } else {
                format!("{id} deleted\n")
            });
        }
    };
    if json {
        out = crate::views::schedule(&changed).to_string() + "\n";
    } else {
        let _ = writeln!(out, "{}", schedule_line(&changed));
    }
    Ok(out)
}

/// A schedule on one line: id, workflow, when, what is next, the last run.
fn schedule_line(s: &loopstack_core::ScheduleRecord) -> String {
    let next = if s.paused { "paused".to_owned() } else { format!("next {}", s.next_due) };
    let last = match (s.last_run, s.last_due) {
        (Some(run), Some(due)) => format!("last {run} (due {due})"),
        _ => "no run yet".to_owned(),
    };
    let error = s.last_error.as_deref().map(|e| format!("  error: {e}")).unwrap_or_default();
    format!("{}  {}  {}  missed: {}  {next}  {last}{error}", s.id, s.workflow, s.recurrence, s.missed.as_str())
}

/// What `approve`, `deny` and `resolve` say of each call they name.
#[derive(Clone, Copy)]
enum Verdict<'a> {
    Approve,
    Deny(&'a str),
    Result(&'a str),
}

/// `approve`, `deny` or `resolve`: decides on the named calls of an agent's run,
/// or on all that wait, and drives the run on.
async fn decide(
    runtime: &Runtime,
    run_id: RunId,
    calls: &[String],
    verdict: Verdict<'_>,
    json: bool,
) -> Result<String, CliError> {
    let record = runtime.store().load_run(run_id).await?;
    let waits = crate::views::Waits::of(runtime, &record)?;
    let pending = match waits.as_ref().and_then(|w| w.pending.as_ref()) {
        Some(pending) if !pending.is_empty() => pending,
        _ => return Err(CliError::NotAwaitingApproval { run_id, why: standing(runtime, &record, waits.as_ref()) }),
    };
    let mut chosen: Vec<&str> = Vec::new();
    for call in calls {
        if !pending.iter().any(|p| p.call_id == *call) {
            let pending = pending.iter().map(|p| format!("{} ({})", p.call_id, p.name)).collect();
            return Err(CliError::NotPending { run_id, call_id: call.clone(), pending });
        }
        if !chosen.contains(&call.as_str()) {
            chosen.push(call);
        }
    }
    if chosen.is_empty() {
        chosen = pending.iter().map(|p| p.call_id.as_str()).collect();
    }
    let decisions = loopstack_llm::ToolDecisions::new(chosen.into_iter().map(|call| match verdict {
        Verdict::Approve => loopstack_llm::ToolDecision::approve(call),
        Verdict::Deny(reason) => loopstack_llm::ToolDecision::deny(call, reason),
        Verdict::Result(result) => loopstack_llm::ToolDecision::result(call, result),
    }));
    let outcome = loopstack_llm::decide_by_name(runtime, run_id, &decisions).await?;
    outcome_text(runtime, run_id, &outcome, json).await
}

/// How a run that takes no decision stands, in words, for the error that says so.
fn standing(runtime: &Runtime, record: &loopstack_core::RunRecord, waits: Option<&crate::views::Waits>) -> String {
    if record.status != RunStatus::Waiting {
        return format!("it is {} at {}", record.status.as_str(), record.place);
    }
    if runtime.definition_of(&record.workflow).is_none() {
        return format!("it is a run of workflow `{}`, which this binary does not register", record.workflow);
    }
    let signals: Vec<&str> = waits.map(|w| w.signals.iter().map(|t| t.name).collect()).unwrap_or_default();
    let timer = waits.is_some_and(|w| !w.timers.is_empty());
    let what = match (signals.is_empty(), timer) {
        (false, false) => format!("the signal {}", signals.join(", ")),
        (false, true) => format!("the signal {} or a timer", signals.join(", ")),
        (true, _) => "a timer".to_owned(),
    };
    format!("it waits at {} for {what}; no tool calls wait for a decision (`show` says more)", record.place)
}

/// How a drive left the run.
async fn outcome_text(runtime: &Runtime, run_id: RunId, outcome: &RunOutcome, json: bool) -> Result<String, CliError> {
    let record = runtime.store().load_run(run_id).await?;
    let waiting_for: Vec<&str> = match outcome {
        RunOutcome::Waiting { signals, .. } => signals.clone(),
        _ => Vec::new(),
    };
    let pending = match runtime.definition_of(&record.workflow) {
        Some(def) => loopstack_llm::pending_calls(def, &record)?,
        None => None,
    };
    if json {
        let mut value = crate::views::run(&record.summary());
        value["waiting_for"] = json!(waiting_for);
        if let Some(pending) = &pending {
            value["pending_calls"] = json!(pending);
        }
        if let RunOutcome::Queued { signal } = outcome {
            value["queued_signal"] = json!(signal);
        }
        return Ok(value.to_string() + "\n");
    }
    Ok(match outcome {
        RunOutcome::Completed => format!("{run_id} completed at step {}\n", record.step),
        RunOutcome::Waiting { place, signals } => {
            let mut out = format!(
                "{run_id} waits at {place} for: {}\n",
                if signals.is_empty() { "a timer".to_owned() } else { signals.join(", ") }
            );
            if let Some(pending) = pending.filter(|p| !p.is_empty()) {
                let outcome = crate::views::is_outcome_place(place);
                crate::views::pending_lines(&mut out, run_id, &pending, outcome, crate::views::Answer::Cli);
            }
            out
        }
        RunOutcome::Queued { signal } => {
            format!("{run_id}: signal {signal} queued; another driver holds the run and delivers it\n")
        }
        other => format!("{run_id} {other:?}\n"),
    })
}

/// A run, in full.
async fn show(runtime: &Runtime, run_id: RunId, json: bool) -> Result<String, CliError> {
    let store = runtime.store();
    let record = store.load_run(run_id).await?;
    let history = store.history(run_id).await?;
    let documents = store.documents(run_id).await?;
    let state = crate::views::raw(&record.state);
    let waits = crate::views::Waits::of(runtime, &record)?;
    if json {
        let mut value = crate::views::run(&record.summary());
        if let Some(waits) = &waits {
            value["waits_for"] = waits.json();
        }
        value["history"] = history.iter().map(crate::views::step).collect();
        value["state"] = state;
        value["documents"] = documents.iter().map(|d| crate::views::document(d)).collect();
        if let Some(fork) = crate::views::fork(record.forked_from, &documents) {
            value["fork"] = fork;
        }
        return Ok(value.to_string() + "\n");
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {run_id}: {} at {} (workflow {} v{}, step {})",
        record.status.as_str(),
        record.place,
        record.workflow,
        record.version,
        record.step
    );
    if let Some(error) = &record.error {
        let _ = writeln!(out, "error: {}", one_line(error));
    }
    if let Some(parent) = record.parent {
        let _ = writeln!(out, "parent: {parent}");
    }
    if let Some(forked_from) = record.forked_from {
        let _ =
            writeln!(out, "{}", crate::views::fork_line(forked_from, crate::views::fork_record(&documents).as_ref()));
    }
    if let Some(waits) = &waits {
        crate::views::waits_text(&mut out, run_id, waits, crate::views::Answer::Cli);
    } else if record.status == RunStatus::Waiting {
        let _ = writeln!(
            out,
            "\nwaits for: (workflow `{}` is not registered in this binary, so what it takes is unknown)",
            record.workflow
        );
    }
    let _ = writeln!(out, "\nhistory:");
    for s in &history {
        let _ = writeln!(out, "  {:>3}. {} {} -> {} ({})", s.step, s.at, s.from, s.to, s.transition);
    }
    let messages: Vec<_> = documents.iter().filter(|d| d.doc_type == loopstack_llm::MESSAGE_DOCUMENT).collect();
    if !messages.is_empty() {
        let _ = writeln!(out, "\nconversation:");
        for doc in messages {
            match doc.read::<loopstack_llm::Message>() {
                Ok(message) => {
                    let _ = writeln!(out, "  {message}");
                }
                Err(e) => {
                    let _ = writeln!(out, "  (unreadable message: {e})");
                }
            }
        }
    }
    let others: Vec<_> = documents.iter().filter(|d| d.doc_type != loopstack_llm::MESSAGE_DOCUMENT).collect();
    if !others.is_empty() {
        let _ = writeln!(out, "\ndocuments:");
        for doc in others {
            let key = doc.key.as_deref().map(|k| format!(" {k}")).unwrap_or_default();
            // An image's data is no text for a terminal: its type and size instead.
            let content = match doc.doc_type == loopstack_llm::IMAGE_DOCUMENT {
                true => format!("{} image, {} bytes", meta_text(doc, "media_type"), meta_text(doc, "bytes")),
                false => doc.content.get().to_owned(),
            };
            let _ = writeln!(out, "  {}{key} v{} (step {}): {content}", doc.doc_type, doc.version, doc.step);
        }
    }
    let _ = writeln!(out, "\nstate: {}", serde_json::to_string_pretty(&state).unwrap_or_default());
    Ok(out)
}

/// A metadata entry of a document as text (`?` when it has none).
fn meta_text(doc: &loopstack_core::Document, name: &str) -> String {
    match doc.metadata.get(name) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "?".to_owned(),
    }
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
