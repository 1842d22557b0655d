//! Cancelling runs: a run and its children, a child its parent's drive timed out,
//! and telling a parent that its child ended.

use super::*;

impl Runtime {
    /// Cancels a run that has not finished, wherever it is: a waiting run is
    /// cancelled at once, and a run another driver holds is taken over (that driver's
    /// next write is refused). The run keeps its last checkpoint.
    pub async fn cancel(&self, run_id: RunId, reason: impl Into<String>) -> Result<(), StoreError> {
        let parent = self.cancel_one(run_id, reason.into(), false).await?;
        // Its children go with it, and a parent learns that its child ended.
        cancel_children(self, run_id, "the parent run was cancelled").await;
        if let Some(parent) = parent {
            Box::pin(wake_parent(self, parent)).await;
        }
        Ok(())
    }

    /// Cancels child run `child` that its parent's drive drove past its `timeout`
    /// (the drive of it was dropped), and its children; the parent's inbox gets its
    /// end, marked as timed out, and the parent's drive reads it next.
    pub(super) async fn time_out_child(&self, child: RunId, timeout: Duration) {
        let reason = format!("the child run timed out after {timeout:?}: it did not end or wait in that time");
        match self.cancel_one(child, reason, true).await {
            Ok(_) => cancel_children(self, child, "the parent run was cancelled").await,
            // It ended just then: its end is in the parent's inbox.
            Err(StoreError::Finished { .. }) => {}
            Err(e) => tracing::warn!(child = %child, error = %e, "could not cancel a child run that timed out"),
        }
    }

    /// Cancels one run, telling its parent (that it timed out, if it did); returns
    /// the parent.
    pub(super) async fn cancel_one(
        &self,
        run_id: RunId,
        reason: String,
        timed_out: bool,
    ) -> Result<Option<RunId>, StoreError> {
        let reason = self.inner.redact_text(&reason).into_owned();
        let claimed = self
            .inner
            .store()
            .claim(run_id, &Claim::new([RunStatus::Queued, RunStatus::Running, RunStatus::Waiting]))
            .await?;
        let parent = crate::children::parent_of(&claimed);
        let notify = parent.as_ref().and_then(|p| {
            let mut ended =
                crate::ChildEnded::new(run_id, &*claimed.workflow, RunStatus::Cancelled, None, Some(reason.clone()));
            ended.timed_out = timed_out;
            crate::children::signal_parent(p, &ended)
        });
        self.inner
            .store()
            .set_status(run_id, claimed.fence(), RunStatus::Cancelled, Some(reason.clone()), notify)
            .await?;
        if self.inner.events().enabled() {
            self.inner.events().send(crate::RunEvent {
                run_id,
                workflow: claimed.workflow,
                at: self.now(),
                kind: crate::EventKind::Finished { status: RunStatus::Cancelled, error: Some(reason) },
            });
        }
        Ok(parent.map(|p| p.run_id))
    }
}

/// Wakes a parent whose child ended, if this runtime has its workflow and nobody
/// else drives it; a failure is logged, not returned: the child's drive is done.
pub(super) async fn wake_parent(runtime: &Runtime, parent: RunId) {
    let record = match runtime.inner.store().load_run(parent).await {
        Ok(record) => record,
        Err(e) => return tracing::warn!(parent = %parent, error = %e, "could not load the parent run"),
    };
    let Some(wf) = runtime.inner.workflow(&record.workflow) else {
        return tracing::debug!(parent = %parent, "the parent's workflow is not registered here; a worker wakes it");
    };
    match wf.wake(runtime, parent, registry::Wake::IfIdle, true).await {
        Ok(_) | Err(RunError::InvalidStatus { .. }) => {}
        Err(e) => {
            tracing::info!(parent = %parent, error = %runtime.inner.redact_text(&e.to_string()), "the woken parent's drive ended with an error")
        }
    }
}

/// Cancels the children of `run_id` that have not ended, and theirs, with `reason`.
pub(super) async fn cancel_children(runtime: &Runtime, run_id: RunId, reason: &str) {
    let mut stack = vec![run_id];
    while let Some(parent) = stack.pop() {
        // Every page of the children that have not ended.
        let mut query = crate::store::RunQuery::new()
            .parent(parent)
            .status(RunStatus::Queued)
            .status(RunStatus::Running)
            .status(RunStatus::Waiting)
            .limit(500);
        loop {
            let page = match runtime.inner.store().list_runs(&query).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(run_id = %parent, error = %e, "could not list the run's children");
                    break;
                }
            };
            for child in page.runs.iter().filter(|c| !c.status.is_finished()) {
                match runtime.cancel_one(child.run_id, reason.to_owned(), false).await {
                    Ok(_) | Err(StoreError::Finished { .. }) => stack.push(child.run_id),
                    Err(e) => tracing::warn!(child = %child.run_id, error = %e, "could not cancel a child run"),
                }
            }
            match page.next {
                Some(cursor) => query = query.before(cursor),
                None => break,
            }
        }
    }
}
