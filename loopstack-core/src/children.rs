//! Child runs: runs a transition starts, which tell their parent when they end.
//!
//! A transition starts a child with [`RunContext::start_child`]: the child is a
//! run of another workflow in the same store, recorded with its parent and the
//! name of the parent's wait transition that takes its end. When the child ends
//! (completed, failed, cancelled or stopped) the store puts a [`ChildEnded`] signal of that
//! name in the parent's inbox, in the same write as the child's last one, so a
//! crash can never lose it. The parent waits durably, holding no task: it parks at
//! a place whose wait transition takes `ChildEnded`, and goes on when the children
//! it waits for have ended.
//!
//! Children of workflows registered with [`Runtime::register`] are driven by the
//! drive of the parent that started them, when the parent next waits or ends (up to
//! [`Runtime::child_concurrency`] at once, the parent's lease renewed meanwhile);
//! children of other workflows wait, queued, for a [`Worker`](crate::Worker) that
//! has them. When the parent's process dies first, the drive that resumes the
//! parent ([`Runtime::resume`]) drives the children it left: those still queued,
//! and those left running once their lease ran out.
//!
//! A child is created when [`RunContext::start_child`] is called, not when the
//! transition commits: a transition that fails after starting children fails its
//! run, which cancels them; a wait transition that refuses its signal leaves the
//! children it started to run, and their ends reach the parent's inbox like any
//! signal (a parent that does not expect one ignores it, as the agent does). A child that waits
//! (for a person's signal, a timer) keeps its parent waiting, across restarts: when
//! it ends later, its parent gets the signal, and a runtime or worker that has the
//! parent's workflow drives it on.
//!
//! [`RunContext::start_child`]: crate::RunContext::start_child
//! [`Runtime::child_concurrency`]: crate::Runtime::child_concurrency

use std::borrow::Cow;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::context::RunContext;
use crate::error::RunError;
use crate::runtime::registry::Wake;
use crate::store::{RunId, RunRecord, RunStatus};
use crate::workflow::Workflow;
use crate::{Runtime, StoreError};

/// The payload of the signal a child run sends its parent when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChildEnded {
    /// The child run.
    pub child: RunId,
    /// Its workflow.
    pub workflow: String,
    /// How it ended: completed, failed, cancelled or stopped.
    pub status: RunStatus,
    /// Its final state, when it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed, was cancelled or stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether it was cancelled because its parent's drive drove it longer than its
    /// [`ChildOptions::timeout`] (its `status` is then `cancelled`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

impl ChildEnded {
    /// The end of child run `child` of `workflow`.
    pub fn new(
        child: RunId,
        workflow: impl Into<String>,
        status: RunStatus,
        output: Option<Value>,
        error: Option<String>,
    ) -> Self {
        Self { child, workflow: workflow.into(), status, output, error, timed_out: false }
    }

    /// Whether the child completed.
    pub fn completed(&self) -> bool {
        self.status == RunStatus::Completed
    }

    /// The child's output as `T`: its final state, deserialized.
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(self.output.as_ref().unwrap_or(&Value::Null))
    }
}

impl JsonSchema for ChildEnded {
    fn schema_name() -> Cow<'static, str> {
        "ChildEnded".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "properties": {
                "child": {"type": "string", "format": "uuid"},
                "workflow": {"type": "string"},
                "status": {"type": "string", "enum": ["completed", "failed", "cancelled", "stopped"]},
                "output": {},
                "error": {"type": "string"},
                "timed_out": {"type": "boolean"},
            },
            "required": ["child", "workflow", "status"],
        })
    }
}

impl RunContext {
    /// Starts a child run of `workflow` with `input`, and returns its id. When it
    /// ends, the store puts a [`ChildEnded`] signal named `signal` in this run's
    /// inbox: name a wait transition of this workflow that takes `ChildEnded` and
    /// routes on once the children it waits for have ended. See the [module
    /// documentation](self).
    ///
    /// The child is created at once, queued, with an id made from this run, the
    /// step this transition commits as and the number of children it started
    /// before: when a crash makes the transition run again, the same child is found
    /// and nothing is started twice. If `workflow` is registered with the runtime
    /// ([`Runtime::register`]) this drive drives the child when the run next waits
    /// or ends; else a [`Worker`](crate::Worker) that has it does.
    ///
    /// The parent's drive drives the child for at most [`DEFAULT_CHILD_TIMEOUT`]
    /// before it ends or first waits; [`RunContext::start_child_with`] sets another
    /// bound.
    ///
    /// Errors when the input's state would not read back, or the store fails.
    pub async fn start_child<W: Workflow>(
        &mut self,
        workflow: &W,
        input: W::Input,
        signal: &'static str,
    ) -> Result<RunId, ChildError> {
        self.start_child_with(workflow, input, signal, ChildOptions::default()).await
    }

    /// Starts a child run as [`RunContext::start_child`] does, with `options`:
    ///
    /// ```
    /// # use loopstack_core::*;
    /// # async fn demo<W: Workflow>(cx: &mut RunContext, review: &W, input: W::Input) -> Result<(), ChildError> {
    /// let options = ChildOptions::new().timeout(std::time::Duration::from_secs(120));
    /// let child = cx.start_child_with(review, input, "reviewed", options).await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_child_with<W: Workflow>(
        &mut self,
        workflow: &W,
        input: W::Input,
        signal: &'static str,
        options: ChildOptions,
    ) -> Result<RunId, ChildError> {
        let def = workflow.definition();
        let child = child_run_id(self.run_id(), self.step() + 1, self.children_started());
        let runtime: &Runtime = self.runtime();
        match runtime.store().load_run(child).await {
            Ok(_) => {}
            Err(StoreError::RunNotFound(_)) => {
                let created = crate::runtime::create(runtime, workflow, input, child).map_err(|e| {
                    let reason = match e {
                        RunError::UnstorableState { reason, .. } => reason,
                        RunError::State { source, .. } => source.to_string(),
                        RunError::Create { source, .. } => source.to_string(),
                        other => other.to_string(),
                    };
                    ChildError::Input { workflow: def.name(), reason }
                })?;
                let new = created.new.queued().child_of(self.run_id(), signal);
                let new = crate::trace::traced(new);
                runtime.store().create_run(new).await?;
            }
            Err(e) => return Err(e.into()),
        }
        self.child_started(StartedChild { run_id: child, wake: Wake::IfIdle, timeout: options.timeout });
        Ok(child)
    }

    /// The record of child run `child` of this run, as the store has it now: its
    /// status, its state (its output once it completed), its error. Read-only: a
    /// transition's writes reach the store only with its commit.
    ///
    /// Errors with [`StoreError::RunNotFound`] when no run `child` exists or it is
    /// not a child of this run.
    pub async fn child_run(&self, child: RunId) -> Result<RunRecord, StoreError> {
        let record = self.runtime().store().load_run(child).await?;
        if record.parent != Some(self.run_id()) {
            return Err(StoreError::RunNotFound(child));
        }
        Ok(record)
    }
}

/// How long a parent's drive drives a child run before the child ends or first
/// waits, unless its [`ChildOptions`] set another bound: 10 minutes. Longer than a
/// workflow tool's 30 s, as a child run is often a whole agent, with several model
/// turns before it first waits.
pub const DEFAULT_CHILD_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// How [`RunContext::start_child_with`] starts a child run.
///
/// - `timeout` (default [`DEFAULT_CHILD_TIMEOUT`], 10 minutes; zero means 24 hours)
///   bounds how long the parent's drive drives the child before it ends or first
///   waits: a child that hangs (a step that never returns) would otherwise hold its
///   parent's drive forever. When it runs out, the child's step in flight is
///   dropped and the child is cancelled; the parent's inbox gets its
///   [`ChildEnded`] with status `cancelled`, [`ChildEnded::timed_out`] set and an
///   `error` that says so, and the parent's drive goes on.
/// - The timeout does not count the waiting: a child that waits (for a person's
///   signal, a timer) keeps its parent waiting, durably, for as long as it takes;
///   give the child's workflow a timer transition for a deadline of its own. Nor
///   does it bound a child driven elsewhere (by a [`Worker`](crate::Worker), as
///   when its workflow is not registered with the parent's runtime), which the
///   parent's drive does not wait for.
/// - Options are not stored with the child: after a crash, the drive that resumes
///   the parent drives the children it finds with the default timeout (a
///   transition that runs again and starts the same child sets its own again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildOptions {
    timeout: Duration,
}

impl Default for ChildOptions {
    fn default() -> Self {
        Self { timeout: DEFAULT_CHILD_TIMEOUT }
    }
}

impl ChildOptions {
    /// The defaults: a timeout of [`DEFAULT_CHILD_TIMEOUT`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets how long the parent's drive drives the child before it ends or first
    /// waits (10 minutes unless set; zero means 24 hours).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = if timeout.is_zero() { Duration::from_secs(24 * 60 * 60) } else { timeout };
        self
    }
}

/// Why a child run could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChildError {
    /// The child's first state would not read back.
    #[error("the input of child workflow `{workflow}` cannot be stored: {reason}")]
    Input {
        /// The child's workflow.
        workflow: &'static str,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ChildError> for crate::TransitionError {
    fn from(e: ChildError) -> Self {
        Self::Failed(Box::new(e))
    }
}

/// A child run a drive drives when its run next waits or ends.
pub(crate) struct StartedChild {
    pub(crate) run_id: RunId,
    /// How it is claimed: a child this drive started only if it is queued or
    /// waiting; one a resumed run's dead drive started also if it is running and its
    /// lease ran out (its driver died with the parent's).
    pub(crate) wake: Wake,
    /// How long the drive drives it before it ends or first waits.
    pub(crate) timeout: Duration,
}

/// The parent a child run tells when it ends.
pub(crate) struct Parent {
    /// The parent run.
    pub(crate) run_id: RunId,
    /// The parent's wait transition that takes the child's [`ChildEnded`].
    pub(crate) signal: String,
}

/// The parent run `record` tells when it ends, if it is a child.
pub(crate) fn parent_of(record: &RunRecord) -> Option<Parent> {
    let signal: &str = record.parent_signal.as_deref()?;
    Some(Parent { run_id: record.parent?, signal: signal.to_owned() })
}

/// The signal that tells a child's parent how it ended.
pub(crate) fn child_ended(
    parent: &Parent,
    child: RunId,
    workflow: &str,
    status: RunStatus,
    output: Option<&RawValue>,
    error: Option<String>,
) -> Option<crate::store::OutSignal> {
    let output = output.and_then(|raw| serde_json::from_str(raw.get()).ok());
    signal_parent(parent, &ChildEnded::new(child, workflow, status, output, error))
}

/// The signal that tells `parent` the child's end `ended`.
pub(crate) fn signal_parent(parent: &Parent, ended: &ChildEnded) -> Option<crate::store::OutSignal> {
    let payload = serde_json::value::to_raw_value(ended).ok()?;
    Some(crate::store::OutSignal::new(parent.run_id, parent.signal.clone(), payload))
}

/// The id of the `seq`-th child a transition starts, from its parent run and the
/// step the transition commits as (`RunContext::start_child` numbers its children
/// from 0; other starters, such as workflow tools, use numbers from 2^32): the same when a crash makes the transition run
/// again, so the child is found instead of started twice. A UUID of version 8
/// (custom) from a 128-bit FNV-1a hash.
pub fn child_run_id(parent: RunId, step: u64, seq: u64) -> RunId {
    let mut hash = crate::fnv::Fnv1a::<u128>::default();
    hash.bytes(parent.0.as_bytes());
    hash.bytes(&step.to_le_bytes());
    hash.bytes(&seq.to_le_bytes());
    let mut bytes = hash.finish().to_be_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x80; // version 8
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    RunId(uuid::Uuid::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_ids_are_stable_and_distinct() {
        let parent = RunId::new();
        assert_eq!(child_run_id(parent, 3, 0), child_run_id(parent, 3, 0));
        assert_ne!(child_run_id(parent, 3, 0), child_run_id(parent, 3, 1));
        assert_ne!(child_run_id(parent, 3, 0), child_run_id(parent, 4, 0));
        assert_ne!(child_run_id(parent, 3, 0), child_run_id(RunId::new(), 3, 0));
        assert_eq!(child_run_id(parent, 1, 2).0.get_version_num(), 8);
        // Stored runs keep their children's ids: the derivation never changes.
        let parent = RunId(uuid::Uuid::parse_str("0190f5a2-7b3c-7d4e-8f00-112233445566").unwrap());
        assert_eq!(child_run_id(parent, 3, 1).to_string(), "ceb7a061-c1ea-89f2-abcb-6ffeb35567d5");
    }

    #[test]
    fn the_payload_reads_back_and_has_a_schema() {
        let ended = ChildEnded {
            child: RunId::new(),
            workflow: "review".into(),
            status: RunStatus::Completed,
            output: Some(serde_json::json!({"ok": true})),
            error: None,
            timed_out: false,
        };
        let json = serde_json::to_value(&ended).unwrap();
        assert_eq!(serde_json::from_value::<ChildEnded>(json).unwrap(), ended);
        #[derive(serde::Deserialize)]
        struct Out {
            ok: bool,
        }
        assert!(ended.output_as::<Out>().unwrap().ok);
        let schema = schemars::schema_for!(ChildEnded);
        assert_eq!(schema.get("required").unwrap(), &serde_json::json!(["child", "workflow", "status"]));
    }
}
