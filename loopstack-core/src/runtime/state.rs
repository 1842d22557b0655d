//! A run's state as the store keeps it: the checked JSON of a checkpoint, the
//! error of a state that does not serialize or read back, and what a new run
//! starts with. A leaf module: the driver, the loop and the registry use it, and it
//! uses none of them.

use std::sync::Arc;

use serde_json::value::RawValue;

use crate::context::{RunContext, SharedValues};
use crate::document::{CheckedError, Document};
use crate::error::RunError;
use crate::store::{NewRun, RunId};
use crate::workflow::Workflow;

/// What a new run starts with: its state as [`Workflow::init`] and
/// [`Workflow::on_create`] made it, and the documents `on_create` saved.
pub(crate) struct Created<S> {
    /// Boxed at once: the drive that goes on keeps it boxed, and a state held inline
    /// would be moved at its size (some 600 bytes for an agent) on the way there.
    pub(crate) state: Box<S>,
    /// The run to create: the state as checkpointed (redacted), the documents.
    pub(crate) new: NewRun,
    /// The typed values of the documents, for the drive that goes on at once.
    pub(crate) shared: SharedValues,
}

/// A new run `run_id` of `wf` on `input`, not yet stored: its state, checked and
/// redacted, and the documents [`Workflow::on_create`] saved.
pub(crate) fn create<W: Workflow>(
    runtime: &super::Runtime,
    wf: &W,
    input: W::Input,
    run_id: RunId,
) -> Result<Created<W::State>, RunError> {
    let def = wf.definition();
    let mut state = Box::new(wf.init(input));
    let mut cx = RunContext::creating(run_id, def.name(), runtime.clone());
    wf.on_create(&mut state, &mut cx).map_err(|source| RunError::Create { workflow: def.name(), run_id, source })?;
    let (documents, shared): (Vec<Arc<Document>>, _) = cx.into_created();
    let value = runtime.redact(checkpoint_state(&*state, def.name(), run_id, None)?);
    let new = NewRun::new(run_id, def.name(), def.hash(), value).version(def.version()).documents(documents);
    Ok(Created { state, new, shared })
}

/// The error of run `run_id`'s state that does not serialize or read back.
pub(super) fn state_error(workflow: &'static str, run_id: RunId) -> impl FnOnce(serde_json::Error) -> RunError {
    move |source| RunError::State { workflow, run_id, source }
}

/// Serializes a state to checkpoint, refusing one that would not read back
/// ([`RunError::UnstorableState`]); `after` is the transition that left it.
pub(super) fn checkpoint_state<S: serde::Serialize>(
    state: &S,
    workflow: &'static str,
    run_id: RunId,
    after: Option<&'static str>,
) -> Result<Box<RawValue>, RunError> {
    crate::document::to_checked_raw_value(state).map_err(|e| match e {
        CheckedError::Unreadable(why, _) => {
            RunError::UnstorableState { workflow, run_id, after, reason: why.to_string() }
        }
        CheckedError::Serialize(source) => RunError::State { workflow, run_id, source },
    })
}
