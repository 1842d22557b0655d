//! What `#[workflow]` generates: the table, routing, the place and signal enums, timers,
//! and runs.

use std::time::Duration;

use loopstack::{
    BoxError, Definition, IntoSignal, Result, Route, RunContext, RunError, RunOutcome, RunStatus, Runtime,
    TransitionDef, Workflow, WorkflowExt, workflow,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ToolCallState {
    /// Per model turn: whether it asks for tools.
    script: Vec<bool>,
    turns: usize,
    tool_batches: usize,
    tools_done: bool,
    log: Vec<String>,
}

impl From<Vec<bool>> for ToolCallState {
    fn from(script: Vec<bool>) -> Self {
        Self { script, ..Self::default() }
    }
}

/// The tool-calling loop of the TypeScript docs.
struct ToolCallWorkflow;

#[workflow(name = "tool_call", input = Vec<bool>)]
impl ToolCallWorkflow {
    /// Saves the user's message.
    #[transition(to = Ready)]
    async fn setup(&self, state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        state.log.push("setup".into());
        Ok(())
    }

    #[transition(from = Ready, to = PromptExecuted)]
    async fn llm_turn(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        state.turns += 1;
        state.log.push(format!("llm_turn from {}", cx.place()));
        Ok(())
    }

    #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
    #[guard(has_tool_calls)]
    async fn execute_tool_calls(&self, state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        state.tool_batches += 1;
        state.tools_done = true;
        state.log.push("execute_tool_calls".into());
        Ok(())
    }

    #[transition(from = AwaitingTools, to = Ready)]
    #[guard(all_tools_complete)]
    async fn tools_complete(&self, state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        state.tools_done = false;
        state.log.push("tools_complete".into());
        Ok(())
    }

    #[transition(from = PromptExecuted, to = End)]
    async fn respond(&self, state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        state.log.push("respond".into());
        Ok(())
    }

    fn has_tool_calls(&self, state: &ToolCallState) -> bool {
        state.script.get(state.turns - 1).copied().unwrap_or(false)
    }

    fn all_tools_complete(&self, state: &ToolCallState) -> bool {
        state.tools_done
    }
}

#[test]
fn definition_table() {
    let def = ToolCallWorkflow.definition();
    assert_eq!(def.name(), "tool_call");
    assert_eq!(def.places(), ["start", "ready", "prompt_executed", "awaiting_tools", "end"]);
    let expected = [
        TransitionDef::new("setup", &["start"], "ready"),
        TransitionDef::new("llm_turn", &["ready"], "prompt_executed"),
        TransitionDef::new("execute_tool_calls", &["prompt_executed"], "awaiting_tools")
            .priority(10)
            .guard("has_tool_calls"),
        TransitionDef::new("tools_complete", &["awaiting_tools"], "ready").guard("all_tools_complete"),
        TransitionDef::new("respond", &["prompt_executed"], "end"),
    ];
    assert_eq!(def.transitions(), expected);
    assert!(def.transitions().iter().all(|t| !t.wait && t.payload_schema.is_none()));
    // The runtime's own check agrees with the compile-time one.
    assert_eq!(def.check(), Ok(()));
}

#[test]
fn place_enum() {
    use ToolCallWorkflowPlace as P;
    assert_eq!(P::ALL, [P::Start, P::Ready, P::PromptExecuted, P::AwaitingTools, P::End]);
    assert_eq!(P::PromptExecuted.as_str(), "prompt_executed");
    assert_eq!(P::Start.to_string(), "start");
    assert_eq!(P::End.as_ref(), "end");
    let names: Vec<&str> = P::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(names, ToolCallWorkflow.definition().places());
    const READY: &str = P::Ready.as_str();
    assert_eq!(READY, "ready");
}

#[test]
fn routing_follows_guards_and_priority() {
    use ToolCallWorkflowPlace as P;
    let wf = ToolCallWorkflow;
    let mut state = ToolCallState::from(vec![true, false]);
    state.turns = 1;
    // The guarded priority-10 transition is tried before `respond`.
    assert_eq!(wf.next_transition(P::PromptExecuted, &state).unwrap(), Some("execute_tool_calls"));
    // A false guard falls through to the next transition.
    state.turns = 2;
    assert_eq!(wf.next_transition(P::PromptExecuted, &state).unwrap(), Some("respond"));
    assert_eq!(wf.route(P::Start, &state).unwrap().transition_name(), Some("setup"));
    assert_eq!(wf.route(P::End, &state).unwrap(), Route::End);
    // `tools_complete` is the only way out of `awaiting_tools`: a false guard is a dead end.
    assert_eq!(
        wf.route(P::AwaitingTools, &state).unwrap(),
        Route::DeadEnd { false_guards: vec!["all_tools_complete"] }
    );
    // Snake_case strings work too.
    assert_eq!(wf.next_transition("ready", &state).unwrap(), Some("llm_turn"));
    // Guards are plain methods, for unit tests.
    assert!(!wf.all_tools_complete(&state));
}

#[test]
fn mermaid() {
    assert_eq!(
        ToolCallWorkflow.mermaid(),
        "stateDiagram-v2
    [*] --> ready: setup
    ready --> prompt_executed: llm_turn
    prompt_executed --> awaiting_tools: execute_tool_calls [has_tool_calls] (priority 10)
    awaiting_tools --> ready: tools_complete [all_tools_complete]
    prompt_executed --> [*]: respond
"
    );
}

#[tokio::test]
async fn a_full_run_reaches_end() {
    let runtime = Runtime::new();
    let report = runtime.start(&ToolCallWorkflow, vec![true, true, false]).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.turns, 3);
    assert_eq!(report.state.tool_batches, 2);
    assert_eq!(
        report.state.log,
        [
            "setup",
            "llm_turn from ready",
            "execute_tool_calls",
            "tools_complete",
            "llm_turn from ready",
            "execute_tool_calls",
            "tools_complete",
            "llm_turn from ready",
            "respond",
        ]
    );
    assert_eq!(report.steps, 9);
    let record = runtime.store().load_run(report.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.place, "end");
    let history = runtime.store().history(report.run_id).await.unwrap();
    let places: Vec<(&str, &str)> = history.iter().map(|s| (&*s.from, &*s.to)).collect();
    assert_eq!(places[..3], [("start", "ready"), ("ready", "prompt_executed"), ("prompt_executed", "awaiting_tools")]);
}

// Ties keep declaration order; priority beats it; negative priorities come last.

#[derive(Debug, Default, Serialize, Deserialize)]
struct Flags {
    a: bool,
    b: bool,
    c: bool,
}

struct Ties;

#[workflow]
impl Ties {
    #[transition(to = Choosing)]
    async fn begin(&self, _: &mut Flags, _: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Choosing, to = End, priority = -1)]
    async fn last_resort(&self, _: &mut Flags, _: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Choosing, to = End)]
    #[guard(a)]
    async fn first_declared(&self, _: &mut Flags, _: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Choosing, to = End)]
    #[guard(b)]
    async fn second_declared(&self, _: &mut Flags, _: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Choosing, to = End, priority = 1)]
    #[guard(c)]
    async fn prioritized(&self, _: &mut Flags, _: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn a(&self, s: &Flags) -> bool {
        s.a
    }
    fn b(&self, s: &Flags) -> bool {
        s.b
    }
    fn c(&self, s: &Flags) -> bool {
        s.c
    }
}

#[test]
fn ties_keep_declaration_order() {
    use TiesPlace::Choosing;
    let wf = Ties;
    assert_eq!(wf.definition().name(), "ties");
    let next = |a, b, c| wf.next_transition(Choosing, &Flags { a, b, c }).unwrap().unwrap();
    assert_eq!(next(true, true, false), "first_declared");
    assert_eq!(next(false, true, false), "second_declared");
    assert_eq!(next(true, true, true), "prioritized");
    assert_eq!(next(false, false, false), "last_resort");
    assert_eq!(wf.definition().transitions()[1].priority, Some(-1));
    assert_eq!(wf.definition().check(), Ok(()));
}

// Wait transitions and signals.

#[derive(Debug, Deserialize, JsonSchema)]
struct Approval {
    /// Who approved.
    approver: String,
    note: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Rejection {
    reason: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Request {
    what: String,
    approved_by: Option<String>,
    rejected: Option<String>,
    done: bool,
}

impl From<String> for Request {
    fn from(what: String) -> Self {
        Self { what, ..Self::default() }
    }
}

#[derive(Debug)]
struct Refused(String);

impl std::error::Error for Refused {}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", self.0)
    }
}

struct ApprovalFlow;

#[workflow(input = String, state = Request)]
impl ApprovalFlow {
    #[transition(to = AwaitingApproval)]
    async fn request(&self, state: &mut Request, _cx: &mut RunContext) -> Result<()> {
        if state.what.is_empty() {
            return Err("nothing to approve".into());
        }
        Ok(())
    }

    #[transition(from = AwaitingApproval, to = Approved, wait)]
    async fn approve(&self, state: &mut Request, _cx: &mut RunContext, decision: Approval) -> Result<()> {
        state.approved_by =
            Some(format!("{}{}", decision.approver, decision.note.map(|n| format!(" ({n})")).unwrap_or_default()));
        Ok(())
    }

    #[transition(from = AwaitingApproval, to = End, wait, priority = 1)]
    async fn reject(
        &self,
        state: &mut Request,
        _cx: &mut RunContext,
        rejection: Rejection,
    ) -> std::result::Result<(), Refused> {
        state.rejected = Some(rejection.reason.clone());
        if rejection.reason == "never" {
            return Err(Refused(rejection.reason));
        }
        Ok(())
    }

    #[transition(from = Approved, to = End)]
    async fn finish(&self, state: &mut Request, _cx: &mut RunContext) -> std::result::Result<(), BoxError> {
        state.done = true;
        Ok(())
    }
}

#[test]
fn wait_transitions_in_the_table() {
    let def: &Definition = ApprovalFlow.definition();
    assert_eq!(def.name(), "approval_flow");
    assert_eq!(def.places(), ["start", "awaiting_approval", "approved", "end"]);
    let (_, approve) = def.transition("approve").unwrap();
    assert!(approve.wait);
    let schema = (approve.payload_schema.unwrap())();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["approver"]));
    assert_eq!(schema["properties"]["approver"]["description"], "Who approved.");
    assert_eq!(schema["additionalProperties"], false);
    let (_, reject) = def.transition("reject").unwrap();
    assert_eq!((reject.wait, reject.priority), (true, Some(1)));
    assert!(!def.transition("finish").unwrap().1.wait);
    assert_eq!(
        ApprovalFlow.route(ApprovalFlowPlace::AwaitingApproval, &Request::default()).unwrap(),
        Route::Wait { signals: vec!["reject", "approve"] }
    );
    assert_eq!(
        ApprovalFlow.mermaid(),
        "stateDiagram-v2
    [*] --> awaiting_approval: request
    awaiting_approval --> approved: approve (wait)
    awaiting_approval --> [*]: reject (priority 1) (wait)
    approved --> [*]: finish
"
    );
}

#[tokio::test]
async fn a_signal_with_a_typed_payload() {
    let runtime = Runtime::new();
    let wf = ApprovalFlow;
    let report = runtime.start(&wf, "a new laptop".to_owned()).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "awaiting_approval", signals: vec!["reject", "approve"] });
    let run_id = report.run_id;

    // A payload that does not deserialize is refused, and the run keeps waiting.
    let err = runtime.signal(&wf, run_id, ("approve", json!({"note": "ok"}))).await.unwrap_err();
    let RunError::InvalidSignalPayload { signal, reason, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*signal, "approve");
    assert!(reason.contains("approver"), "{reason}");
    let record = runtime.store().load_run(run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Waiting);
    assert_eq!(record.place, "awaiting_approval");

    let report = runtime.signal(&wf, run_id, ("approve", json!({"approver": "ada", "note": "fine"}))).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.approved_by.as_deref(), Some("ada (fine)"));
    assert!(report.state.done);
    assert_eq!(report.steps, 3);
}

#[tokio::test]
async fn transition_errors_keep_their_type() {
    let runtime = Runtime::new();
    let wf = ApprovalFlow;
    let run_id = runtime.start(&wf, "x".to_owned()).await.unwrap().run_id;
    let err = runtime.signal(&wf, run_id, ("reject", json!({"reason": "never"}))).await.unwrap_err();
    // A wait transition that fails refuses its signal; the run keeps waiting.
    let RunError::SignalRefused { signal, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*signal, "reject");
    let source = err.transition_source().unwrap();
    assert_eq!(source.downcast_ref::<Refused>().unwrap().to_string(), "refused: never");
    assert_eq!(runtime.store().load_run(run_id).await.unwrap().status, RunStatus::Waiting);

    let err = runtime.start(&wf, String::new()).await.unwrap_err();
    assert!(err.to_string().contains("nothing to approve"), "{err}");
}

// A generic workflow, several sources, and a transition back into `Start`.

trait Model: Send + Sync + 'static {
    fn answer(&self) -> u32;
}

struct Fixed(u32);
impl Model for Fixed {
    fn answer(&self) -> u32 {
        self.0
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Answers(Vec<u32>);

struct Generic<M> {
    model: M,
}

#[workflow(name = "generic")]
impl<M: Model> Generic<M> {
    #[transition(to = Asking)]
    async fn ask(&self, state: &mut Answers, _cx: &mut RunContext) -> Result<()> {
        state.0.push(self.model.answer());
        Ok(())
    }

    #[transition(from = Asking, to = Start, priority = 1)]
    #[guard(again)]
    async fn retry(&self, _state: &mut Answers, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = [Asking, Start], to = End, priority = 1)]
    #[guard(enough)]
    async fn done(&self, _state: &mut Answers, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn again(&self, state: &Answers) -> bool {
        state.0.len() < 3
    }

    fn enough(&self, state: &Answers) -> bool {
        state.0.len() >= 3
    }
}

#[tokio::test]
async fn generic_workflow_with_several_sources() {
    let wf = Generic { model: Fixed(7) };
    let def = wf.definition();
    assert_eq!(def.places(), ["start", "asking", "end"]);
    assert_eq!(def.transition("done").unwrap().1.from, ["asking", "start"]);
    let report = Runtime::new().start(&wf, Answers::default()).await.unwrap();
    assert_eq!(report.state.0, [7, 7, 7]);
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(GenericPlace::ALL.len(), 3);
}

// Typed signals and timers.

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Review {
    /// Whether the refund is granted.
    approved: bool,
    by: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Refund {
    reviewed_by: Option<String>,
    granted: bool,
    cancelled: bool,
    expired: bool,
}

/// A refund waits for a human: a review, a cancellation, or 48 hours.
struct RefundDesk;

#[workflow]
impl RefundDesk {
    #[transition(to = AwaitingHuman)]
    async fn open(&self, _state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = AwaitingHuman, to = Reviewed, wait)]
    async fn human_review(&self, state: &mut Refund, _cx: &mut RunContext, review: Review) -> Result<()> {
        state.reviewed_by = Some(review.by);
        state.granted = review.approved;
        Ok(())
    }

    #[transition(from = AwaitingHuman, to = End, wait)]
    async fn cancel(&self, state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        state.cancelled = true;
        Ok(())
    }

    #[transition(from = AwaitingHuman, to = Expired, after = "48h")]
    async fn expire(&self, state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        state.expired = true;
        Ok(())
    }

    #[transition(from = [Reviewed, Expired], to = End)]
    async fn close(&self, _state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_typed_signal_completes_the_run() {
    let runtime = Runtime::new();
    let wf = RefundDesk;
    let report = runtime.start(&wf, Refund::default()).await.unwrap();
    // Timers are not signals: the run waits for `human_review` or `cancel`.
    assert_eq!(
        report.outcome,
        RunOutcome::Waiting { place: "awaiting_human", signals: vec!["human_review", "cancel"] }
    );
    let review = Review { approved: true, by: "ada".into() };
    let report = runtime.signal(&wf, report.run_id, RefundDeskSignal::HumanReview(review)).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.reviewed_by.as_deref(), Some("ada"));
    assert!(report.state.granted && !report.state.cancelled && !report.state.expired);
}

#[tokio::test]
async fn a_unit_signal_takes_no_payload() {
    let runtime = Runtime::new();
    let wf = RefundDesk;
    let run_id = runtime.start(&wf, Refund::default()).await.unwrap().run_id;
    // By name, a wait transition without a payload takes `null` and nothing else.
    let err = runtime.signal(&wf, run_id, ("cancel", json!({"why": "changed my mind"}))).await.unwrap_err();
    let RunError::InvalidSignalPayload { signal, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*signal, "cancel");
    assert_eq!(runtime.store().load_run(run_id).await.unwrap().status, RunStatus::Waiting);

    let report = runtime.signal(&wf, run_id, RefundDeskSignal::Cancel).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert!(report.state.cancelled);
}

#[test]
fn signals_are_names_and_json() {
    let review = Review { approved: false, by: "bo".into() };
    let (name, payload) = IntoSignal::<RefundDesk>::into_signal(RefundDeskSignal::HumanReview(review)).unwrap();
    assert_eq!((name.as_ref(), payload), ("human_review", json!({"approved": false, "by": "bo"})));
    let (name, payload) = IntoSignal::<RefundDesk>::into_signal(RefundDeskSignal::Cancel).unwrap();
    assert_eq!((name.as_ref(), payload), ("cancel", serde_json::Value::Null));
    // Each variant names a wait transition of the table.
    let def = RefundDesk.definition();
    for name in ["human_review", "cancel"] {
        assert!(def.transition(name).unwrap().1.wait, "{name}");
    }
    // A wait transition without a payload has the schema of `null`.
    let (_, cancel) = def.transition("cancel").unwrap();
    assert_eq!((cancel.payload_schema.unwrap())(), json!({"type": "null"}));
}

#[test]
fn a_timer_transition_in_the_table() {
    let def = RefundDesk.definition();
    let (index, expire) = def.transition("expire").unwrap();
    assert_eq!(expire.after, Some(Duration::from_secs(48 * 3600)));
    assert_eq!(
        *expire,
        TransitionDef::new("expire", &["awaiting_human"], "expired").after(Duration::from_secs(48 * 3600))
    );
    assert!(!expire.wait && expire.waits() && expire.payload_schema.is_none());
    assert_eq!(def.timers("awaiting_human", |_| true).unwrap(), [(index, Duration::from_secs(48 * 3600))]);
    assert_eq!(def.check(), Ok(()));
    // The diagram prints a delay in its largest whole unit.
    assert_eq!(
        RefundDesk.mermaid(),
        "stateDiagram-v2
    [*] --> awaiting_human: open
    awaiting_human --> reviewed: human_review (wait)
    awaiting_human --> [*]: cancel (wait)
    awaiting_human --> expired: expire (after 2d)
    reviewed --> [*]: close
    expired --> [*]: close
"
    );
}

/// Durations combine units; a timer may have a guard and a priority, and so may
/// other transitions from its place without shadowing it.
struct Reminders;

#[workflow(state = Refund)]
impl Reminders {
    #[transition(to = Waiting)]
    async fn start(&self, _state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Waiting, to = Waiting, after = "1h30m", priority = 2)]
    #[guard(not_expired)]
    async fn remind(&self, _state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Waiting, to = End, after = "2d")]
    async fn give_up(&self, _state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Waiting, to = End)]
    #[guard(is_expired)]
    async fn finish(&self, _state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn not_expired(&self, state: &Refund) -> bool {
        !state.expired
    }

    fn is_expired(&self, state: &Refund) -> bool {
        state.expired
    }
}

#[test]
fn timers_wait_like_signals() {
    let def = Reminders.definition();
    let after = |name| def.transition(name).unwrap().1.after;
    assert_eq!(after("remind"), Some(Duration::from_secs(90 * 60)));
    assert_eq!(after("give_up"), Some(Duration::from_secs(2 * 86_400)));
    assert_eq!(after("finish"), None);
    assert_eq!(def.check(), Ok(()));
    // Nothing fires by itself: the run waits, for timers only.
    assert_eq!(Reminders.route(RemindersPlace::Waiting, &Refund::default()).unwrap(), Route::Wait { signals: vec![] });
    let (remind, give_up) = (def.transition("remind").unwrap().0, def.transition("give_up").unwrap().0);
    let due: Vec<(usize, Duration)> = def.timers("waiting", |i| Reminders.guard(i, &Refund::default())).unwrap();
    assert_eq!(due, [(remind, Duration::from_secs(5400)), (give_up, Duration::from_secs(172_800))]);
    let expired = Refund { expired: true, ..Refund::default() };
    assert_eq!(Reminders.next_transition(RemindersPlace::Waiting, &expired).unwrap(), Some("finish"));
    // A workflow without wait transitions has a signal enum without variants.
    let _: fn(RemindersSignal) -> ! = |signal| match signal {};
}

// Timers whose delay the workflow gives: from its configuration or the run's state.

/// A follow-up after a delay the desk is configured with, a reminder after one the
/// state sets, and a fixed deadline beside them.
struct FollowUps<M> {
    model: M,
    follow_up: Duration,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Ticket {
    remind_after_secs: u64,
}

#[workflow(state = Ticket)]
impl<M: Model> FollowUps<M> {
    #[transition(to = Waiting)]
    async fn open(&self, _state: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Waiting, to = Waiting, after = Self::reminder, priority = 1)]
    #[guard(reminds)]
    async fn remind(&self, _state: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Waiting, to = End, after = Self::follow_up)]
    async fn follow_up_now(&self, _state: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Waiting, to = End, after = "1d")]
    async fn deadline(&self, _state: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn reminds(&self, state: &Ticket) -> bool {
        state.remind_after_secs > 0
    }

    fn reminder(&self, state: &Ticket) -> Duration {
        Duration::from_secs(state.remind_after_secs + u64::from(self.model.answer()))
    }

    fn follow_up(&self, _state: &Ticket) -> Duration {
        self.follow_up
    }
}

#[test]
fn a_timer_from_a_method_is_in_the_table_and_asks_the_workflow() {
    let wf = FollowUps { model: Fixed(1), follow_up: Duration::from_secs(300) };
    let def = wf.definition();
    let (remind, t) = def.transition("remind").unwrap();
    assert_eq!(
        *t,
        TransitionDef::new("remind", &["waiting"], "waiting").priority(1).guard("reminds").after_fn("reminder")
    );
    assert!(t.is_timer() && t.waits() && t.after.is_none());
    let (follow_up, t) = def.transition("follow_up_now").unwrap();
    assert_eq!(t.after_fn, Some("follow_up"));
    let deadline = def.transition("deadline").unwrap().0;
    // Computed timers wait like fixed ones: none shadows another, the run waits.
    assert_eq!(def.check(), Ok(()));
    let ticket = Ticket { remind_after_secs: 59 };
    assert_eq!(wf.route(FollowUpsPlace::Waiting, &ticket).unwrap(), Route::Wait { signals: vec![] });
    let day = Duration::from_secs(86_400);
    assert_eq!(
        wf.timers(FollowUpsPlace::Waiting, &ticket).unwrap(),
        [(remind, Duration::from_secs(60)), (follow_up, Duration::from_secs(300)), (deadline, day)]
    );
    // The guard still decides; the table alone knows only the fixed delay.
    assert_eq!(
        wf.timers("waiting", &Ticket::default()).unwrap(),
        [(follow_up, Duration::from_secs(300)), (deadline, day)]
    );
    assert_eq!(def.timers("waiting", |_| true).unwrap(), [(deadline, day)]);
    assert_eq!((wf.timer(deadline, &ticket), wf.timer(0, &ticket)), (Some(day), None));
    // Another configuration, another delay, from the same table.
    let slow = FollowUps { model: Fixed(1), follow_up: Duration::from_secs(3600) };
    assert_eq!(slow.timer(follow_up, &ticket), Some(Duration::from_secs(3600)));
    assert!(std::ptr::eq(slow.definition(), def));
    assert_eq!(
        wf.mermaid(),
        "stateDiagram-v2
    [*] --> waiting: open
    waiting --> waiting: remind [reminds] (priority 1) (after reminder)
    waiting --> [*]: follow_up_now (after follow_up)
    waiting --> [*]: deadline (after 1d)
"
    );
}

// Signals of generic workflows, and payloads that name `Self`.

/// A generic workflow: its signal enum is not generic, and is sent to any `Desk<M>`.
struct Desk<M> {
    model: M,
}

#[workflow(state = Refund)]
impl<M: Model> Desk<M> {
    #[transition(to = AwaitingHuman)]
    async fn open(&self, _state: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = AwaitingHuman, to = End, wait)]
    async fn review(&self, state: &mut Refund, _cx: &mut RunContext, review: Review) -> Result<()> {
        state.reviewed_by = Some(format!("{} ({})", review.by, self.model.answer()));
        Ok(())
    }
}

#[tokio::test]
async fn a_generic_workflow_has_typed_signals() {
    let runtime = Runtime::new();
    let wf = Desk { model: Fixed(3) };
    let run_id = runtime.start(&wf, Refund::default()).await.unwrap().run_id;
    let review = Review { approved: true, by: "cy".into() };
    let report = runtime.signal(&wf, run_id, DeskSignal::Review(review)).await.unwrap();
    assert_eq!(report.state.reviewed_by.as_deref(), Some("cy (3)"));
}

trait Form {
    type Fields;
}

impl Form for Notes {
    type Fields = Review;
}

/// A payload type written with `Self`.
struct Notes;

#[workflow(state = Refund)]
impl Notes {
    #[transition(to = End, wait)]
    async fn note(&self, state: &mut Refund, _cx: &mut RunContext, note: <Self as Form>::Fields) -> Result<()> {
        state.reviewed_by = Some(note.by);
        Ok(())
    }
}

#[tokio::test]
async fn a_payload_written_with_self() {
    let runtime = Runtime::new();
    let run_id = runtime.start(&Notes, Refund::default()).await.unwrap().run_id;
    let note = NotesSignal::Note(Review { approved: false, by: "di".into() });
    let report = runtime.signal(&Notes, run_id, note).await.unwrap();
    assert_eq!(report.state.reviewed_by.as_deref(), Some("di"));
}

#[test]
fn the_input_schema_is_there_when_the_input_type_has_one() {
    // `Vec<bool>` has a JSON Schema, so the form that starts a run can be made.
    let schema = ToolCallWorkflow.input_schema().expect("Vec<bool> has a schema");
    assert_eq!(schema["type"], "array");
    assert_eq!(schema["items"]["type"], "boolean");
    // `Flags` (the state, standing in for the input) has none: no schema, no error.
    assert_eq!(Ties.input_schema(), None);
    // A generic workflow: its input is found through the impl's own parameters.
    assert_eq!(Generic { model: Fixed(1) }.input_schema(), None);
    assert_eq!(ApprovalFlow.input_schema(), Some(json!({ "type": "string" })));
}

/// `on_create`: documents saved when the run is created, at step 0, with no step of
/// their own; an error there creates no run.
mod on_create {
    use super::*;
    use loopstack::{Document, DocumentType, SaveOptions};

    #[derive(Debug, Default, Serialize, Deserialize)]
    struct Ticket {
        subject: String,
        words: usize,
    }

    impl From<String> for Ticket {
        fn from(subject: String) -> Self {
            Self { subject, words: 0 }
        }
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Subject {
        text: String,
    }

    impl DocumentType for Subject {
        const TYPE: &'static str = "subject";
    }

    struct Triage;

    impl Triage {
        fn save_subject(&self, state: &mut Ticket, cx: &mut RunContext) -> Result<(), BoxError> {
            if state.subject.is_empty() {
                return Err("a ticket needs a subject".into());
            }
            let text = std::mem::take(&mut state.subject);
            cx.save_with(&Subject { text }, SaveOptions::new().tag("ticket"))?;
            Ok(())
        }
    }

    #[workflow(input = String, on_create = Self::save_subject)]
    impl Triage {
        /// Counts the subject's words, read from the document the creation saved.
        #[transition(to = End)]
        async fn count(&self, state: &mut Ticket, cx: &mut RunContext) -> Result<()> {
            let subject: Subject = cx.documents()[0].read()?;
            state.words = subject.text.split_whitespace().count();
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_documents_of_a_new_run_are_saved_at_step_zero() {
        let runtime = Runtime::new();
        let report = runtime.start(&Triage, "printer on fire".to_owned()).await.unwrap();
        assert_eq!((report.outcome, report.state.words), (RunOutcome::Completed, 3));
        let store = runtime.store();
        let docs: Vec<std::sync::Arc<Document>> = store.documents(report.run_id).await.unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!((docs[0].seq, docs[0].step, &*docs[0].doc_type), (0, 0, "subject"));
        assert_eq!(docs[0].tags, ["ticket"]);
        assert_eq!(docs[0].read::<Subject>().unwrap(), Subject { text: "printer on fire".into() });
        // No step was spent on it, and the state checkpointed at step 0 kept none of it.
        let history = store.history(report.run_id).await.unwrap();
        assert_eq!(history.iter().map(|s| &*s.transition).collect::<Vec<_>>(), ["count"]);
        assert_eq!(store.checkpoint(report.run_id, 0).await.unwrap().state.get(), r#"{"subject":"","words":0}"#);

        // A queued run has them too, for the worker that claims it.
        let queued = runtime.submit(&Triage, "disk full".to_owned()).await.unwrap();
        let docs = store.documents(queued).await.unwrap();
        assert_eq!(docs[0].read::<Subject>().unwrap(), Subject { text: "disk full".into() });
    }

    #[tokio::test]
    async fn an_error_in_on_create_creates_no_run() {
        let runtime = Runtime::new();
        let err = runtime.start(&Triage, String::new()).await.unwrap_err();
        let RunError::Create { workflow, source, .. } = &err else { panic!("{err}") };
        assert_eq!((*workflow, source.to_string().as_str()), ("triage", "a ticket needs a subject"));
        assert!(err.to_string().starts_with("workflow `triage` could not create run "), "{err}");
        assert_eq!(err.run_id(), None, "no run exists to name");
        let listed = runtime.store().list_runs(&loopstack::RunQuery::new()).await.unwrap();
        assert!(listed.runs.is_empty(), "nothing was stored");
    }
}
