//! A run's state as the store keeps it: the checked JSON of a checkpoint, and the
//! error of a state that does not serialize or read back. A leaf module: the driver,
//! the loop and the registry use it, and it uses none of them.

use serde_json::value::RawValue;

use crate::document::CheckedError;
use crate::error::RunError;
use crate::store::RunId;

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
