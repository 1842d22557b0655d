//! Workflows behind their names: what a runtime or worker can drive without
//! knowing their types (child runs, parents woken by their children, runs a worker
//! claims, runs started by name).

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Mode, RunOutcome, Runtime};
use crate::error::RunError;
use crate::store::{RunId, RunRecord};
use crate::workflow::Workflow;

/// How a type-erased drive is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Claim the run only if it waits or is queued: a parent woken by its child,
    /// a child its parent drives. A run another driver holds is left to it.
    IfIdle,
    /// Claim a queued or waiting run, or a running one whose lease ran out.
    Recover,
    /// Take the run over from any driver, as [`Runtime::resume`] does.
    Resume,
}

/// A workflow behind a name.
pub(crate) trait Drivable: Send + Sync {
    /// The workflow's transition table.
    fn definition(&self) -> &'static crate::Definition;

    /// The JSON Schema of the workflow's input, when it has one.
    fn input_schema(&self) -> Option<Value>;

    /// Drives a run a worker has claimed, stopping between two steps once `stop`
    /// is cancelled.
    fn drive_claimed<'a>(
        &'a self,
        runtime: &'a Runtime,
        record: RunRecord,
        stop: Option<tokio_util::sync::CancellationToken>,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>>;

    /// Claims and drives run `run_id`.
    fn wake<'a>(
        &'a self,
        runtime: &'a Runtime,
        run_id: RunId,
        how: Wake,
        cascade: bool,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>>;

    /// Sends a signal by name with a JSON payload and drives the run on.
    fn signal_json<'a>(
        &'a self,
        runtime: &'a Runtime,
        run_id: RunId,
        name: String,
        payload: Value,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>>;

    /// Forks a run with edits and drives the fork; returns its id.
    fn fork<'a>(
        &'a self,
        runtime: &'a Runtime,
        source: RunId,
        step: u64,
        edits: crate::ForkEdits,
        fork: RunId,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>>;

    /// Retries a failed, cancelled or stopped run.
    fn retry<'a>(&'a self, runtime: &'a Runtime, run_id: RunId) -> BoxFuture<'a, Result<RunOutcome, RunError>>;

    /// Starts run `run_id` from JSON input and drives it, if the workflow's input
    /// reads from JSON.
    fn start_json<'a>(
        &'a self,
        runtime: &'a Runtime,
        input: Value,
        run_id: RunId,
        labels: crate::Labels,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>>;

    /// Creates a queued run from JSON input, if the workflow's input reads from JSON.
    fn submit_json<'a>(&'a self, runtime: &'a Runtime, input: Value) -> BoxFuture<'a, Result<RunId, RunError>>;

    /// A queued run `run_id` of the workflow from JSON input, to create: what a
    /// schedule starts.
    fn new_run_json(&self, runtime: &Runtime, run_id: RunId, input: Value) -> Result<crate::NewRun, RunError>;

    /// Creates child run `child` of `parent` from JSON input (queued; the parent's
    /// `signal` takes its end), unless it exists.
    fn create_child_json<'a>(
        &'a self,
        runtime: &'a Runtime,
        child: RunId,
        parent: RunId,
        signal: &'static str,
        input: Value,
    ) -> BoxFuture<'a, Result<(), RunError>>;
}

/// How a registered workflow's input is read from JSON, when it can be.
type FromJson<W> = fn(Value) -> Result<<W as Workflow>::Input, serde_json::Error>;

pub(crate) struct Registered<W: Workflow> {
    pub(crate) workflow: Arc<W>,
    pub(crate) from_json: Option<FromJson<W>>,
    /// Its signals' payload schemas, compiled once.
    pub(crate) schemas: crate::schema::PayloadSchemas,
}

impl<W: Workflow> Registered<W> {
    /// The workflow's input read from JSON, for a run (to be) `run_id`.
    fn input(&self, run_id: RunId, input: Value) -> Result<W::Input, RunError> {
        let workflow = self.workflow.definition().name();
        let Some(from_json) = self.from_json else {
            return Err(RunError::Mismatch {
                workflow,
                run_id,
                reason: "the workflow was registered without an input that reads from JSON".to_owned(),
            });
        };
        from_json(input).map_err(|source| RunError::Input { workflow, source })
    }
}

impl<W: Workflow> Drivable for Registered<W> {
    fn definition(&self) -> &'static crate::Definition {
        self.workflow.definition()
    }

    fn input_schema(&self) -> Option<Value> {
        self.workflow.input_schema()
    }

    fn drive_claimed<'a>(
        &'a self,
        runtime: &'a Runtime,
        record: RunRecord,
        stop: Option<tokio_util::sync::CancellationToken>,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        let drive = runtime.drive_claimed(&*self.workflow, record);
        let drive = match stop {
            Some(stop) => drive.stop_on(stop),
            None => drive,
        };
        Box::pin(async move { drive.await.map(|r| r.outcome) })
    }

    fn wake<'a>(
        &'a self,
        runtime: &'a Runtime,
        run_id: RunId,
        how: Wake,
        cascade: bool,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        Box::pin(async move {
            let mode = match how {
                Wake::IfIdle => Mode::Wake(run_id),
                Wake::Recover => Mode::Recover(run_id),
                Wake::Resume => Mode::Resume(run_id),
            };
            let mut drive = super::Drive::new(runtime, &*self.workflow, mode);
            drive.cascade = cascade;
            drive.await.map(|r| r.outcome)
        })
    }

    fn signal_json<'a>(
        &'a self,
        runtime: &'a Runtime,
        run_id: RunId,
        name: String,
        payload: Value,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        Box::pin(async move {
            // A payload its published schema forbids is refused before anything is read
            // or stored.
            let def = self.workflow.definition();
            if let Some((_, t)) = def.transition(&name)
                && t.wait
                && let Err(reason) = self.schemas.check(def, &name, &payload)
            {
                let workflow = def.name();
                return Err(RunError::InvalidSignalPayload { workflow, run_id, signal: t.name, reason });
            }
            runtime.signal(&*self.workflow, run_id, (name, payload)).await.map(|r| r.outcome)
        })
    }

    fn fork<'a>(
        &'a self,
        runtime: &'a Runtime,
        source: RunId,
        step: u64,
        edits: crate::ForkEdits,
        fork: RunId,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        Box::pin(async move {
            runtime.fork_with(&*self.workflow, source, step, edits).run_id(fork).await.map(|r| r.outcome)
        })
    }

    fn retry<'a>(&'a self, runtime: &'a Runtime, run_id: RunId) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        Box::pin(async move { runtime.retry(&*self.workflow, run_id).await.map(|r| r.outcome) })
    }

    fn start_json<'a>(
        &'a self,
        runtime: &'a Runtime,
        input: Value,
        run_id: RunId,
        labels: crate::Labels,
    ) -> BoxFuture<'a, Result<RunOutcome, RunError>> {
        Box::pin(async move {
            let input = self.input(run_id, input)?;
            let mut drive = runtime.start(&*self.workflow, input).run_id(run_id);
            for (name, value) in labels {
                drive = drive.label(name, value);
            }
            drive.await.map(|r| r.outcome)
        })
    }

    fn submit_json<'a>(&'a self, runtime: &'a Runtime, input: Value) -> BoxFuture<'a, Result<RunId, RunError>> {
        Box::pin(async move {
            let input = self.input(RunId::default(), input)?;
            runtime.submit(&*self.workflow, input).await
        })
    }

    fn new_run_json(&self, runtime: &Runtime, run_id: RunId, input: Value) -> Result<crate::NewRun, RunError> {
        let input = self.input(run_id, input)?;
        let created = super::state::create(runtime, &*self.workflow, input, run_id)?;
        // A scheduled run: its own trace, under a `start` span (no request started it).
        Ok(crate::trace::traced(created.new.queued()))
    }

    fn create_child_json<'a>(
        &'a self,
        runtime: &'a Runtime,
        child: RunId,
        parent: RunId,
        signal: &'static str,
        input: Value,
    ) -> BoxFuture<'a, Result<(), RunError>> {
        Box::pin(async move {
            match runtime.store().load_run(child).await {
                Ok(_) => return Ok(()),
                Err(crate::StoreError::RunNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            let input = self.input(child, input)?;
            let created = super::state::create(runtime, &*self.workflow, input, child)?;
            let new = created.new.queued().child_of(parent, signal);
            let new = crate::trace::traced(new);
            runtime.store().create_run(new).await?;
            Ok(())
        })
    }
}

/// The workflows a runtime knows by name; cloning shares them.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    pub(crate) by_name: Arc<HashMap<&'static str, Arc<dyn Drivable>>>,
}

impl Registry {
    /// Registers `workflow` under its name; a name taken already is refused.
    pub(crate) fn insert<W: Workflow>(
        &mut self,
        workflow: Arc<W>,
        from_json: Option<FromJson<W>>,
    ) -> Result<(), crate::RegistryError> {
        let name = workflow.definition().name();
        if self.by_name.contains_key(name) {
            return Err(crate::RegistryError::DuplicateWorkflow {
                name: name.to_owned(),
                new: std::any::type_name::<W>(),
            });
        }
        Arc::make_mut(&mut self.by_name)
            .insert(name, Arc::new(Registered { workflow, from_json, schemas: Default::default() }));
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Drivable>> {
        self.by_name.get(name)
    }

    /// Each workflow's name with the versions of its runs it drives: its own and
    /// those it migrates from, sorted by name.
    pub(crate) fn versions(&self) -> Vec<(&'static str, Vec<u32>)> {
        let mut versions: Vec<(&'static str, Vec<u32>)> = self
            .by_name
            .iter()
            .map(|(name, w)| {
                let def = w.definition();
                (*name, std::iter::once(def.version()).chain(def.migrates_from().iter().copied()).collect())
            })
            .collect();
        versions.sort_unstable_by_key(|(name, _)| *name);
        versions
    }

    pub(crate) fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.by_name.keys().copied().collect();
        names.sort_unstable();
        names
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}
