//! Checking a stored run against this build (its workflow, version, place and
//! state) and migrating a run of an older version, as a step of its own.

use super::Runtime;
use super::prepare::ClaimedRun;
use super::shared::LeaseCfg;
use super::state::{checkpoint_state, state_error};
use crate::error::RunError;
use crate::store::{RunRecord, RunStatus};
use crate::workflow::Workflow;

/// A stored run as this build reads it: its place and state in this build's table,
/// and, for a run of an older version, the version it was migrated from.
pub(super) struct Checked<S> {
    pub(super) place: &'static str,
    pub(super) state: S,
    pub(super) migrated_from: Option<u32>,
}

/// Checks that a stored run can be driven by `wf`: its workflow, its version (a run
/// of a version this build migrates from is migrated, in memory), its place
/// (naming both table hashes when the place is gone) and its state.
pub(super) fn check_run<W: Workflow>(wf: &W, record: &RunRecord) -> Result<Checked<W::State>, RunError> {
    let def = wf.definition();
    let (name, run_id) = (def.name(), record.run_id);
    if record.workflow != name {
        return Err(RunError::Mismatch {
            workflow: name,
            run_id,
            reason: format!("the run belongs to workflow `{}`", record.workflow),
        });
    }
    if record.version != def.version() {
        if !def.migrates_from().contains(&record.version) {
            return Err(RunError::UnsupportedVersion {
                workflow: name,
                run_id,
                version: record.version,
                current: def.version(),
                migrates_from: def.migrates_from(),
            });
        }
        let (state, place) = migrate(wf, record)?;
        return Ok(Checked { place, state, migrated_from: Some(record.version) });
    }
    let place = def.place(&record.place).map_err(|e| {
        if record.definition_hash == def.hash() {
            RunError::Mismatch { workflow: name, run_id, reason: e.to_string() }
        } else {
            RunError::DefinitionChanged {
                workflow: name,
                run_id,
                place: record.place.to_string(),
                stored_hash: record.definition_hash.to_string(),
                current_hash: def.hash().to_owned(),
            }
        }
    })?;
    let state = serde_json::from_str(record.state.get()).map_err(state_error(name, run_id))?;
    Ok(Checked { place, state, migrated_from: None })
}

/// Runs `wf`'s migration of a run of an older version: its error, its panic, or a
/// state it makes that cannot be stored becomes [`RunError::Migration`] naming both
/// versions, and the stored run is left as it was.
pub(super) fn migrate<W: Workflow>(wf: &W, record: &RunRecord) -> Result<(W::State, &'static str), RunError> {
    let def = wf.definition();
    let failed = |reason: String| RunError::Migration {
        workflow: def.name(),
        run_id: record.run_id,
        from: record.version,
        to: def.version(),
        reason,
    };
    let migrated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wf.migrate(record.version, &record.place, record.state.get())
    }));
    match migrated {
        Ok(Ok((state, place))) => {
            // A hand-written migration may name any place: only the table's are driven.
            let place = def.place(place).map_err(|e| failed(e.to_string()))?;
            // Checked before any claim: a state the migration's commit would refuse
            // would otherwise leave the run claimed, its signal in its inbox, for
            // every worker to claim again at each lease.
            checkpoint_state(&state, def.name(), record.run_id, None).map_err(|e| match e {
                RunError::UnstorableState { reason, .. } => {
                    failed(format!("the migrated state cannot be stored: {reason}"))
                }
                other => failed(other.to_string()),
            })?;
            Ok((state, place))
        }
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(panic) => Err(failed(format!("the migration panicked: {}", super::panic_message(&*panic)))),
    }
}

/// [`commit_migration`] for a run that needs one. Boxed: its commit's locals would
/// otherwise sit in every drive's future, in every run in flight, for the rare run
/// that migrates.
pub(super) async fn migrate_if_needed<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    run: &mut ClaimedRun,
    record: &RunRecord,
    checked: &Checked<W::State>,
    lease: Option<&LeaseCfg>,
) -> Result<(), RunError> {
    if checked.migrated_from.is_none() {
        return Ok(());
    }
    Box::pin(commit_migration(runtime, wf, run, record, checked, lease)).await
}

/// Commits the migration of a claimed run as a step of its own: the migrated state at
/// its new place, with the run row's version and table hash, fenced by the claim.
pub(super) async fn commit_migration<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    run: &mut ClaimedRun,
    record: &RunRecord,
    checked: &Checked<W::State>,
    lease: Option<&LeaseCfg>,
) -> Result<(), RunError> {
    let Some(from) = checked.migrated_from else { return Ok(()) };
    let def = wf.definition();
    let value = runtime.redact(checkpoint_state(&checked.state, def.name(), run.run_id, None)?);
    let at = runtime.inner.clock().now();
    let step = run.step + 1;
    let transition = crate::store::migration_step_name(from, def.version());
    let from_place = record.place.clone();
    let record = crate::store::StepRecord::at(step, transition.clone(), from_place.clone(), checked.place, at);
    let fence = crate::store::Fence { epoch: run.epoch, step: run.step };
    let mut checkpoint = crate::store::Checkpoint::new(run.run_id, fence, record, RunStatus::Running, value)
        .migrate(crate::store::Migrated { version: def.version(), definition_hash: def.hash().to_owned().into() });
    checkpoint.lease_until = lease.map(|l| at + l.duration);
    runtime.inner.store().commit(checkpoint).await?;
    tracing::info!(run_id = %run.run_id, from, to = def.version(), place = checked.place, "run migrated");
    // Watchers see the migration as the step it is, as they see a transition's.
    runtime.inner.events().emit(run.run_id, def.name(), || crate::EventKind::TransitionCommitted {
        transition: transition.into(),
        from: from_place,
        to: checked.place.into(),
        step,
    });
    run.step = step;
    run.place_since = at;
    Ok(())
}
