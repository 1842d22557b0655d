//! Signals as the store keeps them.

use super::*;

/// Where a signal in a run's inbox stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
#[non_exhaustive]
pub enum SignalStatus {
    /// Received, not yet acted on.
    Pending,
    /// Fired its wait transition, committed as `step`.
    Delivered {
        /// The step that delivered it.
        step: u64,
    },
    /// Refused, with the reason; the run went on as if it had not arrived.
    Rejected {
        /// Why.
        reason: String,
    },
}

/// A signal in a run's inbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignalRecord {
    /// Its number in the run's inbox, from 1, in order of arrival.
    pub id: u64,
    /// The wait transition it names.
    pub name: String,
    /// Its payload, as JSON.
    pub payload: Box<RawValue>,
    /// Where it stands.
    pub status: SignalStatus,
    /// When it arrived.
    pub received_at: Timestamp,
}

/// A run's pending signals and its signal count when they were read, for
/// [`Store::park`].
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    /// The pending signals, oldest first.
    pub pending: Vec<SignalRecord>,
    /// The run's [`signal_seq`](RunRecord::signal_seq) at the read.
    pub seq: u64,
}

/// What [`Store::send_signal`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalReceipt {
    /// The signal's id in the run's inbox.
    pub id: u64,
    /// The run's status when the signal was stored.
    pub status: RunStatus,
}
