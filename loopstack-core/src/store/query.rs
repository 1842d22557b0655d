//! Listing runs: a query and a page.

use super::*;

/// A filter over runs, for [`Store::list_runs`]: newest first, a page at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunQuery {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs in one of these statuses (any when empty).
    pub status: Vec<RunStatus>,
    /// Only runs at this place.
    pub place: Option<String>,
    /// Only children of this run.
    pub parent: Option<RunId>,
    /// Only runs created at or after this time.
    pub created_after: Option<Timestamp>,
    /// Only runs created before this time.
    pub created_before: Option<Timestamp>,
    /// Only runs older than this one (the previous page's [`RunPage::next`]).
    pub before: Option<RunId>,
    /// The page size, 1 to 1,000 (50 by default).
    pub limit: u32,
    /// Only runs labelled with this name and value ([`RunRecord::labels`]).
    pub label: Option<(String, String)>,
}

impl Default for RunQuery {
    fn default() -> Self {
        Self {
            workflow: None,
            status: Vec::new(),
            place: None,
            parent: None,
            created_after: None,
            created_before: None,
            before: None,
            limit: 50,
            label: None,
        }
    }
}

impl RunQuery {
    /// Every run, 50 a page.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only runs of `workflow`.
    #[must_use]
    pub fn workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflow = Some(workflow.into());
        self
    }

    /// Only runs in `status` (call again to allow several).
    #[must_use]
    pub fn status(mut self, status: RunStatus) -> Self {
        self.status.push(status);
        self
    }

    /// Only runs at `place`.
    #[must_use]
    pub fn place(mut self, place: impl Into<String>) -> Self {
        self.place = Some(place.into());
        self
    }

    /// Only children of `parent`.
    #[must_use]
    pub fn parent(mut self, parent: RunId) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Only runs created in `[after, before)`.
    #[must_use]
    pub fn created_between(mut self, after: Option<Timestamp>, before: Option<Timestamp>) -> Self {
        self.created_after = after;
        self.created_before = before;
        self
    }

    /// Only runs labelled `name` = `value` ([`RunRecord::labels`]): a tenant's, a
    /// protocol's conversation's.
    #[must_use]
    pub fn label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.label = Some((name.into(), value.into()));
        self
    }

    /// The page after the one that returned `next`.
    #[must_use]
    pub fn before(mut self, next: RunId) -> Self {
        self.before = Some(next);
        self
    }

    /// The page size, clamped to 1..=1000.
    #[must_use]
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// The page size as stores apply it.
    pub fn page_size(&self) -> u32 {
        self.limit.clamp(1, 1000)
    }

    /// Whether `run` passes the filter (the paging cursor aside); what every store's
    /// query must agree with.
    pub fn matches(&self, run: &RunRecord) -> bool {
        self.workflow.as_ref().is_none_or(|w| *w == run.workflow)
            && (self.status.is_empty() || self.status.contains(&run.status))
            && self.place.as_ref().is_none_or(|p| *p == run.place)
            && self.parent.is_none_or(|p| run.parent == Some(p))
            && self.created_after.is_none_or(|t| run.created_at >= t)
            && self.created_before.is_none_or(|t| run.created_at < t)
            && self.label.as_ref().is_none_or(|(name, value)| run.labels.get(name) == Some(value))
    }
}

/// One page of runs, newest first.
#[derive(Debug, Clone)]
pub struct RunPage {
    /// The runs, without their states.
    pub runs: Vec<RunSummary>,
    /// Pass to [`RunQuery::before`] for the next page; `None` on the last.
    pub next: Option<RunId>,
}

/// How many runs of one workflow are in one unfinished status, and how many of
/// them a worker could claim now ([`Store::count_runs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunCount {
    /// The runs' workflow.
    pub workflow: String,
    /// Their status: `queued`, `running` or `waiting`.
    pub status: RunStatus,
    /// How many runs there are.
    pub runs: u64,
    /// How many of them can move now, as [`Store::claim_runnable`] would find them:
    /// every queued run, running runs whose lease ran out, and waiting runs with a
    /// pending signal or a timer due.
    pub runnable: u64,
}

impl RunCount {
    /// `runs` runs of `workflow` in `status`, `runnable` of them claimable now.
    pub fn new(workflow: impl Into<String>, status: RunStatus, runs: u64, runnable: u64) -> Self {
        Self { workflow: workflow.into(), status, runs, runnable }
    }
}

/// The statuses [`Store::count_runs`] counts: the runs that have not ended.
pub const COUNTED_STATUSES: [RunStatus; 3] = [RunStatus::Queued, RunStatus::Running, RunStatus::Waiting];

/// [`Store::count_runs`] for any store, from its listing and inboxes: a page of
/// 1,000 unfinished runs at a time, and the inbox of each waiting run without a
/// due timer.
pub async fn count_runs_by_listing<S: Store + ?Sized>(store: &S, now: Timestamp) -> Result<Vec<RunCount>, StoreError> {
    let mut counts: Vec<RunCount> = Vec::new();
    let mut query = RunQuery { status: COUNTED_STATUSES.to_vec(), limit: 1000, ..RunQuery::default() };
    loop {
        let page = store.list_runs(&query).await?;
        for run in &page.runs {
            let runnable = match run.status {
                RunStatus::Queued => true,
                RunStatus::Running => run.lease_until.is_some_and(|until| until <= now),
                RunStatus::Waiting => {
                    run.wake_at.is_some_and(|at| at <= now) || !store.inbox(run.run_id).await?.pending.is_empty()
                }
                _ => continue,
            };
            let at = match counts.iter().position(|c| c.workflow == run.workflow && c.status == run.status) {
                Some(at) => at,
                None => {
                    counts.push(RunCount::new(run.workflow.as_ref(), run.status, 0, 0));
                    counts.len() - 1
                }
            };
            counts[at].runs += 1;
            counts[at].runnable += u64::from(runnable);
        }
        match page.next {
            Some(next) => query.before = Some(next),
            None => break,
        }
    }
    counts.sort_by(|a, b| (&a.workflow, a.status.as_str()).cmp(&(&b.workflow, b.status.as_str())));
    Ok(counts)
}
