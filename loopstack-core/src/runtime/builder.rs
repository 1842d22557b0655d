//! [`Drive`]: the builder a drive's methods return, awaited to drive the run.

use super::*;

pub(crate) enum Mode<I> {
    /// A new run, with its labels.
    Start(I, crate::Labels),
    Resume(RunId),
    /// Like `Resume`, but only a queued or waiting run: a child its parent drives,
    /// a parent its child wakes.
    Wake(RunId),
    /// Like `Resume`, but a running run only once its lease ran out: a resume asked
    /// for from outside (a command line, an HTTP call), never a takeover.
    Recover(RunId),
    Retry(RunId),
    Fork(RunId, u64, Option<Box<crate::ForkEdits>>),
    Claimed(Box<crate::RunRecord>),
    Signal(RunId, Result<(std::borrow::Cow<'static, str>, Value), serde_json::Error>),
}

/// A run to drive; await it. Set options with its methods first.
#[must_use = "a run does nothing until awaited"]
pub struct Drive<'a, W: Workflow> {
    pub(super) runtime: &'a Runtime,
    pub(super) workflow: &'a W,
    pub(super) mode: Mode<W::Input>,
    pub(super) run_id: Option<RunId>,
    pub(super) max_steps: u64,
    pub(super) cancellation: Option<CancellationToken>,
    /// When cancelled, the drive stops between two steps ([`Drive::stop_on`]).
    pub(super) stop: Option<CancellationToken>,
    /// Whether a child that ends in this drive wakes its parent (not when its
    /// parent's own drive drives it).
    pub(crate) cascade: bool,
}

impl<'a, W: Workflow> Drive<'a, W> {
    pub(crate) fn new(runtime: &'a Runtime, workflow: &'a W, mode: Mode<W::Input>) -> Self {
        Self {
            runtime,
            workflow,
            mode,
            run_id: None,
            max_steps: runtime.inner.max_steps(),
            cancellation: None,
            stop: None,
            cascade: true,
        }
    }

    /// Sets the step limit for this drive.
    pub fn max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Gives a new run (started or forked) this id; ignored otherwise.
    pub fn run_id(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// Labels a new run (started by [`Runtime::start`]) with `name` = `value`
    /// ([`RunRecord::labels`](crate::RunRecord::labels)); ignored otherwise.
    pub fn label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Mode::Start(_, labels) = &mut self.mode {
            labels.insert(name.into(), value.into());
        }
        self
    }

    /// Cancels the run when `token` is cancelled: it stops at its next await, the
    /// transition in flight is dropped with everything it started, and the run is
    /// recorded as cancelled at its last checkpoint.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Stops the drive between two steps once `token` is cancelled, for a process
    /// that shuts down: the step in flight finishes and commits, no next step
    /// starts, the run stays `running` with its lease given back
    /// ([`Store::release_lease`](crate::Store::release_lease)), and the drive ends
    /// with [`RunOutcome::Released`](crate::RunOutcome::Released). The next worker
    /// that looks for work continues the run. A [`Worker`](crate::Worker) stops its
    /// drives this way when it shuts down.
    pub fn stop_on(mut self, token: CancellationToken) -> Self {
        self.stop = Some(token);
        self
    }
}

impl<'a, W: Workflow> IntoFuture for Drive<'a, W> {
    type Output = Result<RunReport<W::State>, RunError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(driver::drive(self))
    }
}
