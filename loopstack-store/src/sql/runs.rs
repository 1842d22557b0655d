//! Creating and claiming runs, the fenced writes of a drive (`commit`,
//! `set_status`, `park`, `heartbeat`) and forks.

use std::sync::Arc;

use loopstack_core::serde_json;
use loopstack_core::store::{OutSignal, check_claim, check_fence};
use loopstack_core::{
    Checkpoint, Claim, Fence, ForkStep, Lease, NewRun, Park, RunId, RunRecord, RunStatus, StepRecord, StoreError,
    Timestamp, WorkflowVersions,
};
use sqlx::{Row as _, Transaction};

use super::queries::{
    CLAIM, COMMIT_CHECKPOINT, COMMIT_RUN, DELIVER_SIGNAL, FORK_CHECKPOINTS, FORK_DOCUMENTS, FORK_RUN, HEARTBEAT,
    INSERT_CHECKPOINT, INSERT_DOCUMENT, INSERT_RUN, INSERT_SIGNAL, MIGRATE_RUN, NEXT_SIGNAL, PARK, REJECT_PENDING,
    RELEASE_LEASE, SET_STATUS,
};
use super::{Dialect, LastState, SqlStore, StepState, backend, corrupt, status_set, to_i64};

/// The reason a finished run's pending signals are rejected with.
const ENDED: &str = loopstack_core::store::SIGNAL_OUTLIVED_RUN;

impl<D> SqlStore<D>
where
    D: Dialect,
    for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
    D::Arguments: sqlx::IntoArguments<D>,
    for<'s> &'s str: sqlx::ColumnIndex<D::Row> + sqlx::Encode<'s, D> + sqlx::Type<D>,
    for<'r> i64: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> bool: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> String: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> uuid::Uuid: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> Option<i64>: sqlx::Encode<'r, D>,
    for<'r> Option<String>: sqlx::Encode<'r, D>,
    for<'r> Option<uuid::Uuid>: sqlx::Encode<'r, D>,
    for<'s> Option<&'s str>: sqlx::Encode<'s, D>,
{
    /// Puts a write's [`OutSignal`] in its target's inbox within `tx`, as
    /// `send_signal` does; a finished or missing target drops it.
    async fn notify(tx: &mut Transaction<'static, D>, signal: Option<&OutSignal>) -> Result<(), StoreError> {
        let Some(signal) = signal else { return Ok(()) };
        let row = sqlx::query(NEXT_SIGNAL).bind(signal.run_id.0).fetch_optional(&mut **tx).await.map_err(backend)?;
        let Some(row) = row else { return Ok(()) };
        let id: i64 = row.try_get("signal_seq").map_err(corrupt)?;
        let run: i64 = row.try_get("id").map_err(corrupt)?;
        sqlx::query(INSERT_SIGNAL)
            .bind(run)
            .bind(id)
            .bind(&*signal.name)
            .bind(signal.payload.get())
            .bind(Timestamp::now().as_millis())
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Creates a run, its step-0 checkpoint and the documents it starts with,
    /// within `tx`; `false` (writing nothing) if the run exists.
    pub(crate) async fn insert_run(
        tx: &mut Transaction<'static, D>,
        run: &NewRun,
        epoch: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(INSERT_RUN)
            .bind(run.run_id.0)
            .bind(&*run.workflow)
            .bind(run.status.as_str())
            .bind(&*run.definition_hash)
            .bind(run.parent.map(|p| p.0))
            .bind(epoch)
            .bind(run.lease.as_ref().map(|l| l.owner.clone()))
            .bind(run.lease.as_ref().map(|l| l.until.as_millis()))
            .bind(now)
            .bind(run.parent_signal.as_deref())
            .bind(i64::from(run.version))
            .bind(run.trace_parent.as_deref())
            .bind(super::labels_column(&run.labels)?)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        if D::rows_affected(&done) == 0 {
            return Ok(false);
        }
        sqlx::query(INSERT_CHECKPOINT)
            .bind(run.run_id.0)
            .bind(0_i64)
            .bind("")
            .bind(loopstack_core::START)
            .bind(run.state.get())
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Self::insert_documents(tx, run.run_id, &run.documents).await?;
        Ok(true)
    }

    /// Creates a run, its step-0 checkpoint and its documents in a transaction;
    /// `false` if the run exists.
    async fn create_in_transaction(&self, run: &NewRun, epoch: i64, now: i64) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        if !Self::insert_run(&mut tx, run, epoch, now).await? {
            return Ok(false);
        }
        tx.commit().await.map_err(backend)?;
        Ok(true)
    }

    /// A run this store just claimed, with its state.
    async fn read_claimed(&self, row: &D::Row) -> Result<RunRecord, StoreError> {
        self.with_state(Self::summary_from_row(row)?).await
    }

    /// Fails a run this store just claimed (`row`, as the claim returned it) but
    /// cannot read (`why`: its row or its state is not what a store writes): failed
    /// with the reason, its lease dropped and its pending signals rejected, and its
    /// parent told as a failed child tells it. So it neither stops the claim of the
    /// runs after it nor stays running under a lease nobody renews; `retry` takes it
    /// up once it reads again.
    async fn fail_unreadable(&self, row: &D::Row, why: &StoreError) {
        let run_id = match row.try_get::<uuid::Uuid, _>("run_id") {
            Ok(id) => RunId(id),
            Err(e) => return tracing::warn!(error = %e, %why, "a claimed run has no readable id"),
        };
        let fence = match (row.try_get::<i64, _>("epoch"), row.try_get::<i64, _>("step")) {
            (Ok(epoch), Ok(step)) => Fence { epoch: epoch as u64, step: step as u64 },
            _ => return tracing::warn!(run_id = %run_id, %why, "a claimed run has no readable fence"),
        };
        let error = format!("the run cannot be read: {why}");
        tracing::warn!(run_id = %run_id, %error, "failing a run that cannot be read");
        let parent = row.try_get::<Option<uuid::Uuid>, _>("parent").ok().flatten().map(RunId);
        let signal = row.try_get::<Option<String>, _>("parent_signal").ok().flatten();
        let workflow = row.try_get::<String, _>("workflow").unwrap_or_default();
        let notify = match (parent, signal) {
            (Some(parent), Some(signal)) => {
                let ended =
                    loopstack_core::ChildEnded::new(run_id, workflow, RunStatus::Failed, None, Some(error.clone()));
                serde_json::value::to_raw_value(&ended).ok().map(|payload| OutSignal::new(parent, signal, payload))
            }
            _ => None,
        };
        if let Err(e) = self.set_status(run_id, fence, RunStatus::Failed, Some(error), notify).await {
            tracing::warn!(run_id = %run_id, error = %e, "could not fail a run that cannot be read");
        }
    }

    /// Why a fenced write matched no row.
    pub(super) async fn fence_error(&self, run_id: RunId, fence: Fence) -> StoreError {
        match self.load(run_id).await {
            Ok(r) => match check_fence(run_id, r.status, r.epoch, r.step, fence) {
                Err(e) => e,
                Ok(()) => StoreError::SignalArrived { run_id },
            },
            Err(e) => e,
        }
    }

    pub(crate) async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        let now = Timestamp::now().as_millis();
        let epoch: i64 = i64::from(run.status != RunStatus::Queued);
        let created = match D::one_statement_create(self, &run, epoch, now).await {
            Some(created) => created?,
            None => self.create_in_transaction(&run, epoch, now).await?,
        };
        if !created {
            return Err(StoreError::RunExists(run.run_id));
        }
        let at = Timestamp::from_millis(now);

        let base = LastState { epoch: epoch as u64, step: 0, state: Arc::from(run.state.get()), chain: 0 };
        self.last.set(run.run_id, Some(base));
        Ok(run.into_record(epoch as u64, at))
    }

    pub(crate) async fn claim(&self, run_id: RunId, claim: &Claim) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(CLAIM)
            .bind(run_id.0)
            .bind(claim.lease.as_ref().map(|l| l.owner.clone()))
            .bind(claim.lease.as_ref().map(|l| l.until.as_millis()))
            .bind(Timestamp::now().as_millis())
            .bind(status_set(&claim.expect))
            .bind(claim.lease_expired_at.map(Timestamp::as_millis))
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        match row {
            Some(row) => match self.read_claimed(&row).await {
                Ok(run) => Ok(run),
                // Claimed but unreadable: failed, not left running with nobody
                // driving it.
                Err(e @ StoreError::Corrupt(_)) => {
                    self.fail_unreadable(&row, &e).await;
                    Err(e)
                }
                Err(e) => Err(e),
            },
            None => {
                let current = self.load(run_id).await?;
                check_claim(&current, claim)?;
                // It changed between the two statements: report it as taken.
                Err(StoreError::InvalidStatus { run_id, status: current.status })
            }
        }
    }

    pub(crate) async fn commit(&self, cp: Checkpoint) -> Result<(), StoreError> {
        let step = cp.transition.step;
        // The state as a patch of the one this drive committed last, when that is
        // known here and the patch is smaller; else in full (or neither, in SQL,
        // when it did not change).
        let last = self.last.get(cp.run_id, cp.fence.epoch, cp.fence.step);
        let next = cp.state.get();
        let plan = super::plan_state(last.as_ref(), next);
        let (unchanged, patch, chain) = (plan.unchanged, plan.patch.as_deref(), plan.chain);
        let committed = |this: &Self| {
            let last = (!cp.status.is_finished()).then(|| LastState {
                epoch: cp.fence.epoch,
                step,
                state: Arc::from(next),
                chain,
            });
            this.last.set(cp.run_id, last);
        };
        // Where the dialect can, the whole commit is one statement (one round trip,
        // atomic on its own); a commit that delivers a signal, which must be refused
        // if the signal is gone, or sends one (`notify`, once per child run), takes
        // the transaction below.
        if cp.signal.is_none()
            && cp.notify.is_none()
            && cp.migration.is_none()
            && let Some(done) = D::one_statement_commit(self, &cp, unchanged, patch).await
        {
            if !done? {
                return Err(self.fence_error(cp.run_id, cp.fence).await);
            }
            committed(self);
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let state = plan.state(next);
        if !Self::write_step(&mut tx, cp.run_id, cp.fence, &cp.transition, cp.status, state, cp.lease_until).await? {
            drop(tx);
            return Err(self.fence_error(cp.run_id, cp.fence).await);
        }
        if let Some(migrated) = &cp.migration {
            sqlx::query(MIGRATE_RUN)
                .bind(cp.run_id.0)
                .bind(to_i64(cp.fence.epoch))
                .bind(i64::from(migrated.version))
                .bind(&*migrated.definition_hash)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        Self::insert_documents(&mut tx, cp.run_id, &cp.documents).await?;
        if let Some(id) = cp.signal {
            let done = sqlx::query(DELIVER_SIGNAL)
                .bind(cp.run_id.0)
                .bind(to_i64(id))
                .bind(to_i64(step))
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            if D::rows_affected(&done) == 0 {
                return Err(StoreError::SignalNotFound { run_id: cp.run_id, signal: id });
            }
        }
        if cp.status.is_finished() {
            sqlx::query(REJECT_PENDING).bind(cp.run_id.0).bind(ENDED).execute(&mut *tx).await.map_err(backend)?;
        }
        // Last, after the run row: a run that notifies itself as it finishes drops
        // the signal, as a finished target does.
        Self::notify(&mut tx, cp.notify.as_ref()).await?;
        tx.commit().await.map_err(backend)?;
        committed(self);
        Ok(())
    }

    /// Writes step `t` of run `run_id` within `tx`, behind `fence`: its checkpoint
    /// and the run row's step, place, status and lease. `false` (with part of it
    /// written: roll `tx` back) when the fence does not hold.
    async fn write_step(
        tx: &mut Transaction<'static, D>,
        run_id: RunId,
        fence: Fence,
        t: &StepRecord,
        status: RunStatus,
        state: StepState<'_>,
        lease_until: Option<Timestamp>,
    ) -> Result<bool, StoreError> {
        // The checkpoint first, selected from the fenced run row: a write, so it takes
        // SQLite's write lock before anything is read.
        let done = sqlx::query(COMMIT_CHECKPOINT)
            .bind(run_id.0)
            .bind(to_i64(fence.epoch))
            .bind(to_i64(fence.step))
            .bind(to_i64(t.step))
            .bind(&*t.transition)
            .bind(&*t.to)
            .bind(state.state)
            .bind(t.at.as_millis())
            .bind(state.unchanged)
            .bind(state.patch)
            .execute(&mut **tx)
            .await;
        let fenced = match done {
            Ok(done) => D::rows_affected(&done) == 0,
            // Two writers of one epoch and step: the second loses.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => true,
            Err(e) => return Err(backend(e)),
        };
        if fenced {
            return Ok(false);
        }
        // The same fence again: in PostgreSQL another transaction may have moved the
        // row since the select above; this update waits for it and re-checks.
        let done = sqlx::query(COMMIT_RUN)
            .bind(run_id.0)
            .bind(to_i64(fence.epoch))
            .bind(to_i64(fence.step))
            .bind(to_i64(t.step))
            .bind(&*t.to)
            .bind(status.as_str())
            .bind(t.at.as_millis())
            .bind(lease_until.map(Timestamp::as_millis))
            .execute(&mut **tx)
            .await
            .map_err(backend)?;
        Ok(D::rows_affected(&done) != 0)
    }

    /// Inserts the documents a step wrote, for run `run_id`, within `tx`.
    async fn insert_documents(
        tx: &mut Transaction<'static, D>,
        run_id: RunId,
        documents: &[Arc<loopstack_core::Document>],
    ) -> Result<(), StoreError> {
        for doc in documents {
            sqlx::query(INSERT_DOCUMENT)
                .bind(run_id.0)
                .bind(to_i64(doc.seq))
                .bind(i64::from(doc.version))
                .bind(&*doc.doc_type)
                .bind(doc.key.as_deref())
                .bind(serde_json::to_string(&doc.tags).map_err(corrupt)?)
                .bind(doc.metadata.as_str())
                .bind(doc.content.get())
                .bind(to_i64(doc.step))
                .execute(&mut **tx)
                .await
                .map_err(backend)?;
        }
        Ok(())
    }

    pub(crate) async fn set_status(
        &self,
        run_id: RunId,
        fence: Fence,
        status: RunStatus,
        error: Option<String>,
        notify: Option<OutSignal>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let done = sqlx::query(SET_STATUS)
            .bind(run_id.0)
            .bind(to_i64(fence.epoch))
            .bind(to_i64(fence.step))
            .bind(status.as_str())
            .bind(error)
            .bind(Timestamp::now().as_millis())
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        if D::rows_affected(&done) == 0 {
            drop(tx);
            return Err(self.fence_error(run_id, fence).await);
        }
        if status.is_finished() {
            sqlx::query(REJECT_PENDING).bind(run_id.0).bind(ENDED).execute(&mut *tx).await.map_err(backend)?;
        }
        Self::notify(&mut tx, notify.as_ref()).await?;
        tx.commit().await.map_err(backend)
    }

    pub(crate) async fn park(&self, run_id: RunId, park: &Park<'_>) -> Result<(), StoreError> {
        let done = sqlx::query(PARK)
            .bind(run_id.0)
            .bind(to_i64(park.fence.epoch))
            .bind(to_i64(park.fence.step))
            .bind(to_i64(park.inbox_seq))
            .bind(serde_json::to_string(park.signals).map_err(corrupt)?)
            .bind(Timestamp::now().as_millis())
            .bind(park.wake_at.map(Timestamp::as_millis))
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        if D::rows_affected(&done) == 0 {
            // Not fenced and not finished: the signal count moved.
            return Err(self.fence_error(run_id, park.fence).await);
        }
        Ok(())
    }

    pub(crate) async fn claim_runnable(
        &self,
        workflows: &[WorkflowVersions<'_>],
        lease: &Lease,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let names: Vec<&str> = workflows.iter().map(|w| w.workflow).collect();
        let names = serde_json::to_string(&names).map_err(corrupt)?;
        let keys = serde_json::to_string(&WorkflowVersions::keys(workflows)).map_err(corrupt)?;
        let rows = sqlx::query(D::CLAIM_RUNNABLE)
            .bind(&lease.owner)
            .bind(lease.until.as_millis())
            .bind(now.as_millis())
            .bind(names)
            .bind(i64::from(limit))
            .bind(keys)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let mut reads = super::rows::ClaimedReads::with_capacity(rows.len());
        for row in &rows {
            if let Some(unreadable) = reads.push(self.read_claimed(row).await) {
                self.fail_unreadable(row, &unreadable).await;
            }
        }
        reads.finish()
    }

    pub(crate) async fn release_lease(&self, run_id: RunId, epoch: u64) -> Result<(), StoreError> {
        sqlx::query(RELEASE_LEASE).bind(run_id.0).bind(to_i64(epoch)).execute(&self.pool).await.map_err(backend)?;
        Ok(())
    }

    pub(crate) async fn heartbeat(&self, run_id: RunId, epoch: u64, until: Timestamp) -> Result<(), StoreError> {
        let done = sqlx::query(HEARTBEAT)
            .bind(run_id.0)
            .bind(to_i64(epoch))
            .bind(until.as_millis())
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        if D::rows_affected(&done) == 0 {
            let current = self.load(run_id).await?;
            return Err(StoreError::Fenced { run_id, epoch, current: current.epoch });
        }
        Ok(())
    }

    pub(crate) async fn fork(
        &self,
        source: RunId,
        step: u64,
        new_run: RunId,
        first: Option<ForkStep>,
    ) -> Result<RunRecord, StoreError> {
        self.exists(source).await?;
        if self.exists(new_run).await.is_ok() {
            return Err(StoreError::RunExists(new_run));
        }
        let checkpoint = self.checkpoint(source, step).await?;
        let mut tx = self.pool.begin().await.map_err(backend)?;
        sqlx::query(FORK_RUN)
            .bind(source.0)
            .bind(new_run.0)
            .bind(&*checkpoint.step.to)
            .bind(to_i64(step))
            .bind(Timestamp::now().as_millis())
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        for sql in [FORK_CHECKPOINTS, FORK_DOCUMENTS] {
            sqlx::query(sql)
                .bind(source.0)
                .bind(new_run.0)
                .bind(to_i64(step))
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        // The first step of its own as a commit of the new run writes it, in the copy's
        // transaction: the fork is stored with it or not at all.
        if let Some(first) = &first {
            let fence = Fence { epoch: 1, step };
            let state = StepState { state: first.state.get(), unchanged: false, patch: None };
            if !Self::write_step(&mut tx, new_run, fence, &first.transition, RunStatus::Running, state, None).await? {
                return Err(corrupt(format!("fork {new_run} changed while it was written")));
            }
            if let Some(migrated) = &first.migration {
                sqlx::query(MIGRATE_RUN)
                    .bind(new_run.0)
                    .bind(to_i64(fence.epoch))
                    .bind(i64::from(migrated.version))
                    .bind(&*migrated.definition_hash)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
            }
            Self::insert_documents(&mut tx, new_run, &first.documents).await?;
        }
        tx.commit().await.map_err(backend)?;
        if let Some(first) = first {
            let state = Arc::from(first.state.get());
            self.last.set(new_run, Some(LastState { epoch: 1, step: first.transition.step, state, chain: 0 }));
        }
        self.load(new_run).await
    }
}
