//! The `eval` command.

use super::*;

/// The exit status of an `eval` whose cases did not all pass.
pub const EVAL_FAILED: u8 = 3;

/// What `eval` was given.
pub(super) struct EvalArgs<'a> {
    pub(super) dataset: &'a std::path::Path,
    /// The agent's name, or the workflow's.
    pub(super) agent: &'a str,
    /// Whether `agent` names a workflow of any kind (`--workflow`).
    pub(super) workflow: bool,
    pub(super) repeats: u32,
    pub(super) concurrency: usize,
    pub(super) id: Option<RunId>,
    pub(super) scorers: &'a [String],
    pub(super) compare: Option<&'a std::path::Path>,
}

/// Runs an eval of a registered agent, with a progress line on standard error.
pub(super) async fn eval(runtime: &Runtime, args: EvalArgs<'_>, json: bool) -> Result<String, CliError> {
    use loopstack_llm::eval::{CalledTool, Contains, Dataset, Eval, EvalReport, Exact, Matches};
    use std::io::IsTerminal as _;
    if !runtime.is_registered(args.agent) {
        return Err(
            RunError::UnknownWorkflow { workflow: args.agent.to_owned(), registered: runtime.workflows() }.into()
        );
    }
    let bad = |e: &dyn std::fmt::Display| CliError::Eval(e.to_string());
    let before = match args.compare {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| bad(&format!("{}: {e}", path.display())))?;
            Some(EvalReport::from_json(&text).map_err(|e| bad(&format!("{}: {e}", path.display())))?)
        }
        None => None,
    };
    let dataset = Dataset::load_jsonl(args.dataset).map_err(|e| bad(&e))?;
    let eval = if args.workflow { Eval::workflow(dataset, args.agent) } else { Eval::named(dataset, args.agent) };
    let mut eval = eval.repeats(args.repeats).concurrency(args.concurrency);
    for scorer in args.scorers {
        eval = match scorer.split_once(':') {
            None if scorer == "contains" => eval.scorer(Contains::expected()),
            None if scorer == "exact" => eval.scorer(Exact),
            Some(("matches", pattern)) => eval.scorer(Matches::new(pattern).map_err(|e| bad(&e))?),
            Some(("called", tool)) => eval.scorer(CalledTool::new(tool)),
            _ => return Err(bad(&format!("unknown scorer `{scorer}`: contains, exact, matches:REGEX or called:TOOL"))),
        };
    }
    if let Some(id) = args.id {
        eval = eval.id(id);
    }
    let terminal = std::io::stderr().is_terminal();
    eval = eval.on_progress(move |done, total, case| {
        let status = if case.passed { "pass" } else { "FAIL" };
        if terminal {
            let filled = done * 20 / total.max(1);
            eprint!(
                "\r[{}{}] {done}/{total} {} {status}\x1b[K",
                "#".repeat(filled),
                ".".repeat(20 - filled),
                case.case
            );
            if done == total {
                eprintln!();
            }
        } else {
            eprintln!("[{done}/{total}] {} {status}", case.case);
        }
    });
    let report = eval.run(runtime).await.map_err(|e| bad(&e))?;
    let comparison = before.as_ref().map(|before| report.compare(before));
    let out = if json {
        let mut value = serde_json::to_value(&report).map_err(|e| bad(&e))?;
        if let Some(comparison) = &comparison {
            value["comparison"] = serde_json::to_value(comparison).map_err(|e| bad(&e))?;
        }
        value.to_string() + "\n"
    } else {
        let mut out = report.table();
        let _ = writeln!(out, "eval {} (run it again with --id {} over the same --db)", report.eval, report.id);
        if let Some(comparison) = &comparison {
            out += &comparison.text();
        }
        out
    };
    let (failed, cases) = (report.summary.cases - report.summary.passed, report.summary.cases);
    if failed > 0 {
        return Err(CliError::CasesFailed { failed, cases, output: out });
    }
    Ok(out)
}
