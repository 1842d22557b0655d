//! A fork's first step: its edits, or the migration of a checkpoint of an older
//! version, checked before anything is stored and written with the fork's copy.

use std::sync::Arc;

use serde_json::Value;

use super::Runtime;
use super::migrate::migrate;
use super::state::{checkpoint_state, state_error};
use crate::document::Document;
use crate::error::{RunError, StoreError};
use crate::store::RunRecord;
use crate::workflow::Workflow;

/// A fork's first step of its own, checked against the workflow before anything is
/// stored: its edits (transition [`FORK_TRANSITION`](crate::fork::FORK_TRANSITION),
/// with the edited state, the new versions of edited messages and the document that
/// records the edits), or, for a checkpoint of an older `version`, the migration to
/// the workflow's (the edits then apply to the migrated state, in the same step).
pub(super) async fn fork_first_step<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    source: &RunRecord,
    step: u64,
    version: u32,
    edits: Option<crate::ForkEdits>,
) -> Result<crate::store::ForkStep, RunError> {
    use crate::fork::ForkError;
    use crate::store::{ForkStep, Migrated, StepRecord};
    let def = wf.definition();
    let name = def.name();
    let store = runtime.inner.store();
    let checkpoint = match store.checkpoint(source.run_id, step).await {
        Ok(checkpoint) => checkpoint,
        Err(StoreError::CheckpointNotFound { .. }) => {
            return Err(ForkError::UnknownStep { run_id: source.run_id, step, last: source.step }.into());
        }
        Err(e) => return Err(e.into()),
    };
    let from = checkpoint.step.to.clone();
    let next = step + 1;
    let (base, to, migration) = if version == def.version() {
        let base: Value = serde_json::from_str(checkpoint.state.get()).map_err(state_error(name, source.run_id))?;
        (base, from.clone(), None)
    } else {
        let old = RunRecord { version, place: from.clone(), state: checkpoint.state, ..source.clone() };
        let (state, place) = migrate(wf, &old)?;
        let migrated = Migrated { version: def.version(), definition_hash: def.hash().to_owned().into() };
        if edits.is_none() {
            // Only the migration: the step a parked run of that version would take.
            let value = runtime.redact(checkpoint_state(&state, name, source.run_id, None)?);
            let transition = crate::store::migration_step_name(version, def.version());
            let step = StepRecord::at(next, transition, from, place, runtime.now());
            return Ok(ForkStep::new(step, value).migrate(migrated));
        }
        let base = serde_json::to_value(&state).map_err(state_error(name, source.run_id))?;
        (base, place.into(), Some((version, migrated)))
    };
    let edits = edits.unwrap_or_default();
    fork_edits(runtime, wf, source, step, (base, from, to), migration, edits).await
}

/// The edits step of [`fork_first_step`]: `base` is the state the edits apply to,
/// and the step goes from place `from` to `to`.
async fn fork_edits<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    source: &RunRecord,
    step: u64,
    (base, from, to): (Value, std::borrow::Cow<'static, str>, std::borrow::Cow<'static, str>),
    migration: Option<(u32, crate::store::Migrated)>,
    edits: crate::ForkEdits,
) -> Result<crate::store::ForkStep, RunError> {
    use crate::fork::{ForkError, ForkRecord};
    let name = wf.definition().name();
    let edited = crate::fork::edit_state(name, base, &edits)?;
    let bad = |e: serde_json::Error| ForkError::BadState { workflow: name, reason: e.to_string() };
    let state: W::State = serde_json::from_value(edited).map_err(bad)?;
    let value = checkpoint_state(&state, name, source.run_id, None)?;
    if (edits.system.is_some() || edits.model.is_some())
        && !crate::fork::kept_settings(&serde_json::from_str(value.get()).map_err(bad)?)
    {
        let edit = if edits.system.is_some() { "system prompt" } else { "model" };
        return Err(ForkError::Unsupported { workflow: name, edit }.into());
    }
    if let Some(settings) = crate::fork::settings_of(value.get()) {
        wf.check_fork(&settings)?;
    }
    let next = step + 1;
    // The documents the fork copies: the source's as of `step`.
    let copied = runtime.inner.store().documents_at(source.run_id, step).await?;
    let messages = crate::fork::edit_messages(&copied, source.run_id, step, &edits.messages, next)?;
    let mut changes = edits.changes();
    if let Some((version, migrated)) = &migration {
        changes.push(format!("migrated from version {version} to {}", migrated.version));
    }
    let record = ForkRecord { source: source.run_id, step, changes, edits };
    let doc = serde_json::value::to_raw_value(&record).map_err(state_error(name, source.run_id))?;
    let document = Document {
        seq: copied.len() as u64,
        doc_type: crate::fork::FORK_DOCUMENT.into(),
        key: None,
        version: 1,
        tags: Vec::new(),
        metadata: Default::default(),
        content: runtime.redact(doc),
        step: next,
    };
    let transition = crate::store::StepRecord::at(next, crate::fork::FORK_TRANSITION, from, to, runtime.now());
    let mut first = crate::store::ForkStep::new(transition, runtime.redact(value));
    for message in messages {
        first = first.document(Arc::new(message));
    }
    first = first.document(Arc::new(document));
    if let Some((_, migrated)) = migration {
        first = first.migrate(migrated);
    }
    Ok(first)
}
