//! The command line's arguments: loopstack's commands and their flags (clap).

use super::*;

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
    /// How logs are written to standard error: `human` (in color on a terminal) or
    /// `json` (one object a line). RUST_LOG filters them; unless it is set, `worker`,
    /// `serve` and `mcp` log at `info` and the other commands not at all.
    #[arg(long, global = true, env = "LOOPSTACK_LOG_FORMAT", default_value = "human", value_enum)]
    pub log_format: LogFormat,
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
    /// A JSON file that declares MCP servers by name, whose tools the app's agents
    /// also get: `{"mcp": {"servers": {"files": {"command": "npx", "args": ["-y",
    /// "@modelcontextprotocol/server-filesystem", "/srv"]}, "remote": {"url":
    /// "https://mcp.example.com/mcp", "token_env": "REMOTE_TOKEN"}}}}` (before the
    /// command; an empty path names none).
    #[cfg(feature = "mcp")]
    #[arg(long, value_name = "FILE", env = "LOOPSTACK_CONFIG", value_parser = config_file)]
    pub config: Option<std::path::PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How the command line writes its logs ([`Cli::log_format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[non_exhaustive]
pub enum LogFormat {
    /// Lines for a person: in color on a terminal, plain otherwise.
    #[default]
    Human,
    /// One JSON object a line, with the event's fields and its spans' (the run's id
    /// and workflow among them): for a log collector.
    Json,
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
        /// Only runs with this status (queued, running, waiting, completed, failed, cancelled, stopped).
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
    /// Answers a tool call that asks a person for input (an MCP server's question:
    /// `show` lists what it asks and the answer's shape) with JSON that fits, and
    /// drives the run on: the call runs again with the answer. (`deny` declines it.)
    Answer {
        /// The run (of any agent, named or not), waiting at `awaiting_approval`.
        run: RunId,
        /// The call's id, as `show` lists it.
        call: String,
        /// The answer, as JSON that fits what the call asks.
        input: String,
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
    /// Restarts a failed, cancelled or stopped run from its last checkpoint.
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
        /// On SIGTERM or Ctrl-C, how long requests and (with --worker) the steps in
        /// flight may take to finish: 25s, 1m, 0s.
        #[arg(long, default_value = "25s", value_parser = interval)]
        drain_timeout: std::time::Duration,
        /// This process's name in the leases it takes, which `runs` and `show` print
        /// as the holder of a run (host:pid:random unless given).
        #[arg(long, env = "LOOPSTACK_WORKER_NAME")]
        name: Option<String>,
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
    /// and starts due schedules, until SIGTERM or Ctrl-C: then it claims nothing
    /// more, lets the steps in flight finish, and gives their runs back to the
    /// other workers at once.
    Worker {
        /// How many runs at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// On SIGTERM or Ctrl-C, how long the steps in flight may take to finish
        /// before they are abandoned (and run again by another worker): 25s, 1m, 0s.
        #[arg(long, default_value = "25s", value_parser = interval)]
        drain_timeout: std::time::Duration,
        /// This worker's name in the leases it takes, which `runs` and `show` print
        /// as the holder of a run (host:pid:random unless given).
        #[arg(long, env = "LOOPSTACK_WORKER_NAME")]
        name: Option<String>,
        /// Drive what can move now, once, and exit.
        #[arg(long)]
        once: bool,
        /// Also serve /metrics (Prometheus), /healthz and /readyz on HOST:PORT
        /// (`loopstack::serve::metrics_router`), without a token: bind it where only
        /// the scraper and the probes reach.
        #[cfg(feature = "serve")]
        #[arg(long, value_name = "HOST:PORT", conflicts_with = "once")]
        metrics_addr: Option<String>,
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
        /// A due time while the last run it started has not ended: `skip` it,
        /// `allow` another run, or `queue` it to start once the last run ended.
        #[arg(long, default_value = "skip")]
        overlap: String,
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

/// A duration flag, written as schedules' intervals are: `90s`, `15m`, `1h30m`, `0s`.
fn interval(arg: &str) -> Result<std::time::Duration, String> {
    loopstack_core::schedule::parse_interval(arg).map_err(|e| e.to_string())
}

/// `--config FILE`, empty too: the servers this command line starts get
/// `LOOPSTACK_CONFIG` empty, and a loopstack app among them must not refuse it.
#[cfg(feature = "mcp")]
fn config_file(arg: &str) -> Result<std::path::PathBuf, std::convert::Infallible> {
    Ok(arg.into())
}

/// `--message N=TEXT`: the message's index and its new text.
fn message_edit(arg: &str) -> Result<(usize, String), String> {
    let (index, text) = arg.split_once('=').ok_or("expected N=TEXT, such as 0=What is the weather in Oslo?")?;
    let index = index.trim().parse().map_err(|_| format!("`{index}` is not a message number (0, 1, ...)"))?;
    Ok((index, text.to_owned()))
}
