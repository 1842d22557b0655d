//! An eval's report: each case's outcome and scores, the totals, a terminal table,
//! JSON, and a comparison of two reports case by case.

use std::fmt::Write;

use loopstack_core::{RunId, RunStatus};
use serde::{Deserialize, Serialize};

use super::{Case, Outcome, Score};

/// One case's run and scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CaseReport {
    /// The case's id.
    pub case: String,
    /// Which repeat (from 0).
    pub repeat: u32,
    /// Its run, to open in Studio or `show`.
    pub run_id: RunId,
    /// How the run stands.
    pub status: RunStatus,
    /// The answer's text.
    pub text: String,
    /// Each scorer's score, in the eval's order.
    pub scores: Vec<(String, Score)>,
    /// Whether the run completed and every scorer passed.
    pub passed: bool,
    /// Tokens used (input and output, cached included).
    pub tokens: u64,
    /// What it cost.
    pub cost: f64,
    /// Milliseconds from the run's start to its last change.
    pub latency_ms: u64,
    /// Why the run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CaseReport {
    pub(super) fn new(case: &Case, repeat: u32, outcome: &Outcome, scores: Vec<(String, Score)>) -> Self {
        let passed = outcome.status == RunStatus::Completed && scores.iter().all(|(_, s)| s.passed);
        Self {
            case: case.id.clone(),
            repeat,
            run_id: outcome.run_id,
            status: outcome.status,
            text: outcome.text.clone(),
            scores,
            passed,
            tokens: outcome.usage.all_tokens(),
            cost: outcome.cost,
            latency_ms: u64::try_from(outcome.latency.as_millis()).unwrap_or(u64::MAX),
            error: outcome.error.clone(),
        }
    }

    /// The mean of its scores (0 when it has none, or its run did not complete).
    pub fn mean(&self) -> f64 {
        if self.scores.is_empty() || self.status != RunStatus::Completed {
            return if self.passed { 1.0 } else { 0.0 };
        }
        self.scores.iter().map(|(_, s)| s.value).sum::<f64>() / self.scores.len() as f64
    }
}

/// The totals of an eval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// Case runs (cases times repeats).
    pub cases: usize,
    /// Of them, how many passed.
    pub passed: usize,
    /// `passed / cases`.
    pub pass_rate: f64,
    /// Each scorer's mean value and pass rate.
    pub scorers: Vec<(String, f64, f64)>,
    /// Tokens of all runs.
    pub tokens: u64,
    /// What all runs cost.
    pub cost: f64,
    /// The mean latency, in milliseconds.
    pub mean_latency_ms: u64,
}

/// What an eval found: see [`Eval::run`](super::Eval::run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EvalReport {
    /// The eval's name.
    pub eval: String,
    /// Its id (the same id resumes it).
    pub id: RunId,
    /// The dataset's name.
    pub dataset: String,
    /// The agent evaluated.
    pub agent: String,
    /// Runs per case.
    pub repeats: u32,
    /// The totals.
    pub summary: Summary,
    /// Each case run, in the dataset's order.
    pub cases: Vec<CaseReport>,
}

/// How a second report differs from a first, case by case (by the mean score over
/// scorers and repeats).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Comparison {
    /// Cases that scored higher: id, before, after.
    pub better: Vec<(String, f64, f64)>,
    /// Cases that scored lower.
    pub worse: Vec<(String, f64, f64)>,
    /// Cases that scored the same.
    pub same: Vec<String>,
    /// Cases only the first report has.
    pub removed: Vec<String>,
    /// Cases only the second has.
    pub added: Vec<String>,
}

impl Comparison {
    /// The comparison for a terminal: a line per case that got better or worse,
    /// then the counts of the rest.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (case, was, now) in &self.better {
            out += &format!("better: {case} {was:.2} -> {now:.2}\n");
        }
        for (case, was, now) in &self.worse {
            out += &format!("worse:  {case} {was:.2} -> {now:.2}\n");
        }
        out += &format!("{} the same, {} added, {} removed\n", self.same.len(), self.added.len(), self.removed.len());
        out
    }
}

impl EvalReport {
    pub(super) fn new(
        eval: &str,
        id: RunId,
        dataset: &str,
        agent: &str,
        repeats: u32,
        scorers: Vec<String>,
        cases: Vec<CaseReport>,
    ) -> Self {
        let n = cases.len();
        let passed = cases.iter().filter(|c| c.passed).count();
        let ratio = |k: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
        let scorers = scorers
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let scores: Vec<&Score> = cases.iter().filter_map(|c| c.scores.get(i).map(|(_, s)| s)).collect();
                let mean = if scores.is_empty() {
                    0.0
                } else {
                    scores.iter().map(|s| s.value).sum::<f64>() / scores.len() as f64
                };
                let pass = ratio(scores.iter().filter(|s| s.passed).count());
                (name, mean, pass)
            })
            .collect();
        let summary = Summary {
            cases: n,
            passed,
            pass_rate: ratio(passed),
            scorers,
            tokens: cases.iter().map(|c| c.tokens).sum(),
            cost: cases.iter().map(|c| c.cost).sum(),
            mean_latency_ms: if n == 0 { 0 } else { cases.iter().map(|c| c.latency_ms).sum::<u64>() / n as u64 },
        };
        Self {
            eval: eval.to_owned(),
            id,
            dataset: dataset.to_owned(),
            agent: agent.to_owned(),
            repeats,
            summary,
            cases,
        }
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is JSON")
    }

    /// A report from its JSON.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The mean score of each case over its repeats, by case id, in order.
    fn means(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64, u32)> = Vec::new();
        for c in &self.cases {
            match out.iter_mut().find(|(id, _, _)| *id == c.case) {
                Some(entry) => {
                    entry.1 += c.mean();
                    entry.2 += 1;
                }
                None => out.push((c.case.clone(), c.mean(), 1)),
            }
        }
        out.into_iter().map(|(id, sum, n)| (id, sum / f64::from(n))).collect()
    }

    /// How `self` (the new eval) differs from `before`, case by case.
    pub fn compare(&self, before: &Self) -> Comparison {
        let (old, new) = (before.means(), self.means());
        let mut comparison = Comparison { better: vec![], worse: vec![], same: vec![], removed: vec![], added: vec![] };
        for (id, after) in &new {
            match old.iter().find(|(o, _)| o == id) {
                None => comparison.added.push(id.clone()),
                Some((_, was)) if (after - was).abs() < 1e-9 => comparison.same.push(id.clone()),
                Some((_, was)) if after > was => comparison.better.push((id.clone(), *was, *after)),
                Some((_, was)) => comparison.worse.push((id.clone(), *was, *after)),
            }
        }
        comparison.removed =
            old.into_iter().filter(|(o, _)| !new.iter().any(|(n, _)| n == o)).map(|(o, _)| o).collect();
        comparison
    }

    /// The report as a table for a terminal: a row per case run, a column per scorer,
    /// and the totals.
    pub fn table(&self) -> String {
        let mut header = vec!["case".to_owned()];
        if self.repeats > 1 {
            header.push("#".into());
        }
        header.push("status".into());
        header.extend(self.summary.scorers.iter().map(|(name, _, _)| name.clone()));
        header.extend(["tokens".into(), "cost".into(), "ms".into()]);
        let mut rows = vec![header];
        for c in &self.cases {
            let mut row = vec![c.case.clone()];
            if self.repeats > 1 {
                row.push(c.repeat.to_string());
            }
            row.push(if c.passed { "pass".into() } else { format!("FAIL ({})", c.status.as_str()) });
            row.extend(c.scores.iter().map(|(_, s)| format!("{} {:.2}", if s.passed { "ok" } else { "x" }, s.value)));
            row.extend([c.tokens.to_string(), format!("{:.4}", c.cost), c.latency_ms.to_string()]);
            rows.push(row);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|i| rows.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &rows {
            let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "{} of {} passed ({:.0}%), {} tokens, cost {:.4}, mean {} ms",
            s.passed,
            s.cases,
            s.pass_rate * 100.0,
            s.tokens,
            s.cost,
            s.mean_latency_ms
        );
        for (name, mean, pass) in &s.scorers {
            let _ = writeln!(out, "  {name}: mean {mean:.2}, {:.0}% pass", pass * 100.0);
        }
        // A failing case's reasons, so the table says why (cut: an answer quoted in a
        // reason may be long; the JSON keeps them whole).
        for c in self.cases.iter().filter(|c| !c.passed) {
            for (name, score) in c.scores.iter().filter(|(_, s)| !s.passed) {
                let _ = writeln!(out, "  {} {name}: {}", c.case, cut(score.reason.as_deref().unwrap_or("failed")));
            }
            if let Some(error) = &c.error {
                let _ = writeln!(out, "  {}: {}", c.case, cut(error));
            }
        }
        out
    }
}

/// The longest reason a table line shows, in characters.
const REASON_CHARS: usize = 200;

/// `text` on one line, at most [`REASON_CHARS`] characters, cut with `...`.
fn cut(text: &str) -> String {
    let line = text.replace('\n', " ");
    match line.char_indices().nth(REASON_CHARS) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_reason_is_cut_on_one_line() {
        assert_eq!(super::cut("a\nb"), "a b");
        let long = "x".repeat(500);
        assert_eq!(super::cut(&long).chars().count(), super::REASON_CHARS + 3);
    }
}
