//! Driving runs of registered workflows by name, without their types: for command
//! lines, HTTP and MCP callers, evals.

use super::*;

impl Runtime {
    /// Creates a queued run of the registered workflow `workflow`, its input read
    /// from JSON, and returns its id: for command lines and HTTP callers. A worker
    /// (or [`Runtime::drive_by_name`]) drives it.
    pub async fn submit_by_name(&self, workflow: &str, input: Value) -> Result<RunId, RunError> {
        self.registered(workflow)?.submit_json(self, input).await
    }

    /// Claims and drives run `run_id` of a registered workflow to its next wait or
    /// end, as [`Runtime::resume`] does, without the workflow's type.
    ///
    /// A running run is taken only once its lease ran out (its driver died); one
    /// another driver holds is left to it ([`RunError::Store`] with
    /// [`StoreError::Leased`] or [`RunError::InvalidStatus`]).
    pub async fn drive_by_name(&self, run_id: RunId) -> Result<RunOutcome, RunError> {
        let record = self.inner.store().load_run(run_id).await?;
        let wf = self.registered(&record.workflow)?;
        wf.wake(self, run_id, registry::Wake::Recover, true).await
    }

    /// Starts run `run_id` of the registered workflow `workflow`, its input read
    /// from JSON, and drives it, as [`Runtime::start`] does without the workflow's
    /// type: for evals of agents known by name. A run of that id that exists is
    /// refused ([`StoreError::RunExists`]).
    pub async fn start_by_name(&self, workflow: &str, input: Value, run_id: RunId) -> Result<RunOutcome, RunError> {
        self.registered(workflow)?.start_json(self, input, run_id, crate::Labels::new()).await
    }

    /// Starts run `run_id` as [`Runtime::start_by_name`] does, with `labels`
    /// ([`RunRecord::labels`](crate::RunRecord::labels)): for protocols that keep a
    /// conversation's id with its runs, and for tenants.
    pub async fn start_labeled_by_name(
        &self,
        workflow: &str,
        input: Value,
        run_id: RunId,
        labels: crate::Labels,
    ) -> Result<RunOutcome, RunError> {
        self.registered(workflow)?.start_json(self, input, run_id, labels).await
    }

    /// Continues run `run_id` of a registered workflow from its last checkpoint,
    /// taking it over from any other driver, as [`Runtime::resume`] does without the
    /// workflow's type: for a run whose process was killed (its lease may not have
    /// run out yet). [`Runtime::drive_by_name`] leaves a live driver's run alone.
    pub async fn resume_by_name(&self, run_id: RunId) -> Result<RunOutcome, RunError> {
        let record = self.inner.store().load_run(run_id).await?;
        let wf = self.registered(&record.workflow)?;
        wf.wake(self, run_id, registry::Wake::Resume, true).await
    }

    /// Creates child run `child` of run `parent`, a run of the registered workflow
    /// `workflow` with its input read from JSON, queued, unless it exists; when it
    /// ends, the parent gets a [`ChildEnded`](crate::ChildEnded) signal named
    /// `signal`. For steps that start children they know only by name (a workflow
    /// tool); a transition that has the workflow uses
    /// [`RunContext::start_child`](crate::RunContext::start_child). Drive it with
    /// [`Runtime::drive_child`].
    pub async fn create_child(
        &self,
        parent: RunId,
        child: RunId,
        workflow: &str,
        input: Value,
        signal: &'static str,
    ) -> Result<(), RunError> {
        self.registered(workflow)?.create_child_json(self, child, parent, signal, input).await
    }

    /// Drives a queued or waiting child run of a registered workflow to its end or
    /// next wait, without waking its parent: for the parent's own step that waits
    /// for it. A run another driver holds is left to it ([`RunError::InvalidStatus`]).
    pub async fn drive_child(&self, child: RunId) -> Result<RunOutcome, RunError> {
        let record = self.inner.store().load_run(child).await?;
        self.registered(&record.workflow)?.wake(self, child, registry::Wake::IfIdle, false).await
    }

    /// Sends a signal by name, with a JSON payload, to a run of a registered
    /// workflow and drives it on, as [`Runtime::signal`] does without the
    /// workflow's type: for command lines and HTTP callers. The payload must fit the
    /// JSON Schema the wait transition publishes (compiled once per workflow), or it
    /// is refused with [`RunError::InvalidSignalPayload`] before anything is stored.
    pub async fn signal_by_name(&self, run_id: RunId, name: &str, payload: Value) -> Result<RunOutcome, RunError> {
        let record = self.inner.store().load_run(run_id).await?;
        self.registered(&record.workflow)?.signal_json(self, run_id, name.to_owned(), payload).await
    }

    /// Retries a failed, cancelled or stopped run of a registered workflow, as
    /// [`Runtime::retry`] does without the workflow's type.
    pub async fn retry_by_name(&self, run_id: RunId) -> Result<RunOutcome, RunError> {
        let record = self.inner.store().load_run(run_id).await?;
        self.registered(&record.workflow)?.retry(self, run_id).await
    }

    pub(crate) fn registered(&self, workflow: &str) -> Result<&Arc<dyn registry::Drivable>, RunError> {
        self.inner.workflow(workflow).ok_or_else(|| RunError::UnknownWorkflow {
            workflow: workflow.to_owned(),
            registered: self.inner.registry().names(),
        })
    }
}
