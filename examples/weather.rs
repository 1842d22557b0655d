//! The weather agent: a `get_weather` tool and the tool-calling workflow
//! setup -> llm turn -> execute tool calls -> tools complete -> llm turn -> respond.
//!
//! ```text
//! cargo run --example weather                                  # offline, scripted model
//! cargo run --example weather -- --question "How is the weather in Oslo?"
//! cargo run --example weather -- --stream                      # print the answer as it streams
//! cargo run --example weather -- --image chart.png              # show the model an image with the question
//! cargo run --example weather -- --mermaid                     # print the diagram and exit
//! cargo run --example weather -- --db runs.db                  # keep runs in runs.db (default weather.db)
//! cargo run --example weather -- --resume RUN_ID               # resume a run whose process died
//! cargo run --example weather -- --db memory                   # keep nothing
//! # the tools of MCP servers too: a command (stdio, repeatable) or a URL (streamable HTTP)
//! cargo run --example weather --features mcp -- --mcp "npx -y @modelcontextprotocol/server-everything" --mcp-url http://127.0.0.1:3001/mcp
//! ANTHROPIC_API_KEY=... cargo run --example weather --features anthropic -- --provider anthropic
//! OPENAI_API_KEY=... cargo run --example weather -- --provider openai --model gpt-4o-mini
//! OPENAI_API_KEY=... cargo run --example weather -- --provider openai-responses --model gpt-5-mini
//! AZURE_OPENAI_ENDPOINT=... AZURE_OPENAI_API_KEY=... cargo run --example weather -- --provider azure --model DEPLOYMENT
//! GEMINI_API_KEY=... cargo run --example weather --features gemini -- --provider gemini
//! GOOGLE_CLOUD_PROJECT=... GOOGLE_CLOUD_LOCATION=... GOOGLE_CLOUD_ACCESS_TOKEN=$(gcloud auth print-access-token) \
//!     cargo run --example weather --features gemini -- --provider vertex
//! AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... cargo run --example weather --features bedrock -- --provider bedrock
//! OPENAI_BASE_URL=http://localhost:11434/v1 cargo run --example weather -- --provider openai --model llama3.2
//! # a small local model that writes its tool calls as text (llama.cpp's server, Ollama):
//! OPENAI_BASE_URL=http://localhost:8080/v1 cargo run --example weather -- --provider openai --model qwen2.5-coder-1.5b \
//!     --text-tool-calls --temperature 0 --system "You answer weather questions. Call get_weather once, then answer."
//! ```
//!
//! It exits 0 when the model gave a complete answer, 1 when the run failed or the
//! answer is not one (empty, a tool call written as text, cut off at the token
//! limit, a model repeating its calls), 2 for bad flags.

use std::process::ExitCode;

use loopstack::llm::{
    AgentStatus, ChatRequest, ChatResponse, ContentBlock, DelegateResult, GenerateOptions, GenerateResult, Image,
    LlmDelegateToolCalls, LlmError, LlmGenerateText, MediaType, Message, Models, Repeats, Role, ScriptedModel,
    StopReason, ToolResult, ToolUse, Usage,
};
use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
) -> Result<String, ToolError> {
    if location.trim().is_empty() {
        return Err(ToolError::new("the location is empty; name a city"));
    }
    // One place per call: an error that says so is what a small model corrects itself by.
    if location.contains([',', ';', '&']) || location.contains(" and ") {
        return Err(ToolError::new(format!("`{location}` names several places: call get_weather once for each place")));
    }
    Ok("Mostly sunny, 14C, rain in the afternoon.".to_owned())
}

/// How many turns in a row may ask for exactly the same tool calls.
const MAX_SAME_CALLS: u32 = 3;

/// The run's state: the question, the last model turn and the last tool results.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ToolCallState {
    question: String,
    llm_result: Option<GenerateResult>,
    delegate_result: Option<DelegateResult>,
    /// The last turn's calls, and how many turns in a row asked for them.
    #[serde(default)]
    repeats: Repeats,
    /// How the run ended.
    #[serde(default)]
    status: Option<AgentStatus>,
}

impl From<String> for ToolCallState {
    fn from(question: String) -> Self {
        Self { question, ..Self::default() }
    }
}

/// The weather workflow: it holds the LLM steps, like the reference's injected tools.
struct ToolCallWorkflow {
    llm: LlmGenerateText,
    delegate: LlmDelegateToolCalls,
    options: GenerateOptions,
    /// An image shown with the question (`--image`); saved once with the run.
    image: Option<Image>,
}

#[workflow(input = String)]
impl ToolCallWorkflow {
    #[transition(to = Ready)]
    async fn setup(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        let question = Message::user(state.question.as_str());
        match &self.image {
            // The image's data becomes a document of its own; the message refers to it.
            Some(image) => {
                loopstack::llm::save_message(cx, &question.with_image(image.clone()), None, Default::default())?
            }
            None => cx.save(&question).map(drop)?,
        }
        Ok(())
    }

    #[transition(from = Ready, to = PromptExecuted)]
    async fn llm_turn(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        let result = self.llm.call(cx, &self.options).await?;
        state.repeats.observe(&result.message);
        state.llm_result = Some(result);
        state.delegate_result = None;
        Ok(())
    }

    // A small model without a system prompt may ask for the same call forever.
    #[transition(from = PromptExecuted, to = End, priority = 20)]
    #[guard(repeats_itself)]
    async fn stop_repeating(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        let llm = state.llm_result.as_ref().expect("guarded by repeats_itself");
        // Every call gets its result, so the stored conversation stays valid.
        let not_run = llm.message.tool_uses().map(|call| ToolResult {
            tool_use_id: call.id.clone(),
            content: "not run: the same call was asked for too many times in a row".into(),
            is_error: true,
        });
        cx.save(&Message::tool_results(not_run))?;
        let tools = llm.message.tool_uses().map(|c| c.name.clone()).collect();
        state.status = Some(AgentStatus::RepeatedToolCalls { tools, times: state.repeats.times });
        Ok(())
    }

    #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
    #[guard(has_tool_calls)]
    async fn execute_tool_calls(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        let llm = state.llm_result.as_ref().expect("guarded by has_tool_calls");
        state.delegate_result = Some(self.delegate.call(cx, &llm.message, &llm.offered_tools).await?);
        Ok(())
    }

    #[transition(from = AwaitingTools, to = Ready)]
    #[guard(all_tools_complete)]
    async fn tools_complete(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = PromptExecuted, to = End)]
    async fn respond(&self, state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        let llm = state.llm_result.as_ref().expect("a model turn came first");
        state.status = Some(AgentStatus::of_answer(&llm.stop_reason, &llm.message.text()));
        Ok(())
    }

    fn repeats_itself(&self, state: &ToolCallState) -> bool {
        state.repeats.times > MAX_SAME_CALLS
    }

    fn has_tool_calls(&self, state: &ToolCallState) -> bool {
        // The stop reason says tool use and there is a call to make.
        state.llm_result.as_ref().is_some_and(GenerateResult::wants_tools)
    }

    fn all_tools_complete(&self, state: &ToolCallState) -> bool {
        state.delegate_result.as_ref().is_some_and(|r| r.all_completed)
    }
}

impl ToolCallWorkflow {
    fn new(models: Models, options: GenerateOptions) -> Result<Self, loopstack::RegistryError> {
        Ok(Self::with_tools(models, options, ToolRegistry::new().with(GetWeather)?))
    }

    fn with_tools(models: Models, options: GenerateOptions, tools: ToolRegistry) -> Self {
        let (llm, delegate) = (LlmGenerateText::new(models, tools.clone()), LlmDelegateToolCalls::new(tools));
        Self { llm, delegate, options, image: None }
    }
}

/// The offline model: it reads the conversation it is given and either asks for the
/// weather of the city in the question, or answers from the tool result.
fn scripted_weather_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().ok_or_else(|| LlmError::Script {
            model: request.model.clone(),
            message: "the conversation is empty".into(),
        })?;
        let usage = Usage::new(50, 10);
        if let Some(result) = last.tool_results_iter().next() {
            let question = request.messages.first().map(|m| m.text()).unwrap_or_default();
            let answer = format!("In {}: {}", city_in(&question), result.content);
            return Ok(ChatResponse::new(Message::assistant(answer), StopReason::EndTurn, usage, "scripted-weather"));
        }
        let call = ToolUse::new("call_0", "get_weather", serde_json::json!({ "location": city_in(&last.text()) }));
        let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
        Ok(ChatResponse::new(message, StopReason::ToolUse, usage, "scripted-weather"))
    })
}

/// The word after the last " in ", without punctuation; Berlin if there is none.
fn city_in(question: &str) -> String {
    question
        .rsplit_once(" in ")
        .map(|(_, rest)| rest.trim_matches(|c: char| !c.is_alphanumeric() && c != ' ').to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "Berlin".to_owned())
}

struct Args {
    provider: String,
    model: Option<String>,
    question: String,
    mermaid: bool,
    db: String,
    resume: Option<RunId>,
    stream: bool,
    text_tool_calls: bool,
    system: Option<String>,
    temperature: Option<f32>,
    /// MCP servers started as these command lines, their tools given to the agent.
    mcp: Vec<String>,
    /// MCP servers at these URLs (streamable HTTP), their tools given to the agent.
    mcp_urls: Vec<String>,
    /// An image file shown to the model with the question.
    image: Option<std::path::PathBuf>,
    /// Models tried in order when the model is rate limited, overloaded or down:
    /// (provider, model name).
    fallbacks: Vec<(String, String)>,
}

const USAGE: &str = "\
usage: weather [--provider PROVIDER] [--model NAME] [--question TEXT]
               [--system TEXT] [--temperature T] [--text-tool-calls] [--stream]
               [--db PATH|memory] [--resume RUN_ID] [--mermaid] [--image PATH]
               [--mcp 'COMMAND ARGS...']... [--mcp-url URL]... [--fallback PROVIDER:MODEL]...

  --provider         scripted (default, offline); anthropic (ANTHROPIC_API_KEY,
                     with the `anthropic` feature);
                     openai, Chat Completions (OPENAI_API_KEY, OPENAI_BASE_URL for
                     local servers); openai-responses (the same variables); azure and
                     azure-responses (AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_API_KEY,
                     OPENAI_API_VERSION); gemini (GEMINI_API_KEY) and vertex
                     (GOOGLE_CLOUD_PROJECT, GOOGLE_CLOUD_LOCATION,
                     GOOGLE_CLOUD_ACCESS_TOKEN), with the `gemini` feature; bedrock
                     (AWS_REGION and the AWS credentials), with the `bedrock` feature
  --model            the model name (each provider's default below)
  --question         what to ask (default: How is the weather in Berlin?)
  --system           a system prompt
  --temperature      the sampling temperature
  --text-tool-calls  read tool calls a local model writes as text (also OPENAI_TEXT_TOOL_CALLS=1)
  --stream           print the answer as the model streams it
  --db               the SQLite file runs are kept in (default weather.db), or memory
  --resume           resume the run with this id from the store
  --mermaid          print the workflow's state diagram and exit
  --image            show the model this image (PNG, JPEG, GIF or WebP, at most 5 MB)
                     with the question
  --mcp              also give the agent the tools of the MCP server this command
                     line starts (stdio; repeatable; with the `mcp` feature)
  --mcp-url          also give the agent the tools of the MCP server at this URL
                     (streamable HTTP; repeatable; with the `mcp` feature)
  --fallback         when the model is rate limited, overloaded, failing or timing
                     out, ask this one instead (anthropic:claude-haiku-4-5,
                     openai:gpt-4o-mini ...; repeatable, tried in order)

Exit status: 0 for a complete answer, 1 when the run failed or its answer is not
one (empty, a tool call written as text, cut off, a model repeating itself), 2 for
bad flags.";

/// What the command line asks for.
enum Command {
    Run(Box<Args>),
    Help,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut parsed = Args {
        provider: "scripted".into(),
        model: None,
        question: "How is the weather in Berlin?".into(),
        mermaid: false,
        db: "weather.db".into(),
        resume: None,
        stream: false,
        text_tool_calls: false,
        system: None,
        temperature: None,
        mcp: Vec::new(),
        mcp_urls: Vec::new(),
        image: None,
        fallbacks: Vec::new(),
    };
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--provider" => {
                parsed.provider = value()?;
                if !PROVIDERS.contains(&parsed.provider.as_str()) {
                    return Err(format!("unknown provider `{}`; use {}", parsed.provider, PROVIDERS.join(", ")));
                }
            }
            "--model" => parsed.model = Some(value()?),
            "--question" => parsed.question = value()?,
            "--system" => parsed.system = Some(value()?),
            "--temperature" => {
                let t = value()?;
                parsed.temperature = Some(t.parse().map_err(|e| format!("--temperature `{t}` is not a number: {e}"))?);
            }
            "--text-tool-calls" => parsed.text_tool_calls = true,
            "--stream" => parsed.stream = true,
            "--mermaid" => parsed.mermaid = true,
            "--db" => parsed.db = value()?,
            "--mcp" => parsed.mcp.push(value()?),
            "--mcp-url" => parsed.mcp_urls.push(value()?),
            "--image" => parsed.image = Some(value()?.into()),
            "--fallback" => {
                let v = value()?;
                let Some((provider, model)) = v.split_once(':').filter(|(p, m)| !p.is_empty() && !m.is_empty()) else {
                    return Err(format!("--fallback `{v}` is not PROVIDER:MODEL, such as openai:gpt-4o-mini"));
                };
                if !PROVIDERS.contains(&provider) {
                    return Err(format!("--fallback: unknown provider `{provider}`; use {}", PROVIDERS.join(", ")));
                }
                parsed.fallbacks.push((provider.to_owned(), model.to_owned()));
            }
            "--resume" => {
                let id = value()?;
                parsed.resume = Some(id.parse().map_err(|e| format!("--resume `{id}` is not a run id: {e}"))?);
            }
            "-h" | "--help" => return Ok(Command::Help),
            other => return Err(format!("unknown flag `{other}`; see --help")),
        }
    }
    Ok(Command::Run(Box::new(parsed)))
}

/// The models of the provider and of each fallback, and the provider's default model.
fn model_for(args: &Args) -> Result<(Models, &'static str), Box<dyn std::error::Error>> {
    let (mut models, default) = provider_model(args, &args.provider)?;
    for (provider, _) in &args.fallbacks {
        if !models.contains(provider) {
            let (other, _) = provider_model(args, provider)?;
            for name in PROVIDERS.iter().filter(|n| other.contains(n)) {
                models.insert(name.to_owned(), other.get(name)?.clone())?;
            }
        }
    }
    Ok((models, default))
}

/// The providers `--provider` and `--fallback` take.
const PROVIDERS: [&str; 9] =
    ["scripted", "anthropic", "openai", "openai-responses", "azure", "azure-responses", "gemini", "vertex", "bedrock"];

fn provider_model(args: &Args, provider: &str) -> Result<(Models, &'static str), Box<dyn std::error::Error>> {
    use loopstack::llm::{AzureOpenAi, OpenAiResponses};
    Ok(match provider {
        "scripted" => (Models::new().with(scripted_weather_model()), "scripted-weather"),
        #[cfg(feature = "anthropic")]
        "anthropic" => (Models::new().with(loopstack::llm::anthropic::Anthropic::from_env()?), "claude-sonnet-4-5"),
        "openai" => {
            let mut openai = loopstack::llm::openai::OpenAi::from_env()?;
            if args.text_tool_calls {
                openai = openai.text_tool_calls(true);
            }
            (Models::new().with(openai), "gpt-4o-mini")
        }
        "openai-responses" => (Models::new().with(OpenAiResponses::from_env()?), "gpt-5-mini"),
        // On Azure a model is a deployment of the resource: `--model` names it.
        "azure" => (Models::new().with(AzureOpenAi::from_env()?.chat()), "gpt-4o-mini"),
        "azure-responses" => (Models::new().with(AzureOpenAi::from_env()?.responses()), "gpt-5-mini"),
        #[cfg(feature = "gemini")]
        "gemini" => (Models::new().with(loopstack::llm::Gemini::from_env()?), "gemini-2.5-flash"),
        #[cfg(feature = "gemini")]
        "vertex" => (Models::new().with(loopstack::llm::Gemini::vertex_from_env()?), "gemini-2.5-flash"),
        #[cfg(feature = "bedrock")]
        "bedrock" => {
            (Models::new().with(loopstack::llm::Bedrock::from_env()?), "us.anthropic.claude-sonnet-4-5-20250929-v1:0")
        }
        #[cfg(not(feature = "anthropic"))]
        "anthropic" => return Err(needs_feature(provider, "anthropic")),
        #[cfg(not(feature = "gemini"))]
        "gemini" | "vertex" => return Err(needs_feature(provider, "gemini")),
        #[cfg(not(feature = "bedrock"))]
        "bedrock" => return Err(needs_feature(provider, "bedrock")),
        other => return Err(format!("unknown provider `{other}`; use {}", PROVIDERS.join(", ")).into()),
    })
}

/// The error for a provider this build left out.
#[allow(dead_code)] // Not called when every provider's feature is on.
fn needs_feature(provider: &str, feature: &str) -> Box<dyn std::error::Error> {
    format!("`{provider}` needs the `{feature}` feature: cargo run --example weather --features {feature} -- --provider {provider}")
        .into()
}

/// `get_weather`, and the tools of the MCP servers of `--mcp` and `--mcp-url`.
async fn tools_for(args: &Args) -> Result<ToolRegistry, Box<dyn std::error::Error>> {
    let tools = ToolRegistry::new().with(GetWeather)?;
    #[cfg(not(feature = "mcp"))]
    if !args.mcp.is_empty() || !args.mcp_urls.is_empty() {
        return Err(
            "`--mcp` and `--mcp-url` need the `mcp` feature: cargo run --example weather --features mcp -- ...".into(),
        );
    }
    #[cfg(feature = "mcp")]
    let tools = mcp_tools(args, tools).await?;
    Ok(tools)
}

/// `tools`, and the tools of the MCP servers of `--mcp` and `--mcp-url`.
#[cfg(feature = "mcp")]
async fn mcp_tools(args: &Args, mut tools: ToolRegistry) -> Result<ToolRegistry, Box<dyn std::error::Error>> {
    use loopstack::mcp::{McpRegistryExt as _, McpServer};
    let commands = args.mcp.iter().map(|line| McpServer::command_line(line));
    let urls = args.mcp_urls.iter().map(|url| Ok(McpServer::http(url)));
    for server in commands.chain(urls) {
        let server = tools.add_mcp(server?).await?;
        println!("MCP server `{}`: {}", server.server_name(), server.tool_names().join(", "));
    }
    Ok(tools)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(args)) => args,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(*args).await {
        Ok(Some(status)) if status.is_completed() => ExitCode::SUCCESS,
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(_)) => ExitCode::FAILURE,
        Err(err) => {
            // loopstack's errors carry their causes in their messages.
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints the model's text of run `run_id` as it streams, until the drive ends.
fn print_stream(mut events: loopstack::RunEvents) -> tokio::task::JoinHandle<()> {
    use std::io::Write as _;
    tokio::spawn(async move {
        let mut out = std::io::stdout();
        while let Some(event) = events.recv().await {
            // Fell behind: some pieces were skipped; go on with the rest.
            let Ok(event) = event else { continue };
            match &event.kind {
                loopstack::EventKind::TextDelta { text } => {
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                }
                loopstack::EventKind::ToolCallStarted { name, .. } => {
                    let _ = writeln!(out, "[calling {name}]");
                }
                loopstack::EventKind::Finished { .. } | loopstack::EventKind::Waiting { .. } => break,
                _ => {}
            }
        }
        let _ = writeln!(out);
    })
}

/// Runs the example; the status of the run's answer, `None` when nothing ran.
async fn run(args: Args) -> Result<Option<AgentStatus>, Box<dyn std::error::Error>> {
    if args.mermaid {
        // The diagram needs no model: draw it from the transition table.
        let options = GenerateOptions::new("scripted", "scripted-weather");
        let workflow = ToolCallWorkflow::new(Models::new().with(scripted_weather_model()), options)?;
        println!("{}", workflow.mermaid());
        return Ok(None);
    }
    // A missing, too large or unknown image is an error before anything runs.
    let image = match &args.image {
        Some(path) => Some(load_image(path.clone()).await?),
        None => None,
    };
    if args.provider == "scripted" {
        println!(
            "Running offline with the scripted model: no API key or network needed (use --provider anthropic|openai for a real model)."
        );
    } else {
        println!("Running with provider `{}`.", args.provider);
    }
    let (models, default_model) = model_for(&args)?;
    let model = args.model.clone().unwrap_or_else(|| default_model.to_owned());
    let tools = tools_for(&args).await?;
    let mut options = GenerateOptions::new(args.provider.as_str(), model).tools(tools.names()).max_tokens(1024);
    options.settings.system.clone_from(&args.system);
    options.settings.temperature = args.temperature;
    for (provider, model) in &args.fallbacks {
        options = options.fallback(provider.as_str(), model.as_str());
    }
    let mut workflow = ToolCallWorkflow::with_tools(models, options, tools);
    workflow.image = image;

    let runtime = if args.db == "memory" {
        Runtime::new()
    } else {
        Runtime::with_store(loopstack::SqliteStore::open(&args.db).await?)
    };
    // A model that keeps calling tools is stopped after 40 transitions (13 model turns).
    let run_id = args.resume.unwrap_or_default();
    let mut printer = None;
    let finished = match args.resume {
        // A run that already ended is shown as it is.
        Some(run_id) if runtime.store().load_run(run_id).await?.status == loopstack::RunStatus::Completed => {
            println!("Run {run_id} in {} has completed.", args.db);
            let record = runtime.store().load_run(run_id).await?;
            serde_json::from_str::<ToolCallState>(record.state.get())?
        }
        Some(run_id) => {
            println!("Resuming run {run_id} from {}", args.db);
            printer = args.stream.then(|| print_stream(runtime.subscribe().run(run_id)));
            runtime.resume(&workflow, run_id).max_steps(40).await?.state
        }
        None => {
            // Printed before the first transition, so a run whose process dies can be resumed.
            println!("Run {run_id} (store: {})", args.db);
            if args.stream {
                println!("\nAnswer (streamed):");
                printer = Some(print_stream(runtime.subscribe().run(run_id)));
            }
            runtime.start(&workflow, args.question).run_id(run_id).max_steps(40).await?.state
        }
    };
    // The printer ends with the drive's last event, which it may not have read yet.
    if let Some(printer) = printer {
        printer.await?;
    }
    let store = runtime.store();

    println!("\nConversation:");
    let mut usage = Usage::default();
    // The conversation's messages (an image's data is a document of its own).
    for doc in
        store.documents(run_id).await?.iter().filter(|d| d.doc_type == loopstack::llm::generate::MESSAGE_DOCUMENT)
    {
        let message: Message = doc.read()?;
        if let Some(u) = doc.metadata.read::<Usage>("usage") {
            usage += u?;
        }
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => println!("  {:?}: {text}", message.role),
                ContentBlock::ToolUse(call) => println!("  tool call {} {}({})", call.id, call.name, call.input),
                ContentBlock::ToolResult(r) => {
                    let kind = if r.is_error { "tool error" } else { "tool result" };
                    println!("  {kind} {}: {}", r.tool_use_id, r.content);
                }
                ContentBlock::Provider { provider, .. } => println!("  ({provider} block)"),
                ContentBlock::Image { source, .. } => {
                    println!(
                        "  {:?}: [image {}]",
                        message.role,
                        source.media_type().map_or("(a URL)", MediaType::as_str)
                    )
                }
                _ => {}
            }
        }
    }
    println!("\nTransitions:");
    for step in store.history(run_id).await? {
        println!("  {:>2}. {} -> {} ({})", step.step, step.from, step.to, step.transition);
    }
    // Every model turn's usage; a server that caches the prompt's prefix (OpenAI's API,
    // llama.cpp's server) reports the cached part apart.
    let cached = usage.cache_read_input_tokens;
    let cached = if cached > 0 { format!(" (and {cached} read from the cache)") } else { String::new() };
    println!("\nTokens: {} input{cached}, {} output", usage.input_tokens, usage.output_tokens);
    let status = finished.status.unwrap_or(AgentStatus::Completed);
    if let Some(problem) = describe(&status) {
        eprintln!("\n{problem}");
    }
    Ok(Some(status))
}

/// The image file at `path` (read off the async runtime), its format from its first
/// bytes; a file that is missing, over 5 MB or not PNG, JPEG, GIF or WebP is an error
/// that says so.
async fn load_image(path: std::path::PathBuf) -> Result<Image, String> {
    let shown = path.display().to_string();
    let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
        .await
        .map_err(|e| format!("--image {shown}: {e}"))?
        .map_err(|e| format!("--image {shown}: cannot read the file: {e}"))?;
    Image::from_bytes(&bytes).map_err(|e| format!("--image {shown}: {e}"))
}

/// What to tell the user about an answer that is not a complete one.
fn describe(status: &AgentStatus) -> Option<String> {
    Some(match status {
        AgentStatus::Completed => return None,
        AgentStatus::MaxTokens => "The answer was cut off at the output token limit: it is incomplete.".into(),
        AgentStatus::EmptyAnswer => "The model gave an empty answer.".into(),
        AgentStatus::UnparsedToolCall => "The answer is a tool call written as text, which was not run: \
             for a local model, pass --text-tool-calls (or set OPENAI_TEXT_TOOL_CALLS=1)."
            .into(),
        AgentStatus::RepeatedToolCalls { tools, times } => format!(
            "The model asked for the same call ({}) {times} times in a row and was stopped; \
             a system prompt (--system) usually helps a small model.",
            tools.join(", ")
        ),
        other => format!("The run ended without a complete answer: {other:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow(model: ScriptedModel) -> ToolCallWorkflow {
        let options = GenerateOptions::new("scripted", "scripted-weather").tools(["get_weather"]);
        ToolCallWorkflow::new(Models::new().with(model), options).unwrap()
    }

    /// A model turn: with a tool call, or with text only.
    fn turn(calls: bool) -> GenerateResult {
        let result = if calls {
            let call = ToolUse::new("c", "get_weather", serde_json::json!({}));
            let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
            GenerateResult::new(message, StopReason::ToolUse)
        } else {
            GenerateResult::new(Message::assistant("Sunny."), StopReason::EndTurn)
        };
        result.provider("scripted").model("m")
    }

    #[test]
    fn guards() {
        let wf = workflow(ScriptedModel::new());
        let mut state = ToolCallState::default();
        assert!(!wf.has_tool_calls(&state));
        state.llm_result = Some(turn(true));
        assert!(wf.has_tool_calls(&state));
        state.llm_result = Some(turn(false));
        assert!(!wf.has_tool_calls(&state));

        assert!(!wf.all_tools_complete(&state));
        state.delegate_result = Some(DelegateResult::default());
        assert!(!wf.all_tools_complete(&state));
    }

    #[test]
    fn routing() {
        use ToolCallWorkflowPlace as P;
        let wf = workflow(ScriptedModel::new());
        let mut state = ToolCallState::default();
        assert_eq!(wf.next_transition(P::Start, &state).unwrap(), Some("setup"));
        assert_eq!(wf.next_transition(P::Ready, &state).unwrap(), Some("llm_turn"));
        state.llm_result = Some(turn(true));
        assert_eq!(wf.next_transition(P::PromptExecuted, &state).unwrap(), Some("execute_tool_calls"));
        state.llm_result = Some(turn(false));
        assert_eq!(wf.next_transition(P::PromptExecuted, &state).unwrap(), Some("respond"));
        // Tool results not complete: a dead end that names the guard, never a silent park.
        assert_eq!(
            wf.route(P::AwaitingTools, &state).unwrap(),
            Route::DeadEnd { false_guards: vec!["all_tools_complete"] }
        );
    }

    #[test]
    fn the_diagram_matches_the_readme_and_the_tutorial() {
        let wf = workflow(ScriptedModel::new());
        let diagram = format!("```mermaid\n{}```", wf.mermaid());
        for (file, text) in [
            ("README.md", include_str!("../README.md")),
            ("docs/src/tutorial.md", include_str!("../docs/src/tutorial.md")),
        ] {
            assert!(text.contains(&diagram), "the diagram in {file} is stale:\n{diagram}");
        }
    }

    #[test]
    fn help_is_a_command_and_flags_are_parsed() {
        let args = |a: &[&str]| parse_args(a.iter().map(|s| (*s).to_owned()));
        assert!(matches!(args(&["--help"]), Ok(Command::Help)));
        assert!(matches!(args(&["--question", "x", "-h"]), Ok(Command::Help)));
        let Ok(Command::Run(parsed)) =
            args(&["--text-tool-calls", "--stream", "--system", "Be brief.", "--temperature", "0"])
        else {
            panic!("flags")
        };
        assert!(parsed.text_tool_calls && parsed.stream);
        assert_eq!((parsed.system.as_deref(), parsed.temperature), (Some("Be brief."), Some(0.0)));
        assert_eq!(
            args(&["--temperature", "hot"]).err().unwrap(),
            "--temperature `hot` is not a number: invalid float literal"
        );
        assert_eq!(args(&["--bogus"]).err().unwrap(), "unknown flag `--bogus`; see --help");
    }

    #[test]
    fn fallbacks_repeat_in_order_and_are_checked() {
        let args = |a: &[&str]| parse_args(a.iter().map(|s| (*s).to_owned()));
        let Ok(Command::Run(parsed)) = args(&["--fallback", "openai:gpt-4o-mini", "--fallback", "scripted:spare"])
        else {
            panic!("flags")
        };
        let expected = [("openai".to_owned(), "gpt-4o-mini".to_owned()), ("scripted".to_owned(), "spare".to_owned())];
        assert_eq!(parsed.fallbacks, expected);
        assert!(args(&["--fallback", "gpt-4o"]).err().unwrap().contains("is not PROVIDER:MODEL"));
        assert!(args(&["--fallback", "mistral:small"]).err().unwrap().contains("unknown provider `mistral`"));
    }

    #[test]
    fn mcp_flags_repeat() {
        let flags = ["--mcp", "npx -y server-a", "--mcp-url", "http://127.0.0.1:3001/mcp", "--mcp", "server-b"];
        let Ok(Command::Run(parsed)) = parse_args(flags.map(str::to_owned)) else { panic!("flags") };
        assert_eq!(parsed.mcp, ["npx -y server-a", "server-b"]);
        assert_eq!(parsed.mcp_urls, ["http://127.0.0.1:3001/mcp"]);
    }

    async fn final_status(model: ScriptedModel) -> AgentStatus {
        let report = Runtime::new().start(&workflow(model), "Weather in Oslo?".to_owned()).await.unwrap();
        report.state.status.unwrap()
    }

    #[tokio::test]
    async fn answers_that_are_not_answers_get_their_status_and_a_reason() {
        let reply = |text: &str, stop| ChatResponse::new(Message::assistant(text), stop, Usage::new(1, 1), "m");
        let status = final_status(ScriptedModel::new().reply(reply("", StopReason::EndTurn))).await;
        assert_eq!(status, AgentStatus::EmptyAnswer);
        let text_call = r#"```json
{"name": "get_weather", "arguments": {"location": "Oslo"}}
```"#;
        let status = final_status(ScriptedModel::new().reply(reply(text_call, StopReason::EndTurn))).await;
        assert_eq!(status, AgentStatus::UnparsedToolCall);
        assert!(describe(&status).unwrap().contains("--text-tool-calls"));
        let status = final_status(ScriptedModel::new().reply(reply("It is sunny and", StopReason::MaxTokens))).await;
        assert_eq!(status, AgentStatus::MaxTokens);
        assert!(describe(&status).unwrap().contains("cut off"));
        assert_eq!(describe(&AgentStatus::Completed), None);
    }

    #[tokio::test]
    async fn a_model_that_asks_for_the_same_call_forever_is_stopped() {
        // Like a small model without a system prompt: the same call after every result.
        let model = ScriptedModel::from_fn(|req| {
            let call = ToolUse::new(
                format!("call_{}", req.messages.len()),
                "get_weather",
                serde_json::json!({"location": "Oslo"}),
            );
            let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
            Ok(ChatResponse::new(message, StopReason::ToolUse, Usage::new(1, 1), "m"))
        });
        let runtime = Runtime::new();
        let report = runtime.start(&workflow(model.clone()), "Weather in Oslo?".to_owned()).await.unwrap();
        let status = report.state.status.unwrap();
        assert_eq!(
            status,
            AgentStatus::RepeatedToolCalls { tools: vec!["get_weather".into()], times: MAX_SAME_CALLS + 1 }
        );
        assert!(describe(&status).unwrap().contains("--system"));
        assert_eq!(model.calls(), u64::from(MAX_SAME_CALLS) + 1);
        // The last call is answered, so the stored conversation stays valid.
        let docs = runtime.store().documents(report.run_id).await.unwrap();
        let last: Message = docs.last().unwrap().read().unwrap();
        assert!(last.tool_results_iter().all(|r| r.is_error && r.content.starts_with("not run")));
    }

    #[test]
    fn city_extraction() {
        assert_eq!(city_in("How is the weather in Berlin?"), "Berlin");
        assert_eq!(city_in("Weather in New York today"), "New York today");
        assert_eq!(city_in("Hello"), "Berlin");
    }

    #[tokio::test]
    async fn an_image_is_shown_with_the_question_and_a_bad_file_is_an_error() {
        let dir = std::env::temp_dir().join(format!("weather-image-{}", RunId::new()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];
        std::fs::write(dir.join("sky.png"), png).unwrap();
        let image = load_image(dir.join("sky.png")).await.unwrap();
        assert_eq!(image.media_type(), Some(MediaType::Png));

        let model = scripted_weather_model();
        let mut wf = workflow(model.clone());
        wf.image = Some(image.clone());
        let runtime = Runtime::new();
        let report = runtime.start(&wf, "Will it rain in Oslo?".to_owned()).await.unwrap();
        assert_eq!(report.outcome, RunOutcome::Completed);
        assert_eq!(model.requests()[0].messages[0].images().next(), Some((&image, None)));

        let missing = load_image(dir.join("missing.png")).await.unwrap_err();
        assert!(missing.starts_with("--image ") && missing.contains("cannot read the file"), "{missing}");
        std::fs::write(dir.join("notes.png"), b"not an image").unwrap();
        let unknown = load_image(dir.join("notes.png")).await.unwrap_err();
        assert!(unknown.ends_with("the bytes are not a PNG, JPEG, GIF or WebP image"), "{unknown}");
        let mut big = png.to_vec();
        big.resize(loopstack::llm::image::DEFAULT_MAX_IMAGE_BYTES + 1, 0);
        std::fs::write(dir.join("big.png"), big).unwrap();
        let big = load_image(dir.join("big.png")).await.unwrap_err();
        assert!(big.contains("over the limit of 5242880 bytes"), "{big}");
        assert!(matches!(parse_args(["--image".to_owned()]), Err(e) if e == "--image needs a value"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn end_to_end_with_the_scripted_model() {
        let model = scripted_weather_model();
        let wf = workflow(model.clone());
        let runtime = Runtime::new();
        let report = runtime.start(&wf, "What is the weather in Oslo?".to_owned()).await.unwrap();
        assert_eq!(report.outcome, RunOutcome::Completed);

        let docs = runtime.store().documents(report.run_id).await.unwrap();
        let messages: Vec<Message> = docs.iter().map(|d| d.read().unwrap()).collect();
        let call = ToolUse::new("call_0", "get_weather", serde_json::json!({"location": "Oslo"}));
        let result = ToolResult {
            tool_use_id: "call_0".into(),
            content: "Mostly sunny, 14C, rain in the afternoon.".into(),
            is_error: false,
        };
        assert_eq!(
            messages,
            [
                Message::user("What is the weather in Oslo?"),
                Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] },
                Message::tool_results([result.clone()]),
                Message::assistant("In Oslo: Mostly sunny, 14C, rain in the afternoon."),
            ]
        );
        assert!(docs.iter().all(|d| d.doc_type == "llm_message" && d.tags == ["conversation"]));
        for i in [1, 3] {
            let meta = docs[i].metadata.to_map();
            assert_eq!(meta["provider"], "scripted");
            assert_eq!(meta["model"], "scripted-weather");
            assert_eq!(meta["usage"]["input_tokens"], 50);
        }
        let steps: Vec<String> = runtime
            .store()
            .history(report.run_id)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.transition.into_owned())
            .collect();
        assert_eq!(steps, ["setup", "llm_turn", "execute_tool_calls", "tools_complete", "llm_turn", "respond"]);

        // The model saw the offered tool with its schema, and the conversation so far.
        let requests = model.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].tools.len(), 1);
        assert_eq!(requests[0].tools[0].name, "get_weather");
        assert_eq!(requests[0].tools[0].input_schema["required"], serde_json::json!(["location"]));
        assert_eq!(requests[1].messages.len(), 3);
        assert_eq!(report.state.delegate_result, None, "cleared by the second llm turn");
    }
}
