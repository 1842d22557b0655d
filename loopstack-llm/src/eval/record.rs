//! An eval's record in the store: a run of the tiny workflow [`EVAL_WORKFLOW`]
//! whose state is the eval's report, under the eval's id (its cases' runs have ids
//! derived from it). Studio lists the runs of that workflow as its evals.

use futures::future::BoxFuture;
use loopstack_core::{
    Definition, END, RunContext, RunError, START, StoreError, TransitionDef, TransitionError, Workflow,
};
use serde_json::Value;

use super::{EvalError, EvalReport};
use crate::agent::AskError;

/// The workflow of eval records: one step, `report`, from `start` to `end`.
pub const EVAL_WORKFLOW: &str = "loopstack_eval";

static DEFINITION: Definition =
    Definition::new(EVAL_WORKFLOW, &[START, END], &[TransitionDef::new("report", &[START], END)])
        .with_description("An eval's report: its cases' outcomes, scores, cost and latency.");

/// Records an eval's report: a run of [`EVAL_WORKFLOW`] whose state is the report.
struct EvalRecord;

impl Workflow for EvalRecord {
    type State = EvalReport;
    type Input = EvalReport;

    fn definition(&self) -> &'static Definition {
        &DEFINITION
    }

    fn init(&self, report: EvalReport) -> EvalReport {
        report
    }

    fn guard(&self, _: usize, _: &EvalReport) -> bool {
        true
    }

    fn transition<'a>(
        &'a self,
        _: usize,
        _: &'a mut EvalReport,
        _: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Stores `report` as its eval's record, unless an earlier run of the same eval
/// (the same id) stored one: that one is kept.
pub(super) async fn save(runtime: &loopstack_core::Runtime, report: &EvalReport) -> Result<(), EvalError> {
    match runtime.start(&EvalRecord, report.clone()).run_id(report.id).await {
        Ok(_) | Err(RunError::Store(StoreError::RunExists(_))) => Ok(()),
        Err(e) => Err(EvalError::Run(AskError::Run(e))),
    }
}
