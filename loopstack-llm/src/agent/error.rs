//! Why a drive of an agent run failed.

use loopstack_core::{RunError, RunId};

use super::AgentStatus;
use crate::error::AgentError;

/// Why [`Agent::ask`](crate::Agent::ask) (and the other drives of an agent run) failed. The run's
/// documents keep the conversation up to the failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// A step of the run failed: the model's provider, a message document ...
    #[error("agent run {run_id} failed in `{transition}`: {source}")]
    Step {
        /// The run.
        run_id: RunId,
        /// The transition that failed.
        transition: &'static str,
        /// What went wrong.
        #[source]
        source: AgentError,
    },
    /// The runtime could not drive the run: its store, a cancellation, the step
    /// limit, a signal it refused ...
    #[error(transparent)]
    Run(RunError),
    /// The typed answer did not fit after the set retries.
    #[error("agent run {run_id}: the answer does not fit the type after {retries} retries: {error}")]
    InvalidAnswer {
        /// The run.
        run_id: RunId,
        /// Why the last answer did not fit.
        error: String,
        /// How many times it went back to the model.
        retries: u32,
    },
    /// A typed agent's run ended or waits without an answer (a limit, approval ...).
    #[error("agent run {run_id} has no answer: {status:?}")]
    NoAnswer {
        /// The run.
        run_id: RunId,
        /// How it ended or what it waits for.
        status: AgentStatus,
    },
}

impl AskError {
    /// The run that failed, when it was created.
    pub fn run_id(&self) -> Option<RunId> {
        match self {
            Self::Step { run_id, .. } | Self::InvalidAnswer { run_id, .. } | Self::NoAnswer { run_id, .. } => {
                Some(*run_id)
            }
            Self::Run(e) => e.run_id(),
        }
    }

    /// The step's error, when a step failed.
    pub fn agent_error(&self) -> Option<&AgentError> {
        match self {
            Self::Step { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<RunError> for AskError {
    fn from(err: RunError) -> Self {
        match err {
            RunError::Transition { run_id, transition, source, .. } if source.is::<AgentError>() => {
                let source = *source.downcast::<AgentError>().expect("checked with is");
                Self::Step { run_id, transition, source }
            }
            other => Self::Run(other),
        }
    }
}
