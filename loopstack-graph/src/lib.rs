//! The graph rules of a loopstack workflow's transition table, kept in one place.
//!
//! `loopstack-core` routes runs in the order [`order`] gives and checks hand-written
//! tables with [`problems`]; `#[workflow]` checks every table at compile time with the
//! same [`problems`], turning each [`Problem`] into an error at the user's tokens;
//! both word a problem by [`Problem::message`]. So a table the macro accepts is one
//! `Definition::check` accepts, both say the same of one that is wrong, and both agree
//! on the order transitions are tried in.
//!
//! A table is described plainly: the names of its places (which must include
//! [`START`] and [`END`]) and its [`Transition`]s in declaration order. Problems name
//! places and transitions by their index in those two slices.
//!
//! ```
//! use loopstack_graph::{END, Problem, START, Transition, order, problems};
//!
//! let t = |name: &'static str, from: &'static [&'static str], to: &'static str| Transition {
//!     name, from, to, priority: 0, guarded: false, waits: false,
//! };
//! let places = [START, "ready", END];
//! let transitions = [
//!     t("setup", &[START], "ready"),
//!     t("respond", &["ready"], END),
//!     Transition { priority: 5, guarded: true, ..t("retry", &["ready"], "ready") },
//! ];
//! // At `ready`, `retry` (priority 5) is tried before `respond`.
//! assert_eq!(order(&places, &transitions), [vec![0], vec![2, 1], vec![]]);
//! assert_eq!(problems(&places, &transitions), []);
//!
//! // Without its priority, `retry` would never fire: `respond` has no guard.
//! let transitions = [transitions[0], transitions[1], Transition { priority: 0, ..transitions[2] }];
//! assert_eq!(
//!     problems(&places, &transitions),
//!     [Problem::Shadowed { place: 1, transition: 2, by: 1, also: vec![] }]
//! );
//! ```

#![forbid(unsafe_code)]

/// The initial place of every workflow.
pub const START: &str = "start";
/// The terminal place of every workflow.
pub const END: &str = "end";

/// One transition of a table, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition<'a> {
    /// Its name. The rules do not look at it; it is here so that a [`Problem`]'s
    /// transition can be named from the description alone.
    pub name: &'a str,
    /// The places it leaves from.
    pub from: &'a [&'a str],
    /// The place it reaches.
    pub to: &'a str,
    /// Its priority: higher is tried first; a transition without one counts as 0.
    pub priority: i32,
    /// Whether it has a guard (so it may not fire when tried).
    pub guarded: bool,
    /// Whether it waits for something before it fires: a signal (a wait transition)
    /// or a delay (a timer transition). A waiting transition never fires on its own
    /// while the run is routed, so it shadows nothing.
    pub waits: bool,
}

impl Transition<'_> {
    /// Whether it leaves from `place`.
    pub fn leaves(&self, place: &str) -> bool {
        self.from.contains(&place)
    }
}

/// The indices of the transitions leaving `place`, in the order they are tried:
/// priority, highest first, then declaration order (a stable sort).
pub fn order_at(place: &str, transitions: &[Transition<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..transitions.len()).filter(|&i| transitions[i].leaves(place)).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(transitions[i].priority));
    order
}

/// For each place of `places`, [`order_at`] that place.
pub fn order(places: &[&str], transitions: &[Transition<'_>]) -> Vec<Vec<usize>> {
    places.iter().map(|p| order_at(p, transitions)).collect()
}

/// What is wrong with a table. Places and transitions are indices into the slices
/// given to [`problems`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem<'a> {
    /// The places do not list `place` ([`START`] or [`END`]).
    MissingPlace {
        /// [`START`] or [`END`].
        place: &'static str,
    },
    /// The places list `place` a second time (the index is the second listing).
    DuplicatePlace {
        /// The second listing.
        place: usize,
    },
    /// A transition names a place the places do not list.
    UnknownPlace {
        /// The transition.
        transition: usize,
        /// The name it uses.
        place: &'a str,
    },
    /// A transition leaves [`END`], where a run stops.
    LeavesEnd {
        /// The transition.
        transition: usize,
    },
    /// No transition leaves [`START`].
    NoWayOutOfStart,
    /// No transition reaches [`END`].
    NoWayIntoEnd,
    /// No run reaches this place: it is where a region that cannot be reached from
    /// [`START`] is entered (one place per region; a cycle without entry is reported
    /// at its first place).
    Unreachable {
        /// The place.
        place: usize,
    },
    /// A run that reaches this place can never reach [`END`]: it is where such a
    /// region ends (one place per region; a loop without exit is reported at its
    /// first place).
    CannotEnd {
        /// The place.
        place: usize,
        /// Whether no transition leaves it at all.
        dead_end: bool,
    },
    /// At `place`, transition `by` has no guard and does not wait, so it always fires
    /// when tried and `transition` (and the transitions in `also`), tried after it,
    /// never fire.
    Shadowed {
        /// The place.
        place: usize,
        /// The first transition that never fires.
        transition: usize,
        /// The unguarded transition tried first.
        by: usize,
        /// The others that never fire, in the order they would be tried.
        also: Vec<usize>,
    },
    /// At `place`, transition `by` has no guard and does not wait, so a run there
    /// never waits and the waiting `transition` (and those in `also`) never fire,
    /// whatever their priority.
    WaitShadowed {
        /// The place.
        place: usize,
        /// The first waiting transition that never fires.
        transition: usize,
        /// The unguarded transition that fires instead.
        by: usize,
        /// The other waiting transitions that never fire, in the order they are tried.
        also: Vec<usize>,
    },
}

/// How a [`Problem`]'s message names the parts of a table: as the table's author
/// wrote them (`#[workflow]` writes places as `Start` and `PromptExecuted`, a
/// hand-written table as `start` and `prompt_executed`).
pub trait Names {
    /// The place at `place` of the places given to [`problems`].
    fn place(&self, place: usize) -> String;
    /// The transition at `transition` of the transitions given to [`problems`].
    fn transition(&self, transition: usize) -> String;
    /// How the table writes [`START`].
    fn start(&self) -> &str;
    /// How the table writes [`END`].
    fn end(&self) -> &str;
    /// Whether the waiting transition at `transition` waits for a delay (a timer)
    /// rather than for a signal.
    fn is_timer(&self, transition: usize) -> bool;
}

impl Problem<'_> {
    /// The problem in one sentence, the one wording of it: `Definition::check` returns
    /// it as it is, and `#[workflow]` adds how to fix it in the attributes' terms.
    ///
    /// ```
    /// use loopstack_graph::{Names, Problem};
    ///
    /// struct Plain<'a>(&'a [&'a str], &'a [&'a str]);
    /// impl Names for Plain<'_> {
    ///     fn place(&self, p: usize) -> String { self.0[p].to_owned() }
    ///     fn transition(&self, t: usize) -> String { self.1[t].to_owned() }
    ///     fn start(&self) -> &str { "start" }
    ///     fn end(&self) -> &str { "end" }
    ///     fn is_timer(&self, _: usize) -> bool { false }
    /// }
    ///
    /// let names = Plain(&["start", "ready", "end"], &["setup", "respond", "retry", "again"]);
    /// let problem = Problem::Shadowed { place: 1, transition: 2, by: 1, also: vec![3] };
    /// assert_eq!(
    ///     problem.message(&names),
    ///     "transition `retry` from `ready` can never fire: `respond` has no guard and is tried first \
    ///      (neither can `again`)"
    /// );
    /// ```
    pub fn message(&self, names: &impl Names) -> String {
        let end = names.end();
        let neither = |also: &[usize]| {
            if also.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = also.iter().map(|&t| format!("`{}`", names.transition(t))).collect();
                format!(" (neither can {})", list.join(", "))
            }
        };
        match self {
            Self::MissingPlace { place } => {
                let place = if *place == START { names.start() } else { end };
                format!("the places do not list `{place}`")
            }
            Self::DuplicatePlace { place } => format!("place `{}` is listed twice", names.place(*place)),
            Self::UnknownPlace { transition, place } => {
                format!("transition `{}` names unknown place `{place}`", names.transition(*transition))
            }
            Self::LeavesEnd { transition } => {
                format!("transition `{}` leaves `{end}`; a run stops at `{end}`", names.transition(*transition))
            }
            Self::NoWayOutOfStart => format!("no transition leaves `{}`", names.start()),
            Self::NoWayIntoEnd => format!("no transition reaches `{end}`"),
            Self::Unreachable { place } => {
                format!("place `{}` cannot be reached from `{}`", names.place(*place), names.start())
            }
            Self::CannotEnd { place, dead_end } => {
                let why = if *dead_end { ": no transition leaves it" } else { "" };
                format!("`{end}` cannot be reached from place `{}`{why}", names.place(*place))
            }
            Self::Shadowed { place, transition, by, also } => format!(
                "transition `{}` from `{}` can never fire: `{}` has no guard and is tried first{}",
                names.transition(*transition),
                names.place(*place),
                names.transition(*by),
                neither(also),
            ),
            Self::WaitShadowed { place, transition, by, also } => {
                let (kind, what) =
                    if names.is_timer(*transition) { ("timer", "its delay") } else { ("wait", "a signal") };
                format!(
                    "{kind} transition `{}` from `{}` can never fire: `{}` has no guard and fires without waiting \
                     for {what}{}",
                    names.transition(*transition),
                    names.place(*place),
                    names.transition(*by),
                    neither(also),
                )
            }
        }
    }
}

/// Every problem of a table, each mistake reported once, in this order:
///
/// 1. the table's structure: [`START`] or [`END`] missing, a place listed twice,
///    unknown places, transitions leaving [`END`]; if there are any, nothing else;
/// 2. else, alone: no transition leaves [`START`], or else none reaches [`END`];
/// 3. else reachability: the entries of regions unreachable from [`START`], and the
///    last places of regions, reachable from [`START`], that cannot reach [`END`];
/// 4. and shadowing, per place in the order of `places`: the non-waiting
///    transitions tried after an unguarded non-waiting one, and the waiting ones
///    beside it.
pub fn problems<'a>(places: &[&'a str], transitions: &[Transition<'a>]) -> Vec<Problem<'a>> {
    let index = |name: &str| places.iter().position(|p| *p == name);
    let mut out = Vec::new();

    for place in [START, END] {
        if index(place).is_none() {
            out.push(Problem::MissingPlace { place });
        }
    }
    for (i, p) in places.iter().enumerate() {
        if index(p) != Some(i) {
            out.push(Problem::DuplicatePlace { place: i });
        }
    }
    for (transition, t) in transitions.iter().enumerate() {
        for &place in t.from.iter().chain(std::iter::once(&t.to)) {
            // A missing `start` or `end` is reported once, above.
            if index(place).is_none() && place != START && place != END {
                out.push(Problem::UnknownPlace { transition, place });
            }
        }
        if t.leaves(END) {
            out.push(Problem::LeavesEnd { transition });
        }
    }
    let (Some(start), Some(end)) = (index(START), index(END)) else { return out };
    if !out.is_empty() {
        return out;
    }
    if !transitions.iter().any(|t| t.leaves(START)) {
        return vec![Problem::NoWayOutOfStart];
    }
    if !transitions.iter().any(|t| t.to == END) {
        return vec![Problem::NoWayIntoEnd];
    }

    let n = places.len();
    let at = |name: &str| index(name).expect("checked above");
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for t in transitions {
        for from in t.from {
            succ[at(from)].push(at(t.to));
        }
    }
    // reach[p][q]: q can be reached from p (p reaches itself).
    let reach: Vec<Vec<bool>> = (0..n)
        .map(|p| {
            let mut seen = vec![false; n];
            let mut stack = vec![p];
            seen[p] = true;
            while let Some(x) = stack.pop() {
                for &y in &succ[x] {
                    if !seen[y] {
                        seen[y] = true;
                        stack.push(y);
                    }
                }
            }
            seen
        })
        .collect();
    let same_scc = |p: usize, q: usize| reach[p][q] && reach[q][p];

    // An unreachable region is reported where it is entered: at a place no other
    // unreachable place outside its cycle leads to.
    let unreachable: Vec<usize> = (0..n).filter(|&p| !reach[start][p]).collect();
    let mut reported: Vec<usize> = Vec::new();
    for &p in &unreachable {
        let entry = unreachable.iter().all(|&q| !reach[q][p] || same_scc(p, q));
        if entry && !reported.iter().any(|&r| same_scc(r, p)) {
            reported.push(p);
            out.push(Problem::Unreachable { place: p });
        }
    }
    // A region a run can reach but never leave toward `end` is reported where it
    // ends: at a place that leads to nothing outside its cycle. Unreachable places
    // are left out: they are reported above, and a run never stands there.
    let stuck: Vec<usize> = (0..n).filter(|&p| reach[start][p] && !reach[p][end]).collect();
    let mut reported: Vec<usize> = Vec::new();
    for &p in &stuck {
        let last = (0..n).all(|q| !reach[p][q] || same_scc(p, q));
        if last && !reported.iter().any(|&r| same_scc(r, p)) {
            reported.push(p);
            out.push(Problem::CannotEnd { place: p, dead_end: succ[p].is_empty() });
        }
    }

    for (place, name) in places.iter().enumerate() {
        let order = order_at(name, transitions);
        let Some(after) = order.iter().position(|&i| !transitions[i].waits && !transitions[i].guarded) else {
            continue;
        };
        let by = order[after];
        let shadowed: Vec<usize> = order[after + 1..].iter().copied().filter(|&i| !transitions[i].waits).collect();
        if let Some((&transition, also)) = shadowed.split_first() {
            out.push(Problem::Shadowed { place, transition, by, also: also.to_vec() });
        }
        // Routing fires the first enabled non-waiting transition before it considers
        // waiting: a waiting transition is shadowed wherever it stands in the order.
        let waits: Vec<usize> = order.iter().copied().filter(|&i| transitions[i].waits).collect();
        if let Some((&transition, also)) = waits.split_first() {
            out.push(Problem::WaitShadowed { place, transition, by, also: also.to_vec() });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t<'a>(from: &'a [&'a str], to: &'a str) -> Transition<'a> {
        Transition { name: "t", from, to, priority: 0, guarded: false, waits: false }
    }

    fn guarded(t: Transition<'_>) -> Transition<'_> {
        Transition { guarded: true, ..t }
    }

    fn waits(t: Transition<'_>) -> Transition<'_> {
        Transition { waits: true, ..t }
    }

    fn prio(priority: i32, t: Transition<'_>) -> Transition<'_> {
        Transition { priority, ..t }
    }

    #[test]
    fn a_sound_table_has_no_problems() {
        // start -> ready -> prompt -> tools -> ready; prompt -> end
        let places = [START, "ready", "prompt", "tools", END];
        let transitions = [
            t(&[START], "ready"),
            t(&["ready"], "prompt"),
            prio(10, guarded(t(&["prompt"], "tools"))),
            guarded(t(&["tools"], "ready")),
            t(&["prompt"], END),
        ];
        assert_eq!(problems(&places, &transitions), []);
    }

    #[test]
    fn routing_order_is_priority_then_declaration() {
        let transitions = [
            t(&["a"], "b"),
            prio(5, t(&["a"], "b")),
            prio(-1, t(&["a"], "b")),
            t(&[START, "a"], "b"),
            prio(5, t(&["a"], "b")),
        ];
        assert_eq!(order_at("a", &transitions), [1, 4, 0, 3, 2], "ties keep declaration order");
        assert_eq!(order_at(START, &transitions), [3]);
        assert_eq!(order(&[START, "a", "b"], &transitions), [vec![3], vec![1, 4, 0, 3, 2], vec![]]);
        // Waiting and guards do not change the order.
        let transitions = [waits(t(&["a"], "b")), prio(1, guarded(t(&["a"], "b"))), t(&["a"], "b")];
        assert_eq!(order_at("a", &transitions), [1, 0, 2]);
    }

    #[test]
    fn reachability_reports_the_entry_of_an_unreachable_region() {
        let places = [START, "p1", "p2", "p3", END];
        // p1 -> p2 -> p3 -> p2 are all unreachable; only p1, where the region is entered, is reported.
        let transitions =
            [t(&[START], END), t(&["p1"], "p2"), t(&["p2"], "p3"), guarded(t(&["p3"], "p2")), t(&["p3"], END)];
        assert_eq!(problems(&places, &transitions), [Problem::Unreachable { place: 1 }]);
        // A cycle with no entry is reported once, at its first place.
        let places = [START, "p1", "p2", END];
        let transitions = [t(&[START], END), t(&["p1"], "p2"), t(&["p2"], "p1")];
        assert_eq!(problems(&places, &transitions), [Problem::Unreachable { place: 1 }]);
    }

    #[test]
    fn reaching_end_reports_where_a_run_gets_stuck() {
        let places = [START, "p1", "p2", "p3", END];
        // p1 -> p2 -> p3 (no way out): only p3 is reported, not p1 and p2 upstream of it.
        let transitions = [t(&[START], "p1"), guarded(t(&["p1"], END)), t(&["p1"], "p2"), t(&["p2"], "p3")];
        assert_eq!(problems(&places, &transitions), [Problem::CannotEnd { place: 3, dead_end: true }]);
        // A loop without an exit is reported once.
        let places = [START, "p1", "p2", END];
        let transitions = [t(&[START], "p1"), guarded(t(&["p1"], END)), t(&["p1"], "p2"), t(&["p2"], "p2")];
        assert_eq!(problems(&places, &transitions), [Problem::CannotEnd { place: 2, dead_end: false }]);
        // Loops are fine while `end` stays reachable.
        let places = [START, "p1", END];
        let transitions = [t(&[START], "p1"), guarded(t(&["p1"], "p1")), t(&["p1"], END)];
        assert_eq!(problems(&places, &transitions), []);
    }

    #[test]
    fn unreachable_and_stuck_regions_are_both_reported() {
        // `island` cannot be reached (and cannot reach `end` either: reported once, as
        // unreachable); `trap` is reached and never left.
        let places = [START, "a", "island", "trap", END];
        let transitions = [
            t(&[START], "a"),
            guarded(t(&["a"], END)),
            t(&["a"], "trap"),
            t(&["trap"], "trap"),
            t(&["island"], "island"),
        ];
        assert_eq!(
            problems(&places, &transitions),
            [Problem::Unreachable { place: 2 }, Problem::CannotEnd { place: 3, dead_end: false }]
        );
    }

    #[test]
    fn structural_problems_come_alone() {
        let places = [START, "a", END];
        assert_eq!(problems(&places, &[t(&["a"], END)]), [Problem::NoWayOutOfStart]);
        assert_eq!(problems(&places, &[t(&[START], "a")]), [Problem::NoWayIntoEnd]);
        assert_eq!(
            problems(&[START, END], &[t(&[START], END), t(&[END], START)]),
            [Problem::LeavesEnd { transition: 1 }]
        );
    }

    #[test]
    fn unknown_and_missing_places() {
        let places = [START, "a", END];
        // Every unknown name, from and to, and nothing else.
        let transitions = [t(&[START], "b"), t(&["a", "c"], END), t(&["a"], "a")];
        assert_eq!(
            problems(&places, &transitions),
            [Problem::UnknownPlace { transition: 0, place: "b" }, Problem::UnknownPlace { transition: 1, place: "c" },]
        );
        // A missing `start` or `end` is one problem, not one per transition naming it.
        let transitions = [t(&[START], "a"), t(&["a"], END), t(&[START], END)];
        assert_eq!(problems(&[START, "a"], &transitions), [Problem::MissingPlace { place: END }]);
        assert_eq!(
            problems(&["a"], &transitions),
            [Problem::MissingPlace { place: START }, Problem::MissingPlace { place: END }]
        );
        // A place listed twice.
        assert_eq!(
            problems(&[START, "a", "a", END], &[t(&[START], "a"), t(&["a"], END)]),
            [Problem::DuplicatePlace { place: 2 }]
        );
        // Leaving `end` is structural too, reported beside unknown places.
        let transitions = [t(&[START], END), t(&[END], "x")];
        assert_eq!(
            problems(&[START, END], &transitions),
            [Problem::UnknownPlace { transition: 1, place: "x" }, Problem::LeavesEnd { transition: 1 }]
        );
    }

    #[test]
    fn shadowing() {
        let places = [START, "a", END];
        // An unguarded transition shadows every later non-waiting one from its place...
        let transitions = [t(&[START], END), guarded(t(&[START], "a")), t(&[START], END), t(&["a"], END)];
        assert_eq!(
            problems(&places, &transitions),
            [Problem::Shadowed { place: 0, transition: 1, by: 0, also: vec![2] }]
        );
        // ...unless priority puts the guarded one first.
        let transitions = [t(&[START], END), prio(1, guarded(t(&[START], "a"))), t(&["a"], END)];
        assert_eq!(problems(&places, &transitions), []);
        // Ties are broken by declaration order: the later unguarded one is shadowed.
        let transitions = [prio(2, t(&[START], END)), prio(2, t(&[START], "a")), t(&["a"], END)];
        assert_eq!(
            problems(&places, &transitions),
            [Problem::Shadowed { place: 0, transition: 1, by: 0, also: vec![] }]
        );
        // Guarded transitions shadow nothing.
        let transitions = [guarded(t(&[START], END)), guarded(t(&[START], "a")), t(&["a"], END)];
        assert_eq!(problems(&places, &transitions), []);
    }

    #[test]
    fn waiting_transitions_shadow_nothing_and_are_shadowed_by_unguarded_ones() {
        let places = [START, "a", END];
        // A wait or timer transition never fires beside an unguarded one, whatever its priority...
        let transitions =
            [t(&[START], "a"), t(&["a"], END), prio(9, waits(t(&["a"], END))), guarded(waits(t(&["a"], END)))];
        assert_eq!(
            problems(&places, &transitions),
            [Problem::WaitShadowed { place: 1, transition: 2, by: 1, also: vec![3] }]
        );
        // ...and both lists are reported at one place.
        let transitions = [t(&[START], "a"), t(&["a"], END), guarded(t(&["a"], END)), waits(t(&["a"], END))];
        assert_eq!(
            problems(&places, &transitions),
            [
                Problem::Shadowed { place: 1, transition: 2, by: 1, also: vec![] },
                Problem::WaitShadowed { place: 1, transition: 3, by: 1, also: vec![] },
            ]
        );
        // An unguarded waiting transition shadows nothing: the ones tried after it may fire.
        let transitions =
            [t(&[START], "a"), prio(5, waits(t(&["a"], END))), guarded(t(&["a"], END)), waits(t(&["a"], END))];
        assert_eq!(problems(&places, &transitions), []);
        // A place where everything waits is fine.
        let transitions = [t(&[START], "a"), waits(t(&["a"], END)), waits(t(&["a"], START))];
        assert_eq!(problems(&places, &transitions), []);
    }
}
