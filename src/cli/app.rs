//! [`App`]: a binary's command line, loopstack's commands beside its own.

use super::*;

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
    #[cfg(feature = "mcp")]
    pub(super) takes_mcp: bool,
    /// The MCP servers the app declares in code ([`App::mcp_server`]).
    #[cfg(feature = "mcp")]
    pub(super) mcp_servers: Vec<loopstack_llm::mcp::McpServer>,
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
            #[cfg(feature = "mcp")]
            takes_mcp: false,
            #[cfg(feature = "mcp")]
            mcp_servers: Vec::new(),
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
            ["mcp", "mcp_url", "mcp_token_env", "config"]
                .into_iter()
                .fold(command, |c, id| c.mut_arg(id, |a| a.hide(true)))
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
        self.parse(args).map(|(parsed, ..)| parsed)
    }

    /// [`App::try_parse_from`], the MCP servers the command line names, and how it
    /// writes its logs.
    pub(super) fn parse<E, I, T>(&self, args: I) -> Result<(Parsed<E>, McpServers, LogFormat), clap::Error>
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
        let logs = matches.get_one::<LogFormat>("log_format").copied().unwrap_or_default();
        if matches.subcommand_name().is_some_and(E::has_subcommand) {
            let json = matches.get_flag("json");
            let command = E::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
            return Ok((Parsed::App { command, db, json }, servers, logs));
        }
        let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
        cli.db = db;
        Ok((Parsed::Loopstack(cli), servers, logs))
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
    pub(super) async fn run_inner<E, F, Fut>(
        self,
        register: impl FnOnce(Runtime, loopstack_core::ToolRegistry) -> Runtime,
        handle: F,
    ) -> ExitCode
    where
        E: Subcommand,
        F: FnOnce(E, CommandContext) -> Fut,
        Fut: Future<Output = Result<(), loopstack_core::BoxError>>,
    {
        let (parsed, servers, logs) = match self.parse::<E, _, _>(std::env::args_os()) {
            Ok(parsed) => parsed,
            Err(e) => {
                let _ = e.print();
                return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
            }
        };
        let (db, opening, command) = match &parsed {
            Parsed::Loopstack(cli) => (cli.db.clone(), Opening::for_command(&cli.command), Some(&cli.command)),
            Parsed::App { db, .. } => (db.clone(), Opening::Create, None),
        };
        init_logging(logs, default_log_filter(command));
        let store = match opening {
            Opening::None => Ok(std::sync::Arc::new(loopstack_core::MemoryStore::new()) as std::sync::Arc<dyn Store>),
            Opening::Create => open(&db).await,
            Opening::Existing(command) => open_existing(&db, command).await,
        };
        let runtime = match store {
            Ok(store) => Runtime::with_shared_store(store),
            Err(e) => return fail(&e.to_string()),
        };
        let tools = match servers.connect(&self, command, runtime.secrets()).await {
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
pub(super) use super::mcp::McpFlags as McpServers;

/// Without feature `mcp` a command line names no MCP servers.
#[cfg(not(feature = "mcp"))]
pub(super) struct McpServers;

#[cfg(not(feature = "mcp"))]
impl McpServers {
    pub(super) async fn connect(
        &self,
        _app: &App,
        _command: Option<&Command>,
        _secrets: &loopstack_core::secrets::Secrets,
    ) -> Result<loopstack_core::ToolRegistry, CliError> {
        Ok(loopstack_core::ToolRegistry::new())
    }
}
