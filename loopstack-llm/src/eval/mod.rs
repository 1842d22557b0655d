//! Evals: run an agent on a dataset of cases, score each outcome, and compare two
//! evals case by case.
//!
//! Each case is a run of the agent in the runtime's store, with an id derived from
//! the eval's id, the case (its id and input) and the repeat: run an eval again with
//! the same [`Eval::id`] (after a crash, say) and the cases that ended are read back,
//! not run again, and the ones left running are resumed; a case whose input changed
//! since, or that is new, runs anew. Any case's run opens in Studio like any other
//! run.
//!
//! The eval itself is recorded when it ends: a run under the eval's id of the
//! one-step workflow [`EVAL_WORKFLOW`], whose state is the [`EvalReport`]. Studio's
//! Evals page lists those runs (`GET /api/runs?workflow=loopstack_eval`). An eval
//! run again with the same id keeps the record of its first end.
//!
//! ```
//! use loopstack_core::{Runtime, ToolRegistry};
//! use loopstack_llm::eval::{Case, Contains, Dataset, Eval};
//! use loopstack_llm::{Agent, ChatRequest, Message, ScriptedModel};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedModel::from_fn(|r: &ChatRequest| {
//!     let question = r.messages[0].text();
//!     let answer = if question.contains("Oslo") { "Rain in Oslo." } else { "I do not know." };
//!     Ok(ScriptedModel::new().text_response(answer))
//! });
//! let agent = Agent::new(model, "m", ToolRegistry::new()).named("weather")?;
//! let dataset = Dataset::new("weather")
//!     .case(Case::new("oslo", "Weather in Oslo?").expected("rain"))
//!     .case(Case::new("rome", "Weather in Rome?").expected("sun"));
//! let report = Eval::new(dataset, &agent).scorer(Contains::expected()).run(&Runtime::new()).await?;
//! assert_eq!((report.summary.passed, report.summary.cases), (1, 2));
//! println!("{}", report.table());
//! # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt};
use loopstack_core::{RunId, RunStatus, Runtime, StoreError};
use serde_json::Value;

use crate::agent::{Agent, AgentState, AgentStatus, AskError};
use crate::message::{Message, ToolUse, Usage};

mod dataset;
mod record;
mod report;
mod score;

pub use dataset::{Case, Dataset};
pub use record::EVAL_WORKFLOW;
pub use report::{CaseReport, Comparison, EvalReport, Summary};
pub use score::{
    CalledTool, Contains, Custom, Exact, FitsSchema, JUDGE_PROMPT, Judge, Matches, Score, Scorer, Verdict, custom,
};

/// Why an eval could not run, or a scorer could not score.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The dataset does not read (a line of JSONL, two cases with one id).
    #[error("the dataset: {0}")]
    Dataset(String),
    /// A scorer cannot score (its regex or schema, an `expected` value it lacks).
    #[error("a scorer: {0}")]
    Scorer(String),
    /// The judge model failed, or its verdict does not read.
    #[error("the judge: {0}")]
    Judge(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A case's run could not be driven (not a run that failed: that is an outcome).
    #[error(transparent)]
    Run(#[from] AskError),
}

/// What a case's run did, for the scorers.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Outcome {
    /// The run.
    pub run_id: RunId,
    /// How the run stands: completed, waiting (for an approval, say), failed ...
    pub status: RunStatus,
    /// How the agent ended, or what it waits for.
    pub agent_status: Option<AgentStatus>,
    /// The final answer's text (empty when there is none).
    pub text: String,
    /// A typed agent's answer.
    pub answer: Option<Value>,
    /// Every tool call of the run, in order.
    pub tool_calls: Vec<ToolUse>,
    /// Tokens used.
    pub usage: Usage,
    /// What it cost, by the agent's prices.
    pub cost: f64,
    /// Model turns taken.
    pub turns: u32,
    /// From the run's start to its last change.
    pub latency: Duration,
    /// Why it failed.
    pub error: Option<String>,
}

/// What an eval reports as it goes: cases done, of how many, and the last one.
pub type Progress = dyn Fn(usize, usize, &CaseReport) + Send + Sync;

/// What an eval runs its cases on: an agent at hand, one registered by name, or
/// any registered workflow.
#[derive(Clone)]
enum Subject {
    Agent(Box<Agent>),
    Named(String),
    Workflow(String),
}

/// An eval of an agent on a dataset: see the [module docs](self).
pub struct Eval {
    name: String,
    id: RunId,
    dataset: Dataset,
    subject: Subject,
    scorers: Vec<Arc<dyn Scorer>>,
    repeats: u32,
    concurrency: usize,
    progress: Option<Arc<Progress>>,
}

impl std::fmt::Debug for Eval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eval")
            .field("name", &self.name)
            .field("id", &self.id)
            .field("agent", &self.agent_name())
            .field("cases", &self.dataset.cases().len())
            .field("repeats", &self.repeats)
            .finish_non_exhaustive()
    }
}

impl Eval {
    /// An eval of `agent` on `dataset`, named after the dataset, with a new id, each
    /// case once, four at a time.
    pub fn new(dataset: Dataset, agent: &Agent) -> Self {
        Self {
            name: dataset.name().to_owned(),
            id: RunId::new(),
            dataset,
            subject: Subject::Agent(Box::new(agent.clone())),
            scorers: Vec::new(),
            repeats: 1,
            concurrency: 4,
            progress: None,
        }
    }

    /// An eval of the agent registered in the runtime as `agent` (with
    /// [`Runtime::register`]): what a command line that knows its agents by name
    /// runs. Its cases start with [`Runtime::start_by_name`] and resume with
    /// [`Runtime::resume_by_name`]; a name that is not registered is the first
    /// case's error.
    pub fn named(dataset: Dataset, agent: impl Into<String>) -> Self {
        Self {
            name: dataset.name().to_owned(),
            id: RunId::new(),
            dataset,
            subject: Subject::Named(agent.into()),
            scorers: Vec::new(),
            repeats: 1,
            concurrency: 4,
            progress: None,
        }
    }

    /// An eval of any workflow registered in the runtime as `workflow`, an agent or
    /// not: each case's `input` is the run's input as JSON (text that is not JSON is
    /// a JSON string), and the outcome's `text` is the run's final state as JSON
    /// (a state that is a string: the string), its `answer` the state itself, so
    /// every scorer reads it (`Exact`, `Contains`, `Matches`, `FitsSchema`, a judge).
    /// Its tool calls are those of any conversation the run kept.
    pub fn workflow(dataset: Dataset, workflow: impl Into<String>) -> Self {
        Self { subject: Subject::Workflow(workflow.into()), ..Self::named(dataset, String::new()) }
    }

    /// The agent's name.
    fn agent_name(&self) -> &str {
        match &self.subject {
            Subject::Agent(agent) => agent.name(),
            Subject::Named(name) | Subject::Workflow(name) => name,
        }
    }

    /// Names the eval in its report.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the eval's id: the same id over the same store reads back the cases that
    /// ended and resumes the rest.
    #[must_use]
    pub fn id(mut self, id: RunId) -> Self {
        self.id = id;
        self
    }

    /// Adds a scorer.
    #[must_use]
    pub fn scorer(mut self, scorer: impl Scorer) -> Self {
        self.scorers.push(Arc::new(scorer));
        self
    }

    /// Runs each case `repeats` times (at least once), for models that answer
    /// differently each time.
    #[must_use]
    pub fn repeats(mut self, repeats: u32) -> Self {
        self.repeats = repeats.max(1);
        self
    }

    /// Runs up to `concurrency` cases at once (at least one).
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Calls `progress` after each case, with the cases done and their number.
    #[must_use]
    pub fn on_progress(mut self, progress: impl Fn(usize, usize, &CaseReport) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// The run id of `case`'s `repeat` (from 0) in this eval: derived from the eval's
    /// id as a child run's is from its parent's
    /// ([`child_run_id`](loopstack_core::children::child_run_id)), and from the case's
    /// id and input, so the same eval finds its cases again wherever they stand in
    /// the dataset, and a case whose input changed is a run of its own.
    pub fn case_run_id(&self, case: &Case, repeat: u32) -> RunId {
        // Each part with its length, so that no two (id, input) pairs feed the same bytes.
        let mut key = loopstack_core::fnv::Fnv1a::<u64>::default();
        for part in [case.id.as_bytes(), case.input.as_bytes()] {
            key.bytes(&(part.len() as u64).to_le_bytes());
            key.bytes(part);
        }
        loopstack_core::children::child_run_id(self.id, key.finish(), u64::from(repeat))
    }

    /// Runs every case (those of an earlier run of this eval that ended are read
    /// back), scores them, and reports.
    pub async fn run(&self, runtime: &Runtime) -> Result<EvalReport, EvalError> {
        let jobs: Vec<(usize, u32)> =
            (0..self.dataset.cases().len()).flat_map(|c| (0..self.repeats).map(move |r| (c, r))).collect();
        let total = jobs.len();
        let mut done = 0;
        let mut cases = Vec::with_capacity(total);
        let mut stream =
            futures::stream::iter(jobs).map(|(c, r)| self.case(runtime, c, r)).buffer_unordered(self.concurrency);
        while let Some(report) = stream.next().await {
            let report = report?;
            done += 1;
            if let Some(progress) = &self.progress {
                progress(done, total, &report);
            }
            cases.push(report);
        }
        drop(stream);
        cases.sort_by_key(|c: &CaseReport| (self.dataset.cases().iter().position(|d| d.id == c.case), c.repeat));
        let scorers = self.scorers.iter().map(|s| s.name().to_owned()).collect();
        let report =
            EvalReport::new(&self.name, self.id, self.dataset.name(), self.agent_name(), self.repeats, scorers, cases);
        record::save(runtime, &report).await?;
        Ok(report)
    }

    async fn case(&self, runtime: &Runtime, index: usize, repeat: u32) -> Result<CaseReport, EvalError> {
        let case = &self.dataset.cases()[index];
        let run_id = self.case_run_id(case, repeat);
        let outcome = self.outcome(runtime, run_id, case).await?;
        let mut scores = Vec::with_capacity(self.scorers.len());
        for scorer in &self.scorers {
            // A scorer that panics fails its case, as a tool or a guard that panics
            // fails its step: the eval's other cases, its report and its record stay.
            let scored = std::panic::AssertUnwindSafe(scorer.score(case, &outcome)).catch_unwind().await;
            let score = match scored {
                Ok(Ok(score)) => score,
                Ok(Err(e)) => Score::fail(e.to_string()),
                Err(panic) => {
                    let message = loopstack_core::panic_message(panic.as_ref());
                    Score::fail(EvalError::Scorer(format!("`{}` panicked: {message}", scorer.name())).to_string())
                }
            };
            scores.push((scorer.name().to_owned(), score));
        }
        Ok(CaseReport::new(case, repeat, &outcome, scores))
    }

    /// The case's run, started, resumed or read back, as an outcome.
    async fn outcome(&self, runtime: &Runtime, run_id: RunId, case: &Case) -> Result<Outcome, EvalError> {
        match (runtime.store().load_run(run_id).await, &self.subject) {
            (Ok(record), subject) if matches!(record.status, RunStatus::Queued | RunStatus::Running) => match subject {
                Subject::Agent(agent) => run_failure(agent.resume(runtime, run_id).await)?,
                Subject::Named(_) | Subject::Workflow(_) => {
                    run_failure(runtime.resume_by_name(run_id).await.map_err(AskError::from))?;
                }
            },
            (Ok(_), _) => {}
            (Err(StoreError::RunNotFound(_)), Subject::Agent(agent)) => {
                let started = runtime.start(&**agent, case.input.clone().into()).run_id(run_id).await;
                run_failure(started.map(|r| agent.reply_of(r)).map_err(AskError::from))?;
            }
            (Err(StoreError::RunNotFound(_)), Subject::Named(name)) => {
                let started = runtime.start_by_name(name, Value::String(case.input.clone()), run_id).await;
                run_failure(started.map_err(AskError::from))?;
            }
            (Err(StoreError::RunNotFound(_)), Subject::Workflow(name)) => {
                let input = serde_json::from_str(&case.input).unwrap_or_else(|_| Value::String(case.input.clone()));
                run_failure(runtime.start_by_name(name, input, run_id).await.map_err(AskError::from))?;
            }
            (Err(e), _) => return Err(e.into()),
        }
        let record = runtime.store().load_run(run_id).await?;
        let documents = runtime.store().documents(run_id).await?;
        let tool_calls = documents
            .iter()
            .filter(|d| d.doc_type == crate::generate::MESSAGE_DOCUMENT)
            .filter_map(|d| d.read::<Message>().ok())
            .flat_map(|m| m.tool_uses().cloned().collect::<Vec<_>>())
            .collect();
        if matches!(self.subject, Subject::Workflow(_)) {
            let state: Value = serde_json::from_str(record.state.get()).unwrap_or(Value::Null);
            let text = match &state {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            return Ok(Outcome {
                run_id,
                status: record.status,
                agent_status: None,
                text,
                answer: Some(state),
                tool_calls,
                usage: Usage::default(),
                cost: 0.0,
                turns: 0,
                latency: record.updated_at.since(record.created_at),
                error: record.error,
            });
        }
        let state: AgentState = serde_json::from_str(record.state.get()).unwrap_or_default();
        Ok(Outcome {
            run_id,
            status: record.status,
            agent_status: state.status,
            text: state.output.unwrap_or_default(),
            answer: state.answer,
            tool_calls,
            usage: state.usage,
            cost: state.cost,
            turns: state.turns,
            latency: record.updated_at.since(record.created_at),
            error: record.error,
        })
    }
}

/// A run that failed is an outcome (its error in the report); a runtime that could
/// not drive it is the eval's error.
fn run_failure<T>(result: Result<T, AskError>) -> Result<(), EvalError> {
    match result {
        Ok(_) | Err(AskError::Step { .. } | AskError::InvalidAnswer { .. } | AskError::NoAnswer { .. }) => Ok(()),
        Err(AskError::Run(e)) if e.run_id().is_some() && !matches!(e, loopstack_core::RunError::Store(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
