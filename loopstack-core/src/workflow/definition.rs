//! A workflow's table: its places and transitions ([`Definition`], [`TransitionDef`]), checked once.

use super::*;

/// Whether a payload reads as a wait transition's payload type, and why not.
pub type PayloadCheck = fn(&Value) -> Result<(), String>;

/// One row of a transition table.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransitionDef {
    /// The method's name, also the name of the signal that fires a wait transition.
    pub name: &'static str,
    /// The places it leaves from.
    pub from: &'static [&'static str],
    /// The place it reaches.
    pub to: &'static str,
    /// The priority; higher is tried first, none counts as 0.
    pub priority: Option<i32>,
    /// The guard method's name.
    pub guard: Option<&'static str>,
    /// Whether it fires only on a signal.
    pub wait: bool,
    /// The JSON Schema of a wait transition's payload.
    pub payload_schema: Option<fn() -> Value>,
    /// Whether a payload reads as the wait transition's payload type, and why not:
    /// checked before a signal is stored, so one that does not fit changes nothing.
    pub payload_check: Option<PayloadCheck>,
    /// For a timer transition: how long the run must have stood at the place before
    /// it fires (it fires on its own then, if its guard holds, without a signal).
    pub after: Option<std::time::Duration>,
    /// For a timer transition whose delay the workflow gives at run time
    /// ([`Workflow::timer`]), from its configuration or the run's state: the name of
    /// the method that computes it. Such a timer has no [`after`](Self::after).
    pub after_fn: Option<&'static str>,
}

impl PartialEq for TransitionDef {
    fn eq(&self, other: &Self) -> bool {
        // The payload schema function is left out: function addresses are not stable.
        self.name == other.name
            && self.from == other.from
            && self.to == other.to
            && self.priority == other.priority
            && self.guard == other.guard
            && self.wait == other.wait
            && self.after == other.after
            && self.after_fn == other.after_fn
    }
}

impl TransitionDef {
    /// A transition without priority, guard or wait.
    pub const fn new(name: &'static str, from: &'static [&'static str], to: &'static str) -> Self {
        Self {
            name,
            from,
            to,
            priority: None,
            guard: None,
            wait: false,
            payload_schema: None,
            payload_check: None,
            after: None,
            after_fn: None,
        }
    }

    /// Sets the priority.
    #[must_use]
    pub const fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the guard's name.
    #[must_use]
    pub const fn guard(mut self, guard: &'static str) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Marks it as a wait transition with a payload schema.
    #[must_use]
    pub const fn wait(mut self, payload_schema: fn() -> Value) -> Self {
        self.wait = true;
        self.payload_schema = Some(payload_schema);
        self
    }

    /// Sets the check of a wait transition's payload (`#[workflow]` sets it from the
    /// payload type): a signal whose payload fails it is refused before anything is
    /// stored.
    #[must_use]
    pub const fn check(mut self, payload_check: PayloadCheck) -> Self {
        self.payload_check = Some(payload_check);
        self
    }

    /// Makes it a timer transition: it fires once the run has stood at its place for
    /// `after` (and its guard holds), without a signal.
    #[must_use]
    pub const fn after(mut self, after: std::time::Duration) -> Self {
        self.after = Some(after);
        self
    }

    /// Makes it a timer transition whose delay the workflow gives when the run waits
    /// at its place ([`Workflow::timer`]), rather than one fixed in the table: `method`
    /// names what computes it (`#[workflow]` sets it for `after = Self::method`). The
    /// delay is read each time the run comes to wait there, and the wake time it
    /// gives is stored with the parked run: a delay that changes meanwhile (a new
    /// configuration) applies from the next park ([`Workflow::timer`]).
    #[must_use]
    pub const fn after_fn(mut self, method: &'static str) -> Self {
        self.after_fn = Some(method);
        self
    }

    /// Whether it is a timer transition: its delay fixed ([`after`](Self::after)) or
    /// given by the workflow ([`after_fn`](Self::after_fn)).
    pub fn is_timer(&self) -> bool {
        self.after.is_some() || self.after_fn.is_some()
    }

    /// Whether it fires on a signal or a timer rather than by itself.
    pub fn waits(&self) -> bool {
        self.wait || self.is_timer()
    }

    /// Whether it leaves from `place`.
    pub fn leaves(&self, place: &str) -> bool {
        self.from.contains(&place)
    }
}

/// A workflow's transition table: its places and transitions, in declaration order.
#[derive(Debug)]
pub struct Definition {
    name: &'static str,
    description: Option<&'static str>,
    places: &'static [&'static str],
    transitions: &'static [TransitionDef],
    version: u32,
    migrates_from: &'static [u32],
    agent: bool,
    order: OnceLock<Vec<Vec<Tried>>>,
    hash: OnceLock<String>,
}

/// A transition leaving a place, as routing tries it: its index and what kind it is,
/// so that routing reads no transition's definition but the one that fires (a step
/// routes from a place with a dozen transitions; their definitions are cold).
#[derive(Debug, Clone, Copy)]
struct Tried {
    index: usize,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Fires when its guard holds.
    Fire,
    /// Waits for a signal.
    Wait,
    /// Waits for a timer.
    Timer,
}

/// The routing decision at one place for one state.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// This transition fires.
    Fire {
        /// Its index in [`Definition::transitions`].
        index: usize,
        /// The transition.
        transition: &'static TransitionDef,
    },
    /// Nothing fires by itself; these wait transitions (signal names) are enabled,
    /// and so may be timer transitions ([`Definition::timers`]).
    Wait {
        /// The wait transitions' names.
        signals: Vec<&'static str>,
    },
    /// The place is `end`.
    End,
    /// Nothing is enabled and nothing waits: a dead end.
    DeadEnd {
        /// The guards that were false.
        false_guards: Vec<&'static str>,
    },
}

impl Route {
    /// The name of the transition that fires, if one does.
    pub fn transition_name(&self) -> Option<&'static str> {
        match self {
            Self::Fire { transition, .. } => Some(transition.name),
            _ => None,
        }
    }
}

/// A place name that a workflow does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workflow `{workflow}` has no place `{place}`; its places are: {}", .places.join(", "))]
pub struct UnknownPlace {
    /// The workflow.
    pub workflow: &'static str,
    /// The name asked for.
    pub place: String,
    /// The places it has.
    pub places: Vec<&'static str>,
}

impl Definition {
    /// A table. `places` lists every place, `start` first and `end` last.
    pub const fn new(
        name: &'static str,
        places: &'static [&'static str],
        transitions: &'static [TransitionDef],
    ) -> Self {
        Self {
            name,
            description: None,
            places,
            transitions,
            version: 1,
            migrates_from: &[],
            agent: false,
            order: OnceLock::new(),
            hash: OnceLock::new(),
        }
    }

    /// The table as version `version` of its workflow (1 by default): each run
    /// records the version it was started under, and a build drives the runs of its
    /// own version and of those it [migrates from](Definition::with_migrations).
    /// `#[workflow(version = N)]` sets it. It is not part of the
    /// [hash](Definition::hash).
    #[must_use]
    pub const fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// The older versions whose runs [`Workflow::migrate`] converts to this one
    /// (`#[workflow]` lists its `#[migrate(from = N)]` methods here).
    #[must_use]
    pub const fn with_migrations(mut self, from: &'static [u32]) -> Self {
        self.migrates_from = from;
        self
    }

    /// The workflow's version ([`Definition::with_version`]).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The older versions this table migrates runs from ([`Definition::with_migrations`]).
    pub fn migrates_from(&self) -> &'static [u32] {
        self.migrates_from
    }

    /// The table marked as an agent's ([`Definition::is_agent`]): the same name,
    /// places, transitions and hash. Made once and kept, as [`Definition::renamed`]
    /// does, and kept by the tables renamed or described from it.
    pub fn as_agent(&'static self) -> &'static Self {
        self.variant(self.name, self.description, true)
    }

    /// Whether the workflow is an agent ([`Definition::as_agent`]): its runs are
    /// traced as OpenTelemetry's `invoke_agent` operations rather than
    /// `invoke_workflow` ones (feature `otel`). It is not part of the
    /// [hash](Definition::hash).
    pub fn is_agent(&self) -> bool {
        self.agent
    }

    /// Whether a run of `version` is one this table drives: its own version, or
    /// one it migrates from.
    pub fn drives_version(&self, version: u32) -> bool {
        version == self.version || self.migrates_from.contains(&version)
    }

    /// The table with a description of the workflow: what it does, for people and
    /// for clients that list workflows as tools (the MCP server). `#[workflow]`
    /// sets it from the impl block's doc comment. It is not part of the
    /// [hash](Definition::hash): rewording it does not change the table.
    #[must_use]
    pub const fn with_description(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }

    /// The workflow's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What the workflow does, when its table says ([`Definition::with_description`],
    /// [`Definition::described`]).
    pub fn description(&self) -> Option<&'static str> {
        self.description
    }

    /// This table under another name: the same places and transitions, for
    /// values of one workflow type that run as workflows of their own, such as
    /// named agents (`Agent::named`), with its description. Its [hash](Definition::hash) covers the
    /// name, like any table's. Each name of a table is made once and kept for the
    /// life of the process, so asking again returns the same table.
    ///
    /// ```
    /// use loopstack_core::{Definition, END, START, TransitionDef};
    ///
    /// static TABLE: Definition = Definition::new("agent", &[START, END], &[TransitionDef::new("go", &[START], END)]);
    /// let billing = TABLE.renamed("billing");
    /// assert_eq!((billing.name(), billing.places()), ("billing", TABLE.places()));
    /// assert!(std::ptr::eq(billing, TABLE.renamed("billing")));
    /// assert!(std::ptr::eq(TABLE.renamed("agent"), &TABLE));
    /// ```
    pub fn renamed(&'static self, name: &str) -> &'static Self {
        self.variant(name, self.description, self.agent)
    }

    /// This table with another description ([`Definition::description`]): the same
    /// name, places and transitions, and so the same hash. Made once per
    /// description and kept, as [`Definition::renamed`] does.
    ///
    /// ```
    /// use loopstack_core::{Definition, END, START, TransitionDef};
    ///
    /// static TABLE: Definition = Definition::new("agent", &[START, END], &[TransitionDef::new("go", &[START], END)]);
    /// let billing = TABLE.renamed("billing").described("Answers billing questions.");
    /// assert_eq!((billing.name(), billing.description()), ("billing", Some("Answers billing questions.")));
    /// assert_eq!(billing.hash(), TABLE.renamed("billing").hash());
    /// assert_eq!(billing.renamed("billing2").description(), Some("Answers billing questions."));
    /// ```
    pub fn described(&'static self, description: &str) -> &'static Self {
        self.variant(self.name, Some(description), self.agent)
    }

    /// This table's places and transitions under `name` and `description`, marked
    /// an agent's or not, made once and kept.
    fn variant(&'static self, name: &str, description: Option<&str>, agent: bool) -> &'static Self {
        static VARIANTS: std::sync::Mutex<Vec<&'static Definition>> = std::sync::Mutex::new(Vec::new());
        if name == self.name && description == self.description && agent == self.agent {
            return self;
        }
        let mut variants = VARIANTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let same_table =
            |d: &&&'static Self| std::ptr::eq(d.places, self.places) && std::ptr::eq(d.transitions, self.transitions);
        if let Some(found) = variants
            .iter()
            .filter(same_table)
            .find(|d| d.name == name && d.description == description && d.agent == agent)
        {
            return found;
        }
        let name: &'static str =
            if name == self.name { self.name } else { Box::leak(name.to_owned().into_boxed_str()) };
        let description = match description {
            Some(d) if Some(d) == self.description => self.description,
            Some(d) => Some(&*Box::leak(d.to_owned().into_boxed_str())),
            None => None,
        };
        let mut table = Self::new(name, self.places, self.transitions);
        table.description = description;
        table.version = self.version;
        table.migrates_from = self.migrates_from;
        table.agent = agent;
        let table: &'static Self = Box::leak(Box::new(table));
        variants.push(table);
        table
    }

    /// A stable hash of the table (FNV-1a over its places and transitions with their
    /// places, priorities, guards and wait marks), as 16 hex digits. Stores keep it
    /// with each run, so resuming a run whose place a later build removed names both
    /// tables. It is the same on every platform and build.
    pub fn hash(&self) -> &str {
        self.hash.get_or_init(|| {
            let mut h = Fnv::default();
            h.str(self.name);
            for p in self.places {
                h.str(p);
            }
            h.byte(0xff);
            for t in self.transitions {
                h.str(t.name);
                for f in t.from {
                    h.str(f);
                }
                h.byte(0xfe);
                h.str(t.to);
                match t.priority {
                    Some(p) => h.bytes(&p.to_le_bytes()),
                    None => h.byte(0xfd),
                }
                h.str(t.guard.unwrap_or("\u{0}"));
                h.byte(u8::from(t.wait));
                if let Some(after) = t.after {
                    h.bytes(&after.as_millis().to_le_bytes());
                }
                // Only when set, so that the hash of a table without one is unchanged.
                if let Some(method) = t.after_fn {
                    h.byte(0xfc);
                    h.str(method);
                }
            }
            format!("{:016x}", h.0.finish())
        })
    }

    /// Every place, as stable snake_case names.
    pub fn places(&self) -> &'static [&'static str] {
        self.places
    }

    /// Every transition, in declaration order.
    pub fn transitions(&self) -> &'static [TransitionDef] {
        self.transitions
    }

    /// The transition with this method name.
    pub fn transition(&self, name: &str) -> Option<(usize, &'static TransitionDef)> {
        self.transitions.iter().enumerate().find(|(_, t)| t.name == name)
    }

    /// The static name of a place, or an error naming the places that exist.
    pub fn place(&self, place: &str) -> Result<&'static str, UnknownPlace> {
        self.places.iter().copied().find(|p| *p == place).ok_or_else(|| UnknownPlace {
            workflow: self.name,
            place: place.to_owned(),
            places: self.places.to_vec(),
        })
    }

    /// For each place, the transitions leaving it (index and kind), in the order
    /// they are tried ([`loopstack_graph::order`]: priority, highest first, then
    /// declaration order), computed once per table.
    fn order(&self) -> &[Vec<Tried>] {
        self.order.get_or_init(|| {
            let kind = |t: &TransitionDef| match (t.is_timer(), t.wait) {
                (true, _) => Kind::Timer,
                (false, true) => Kind::Wait,
                (false, false) => Kind::Fire,
            };
            loopstack_graph::order(self.places, &self.graph())
                .into_iter()
                .map(|leaving| {
                    leaving.into_iter().map(|index| Tried { index, kind: kind(&self.transitions[index]) }).collect()
                })
                .collect()
        })
    }

    /// The table as the graph rules see it.
    fn graph(&self) -> Vec<loopstack_graph::Transition<'static>> {
        self.transitions
            .iter()
            .map(|t| loopstack_graph::Transition {
                name: t.name,
                from: t.from,
                to: t.to,
                priority: t.priority.unwrap_or(0),
                guarded: t.guard.is_some(),
                waits: t.waits(),
            })
            .collect()
    }

    /// The transitions leaving `place`, in the order they are tried.
    pub fn leaving(
        &self,
        place: &str,
    ) -> Result<impl Iterator<Item = (usize, &'static TransitionDef)> + '_, UnknownPlace> {
        let p = self.place_index(place)?;
        let transitions = self.transitions;
        Ok(self.order()[p].iter().map(move |t| (t.index, &transitions[t.index])))
    }

    fn place_index(&self, place: &str) -> Result<usize, UnknownPlace> {
        // The run loop passes the table's own names: found by address first, without
        // comparing text.
        let same = |p: &&str| std::ptr::eq(p.as_ptr(), place.as_ptr()) && p.len() == place.len();
        let found = self.places.iter().position(same).or_else(|| self.places.iter().position(|p| *p == place));
        found.ok_or_else(|| UnknownPlace { workflow: self.name, place: place.to_owned(), places: self.places.to_vec() })
    }

    /// Decides what happens at `place`: the first enabled non-wait transition by
    /// priority then declaration order fires; else enabled wait transitions make the
    /// run wait; else it is a dead end (or `end`).
    pub fn route(&self, place: &str, mut guard: impl FnMut(usize) -> bool) -> Result<Route, UnknownPlace> {
        let p = self.place_index(place)?;
        if self.places[p] == END {
            return Ok(Route::End);
        }
        // Which guards were false, by position in the order: a dead end names them,
        // and the common case (a transition fires) allocates nothing for them.
        let order = &self.order()[p];
        let mut false_bits: u64 = 0;
        let mut false_overflow: Vec<&'static str> = Vec::new();
        let mut note_false = |pos: usize, i: usize| {
            if let Some(g) = self.transitions[i].guard {
                if pos < 64 {
                    false_bits |= 1 << pos;
                } else {
                    false_overflow.push(g);
                }
            }
        };
        let mut signals = Vec::new();
        let mut timers = false;
        for (pos, &Tried { index: i, kind }) in order.iter().enumerate() {
            let holds = guard(i);
            match kind {
                // Timers make the run wait; the runtime fires them when they are due.
                Kind::Timer if holds => timers = true,
                Kind::Wait if holds => signals.push(self.transitions[i].name),
                Kind::Fire if holds => return Ok(Route::Fire { index: i, transition: &self.transitions[i] }),
                _ => note_false(pos, i),
            }
        }
        if signals.is_empty() && !timers {
            let mut false_guards: Vec<&'static str> = order
                .iter()
                .enumerate()
                .filter(|&(pos, _)| pos < 64 && false_bits & (1 << pos) != 0)
                .filter_map(|(_, t)| self.transitions[t.index].guard)
                .collect();
            false_guards.extend(false_overflow);
            Ok(Route::DeadEnd { false_guards })
        } else {
            Ok(Route::Wait { signals })
        }
    }

    /// The timer transitions leaving `place` whose guard holds, with their delays, in
    /// the order they are tried. A timer whose delay the workflow gives
    /// ([`TransitionDef::after_fn`]) has none in the table and is left out:
    /// [`WorkflowExt::timers`] asks the workflow for it.
    pub fn timers(
        &self,
        place: &str,
        guard: impl FnMut(usize) -> bool,
    ) -> Result<Vec<(usize, std::time::Duration)>, UnknownPlace> {
        self.timers_with(place, guard, |i| self.transitions[i].after)
    }

    /// The timer transitions leaving `place` whose guard holds, with the delays
    /// `delay` gives them (by index, as [`Workflow::timer`] does), in the order they
    /// are tried; one it gives none is left out. `delay` is called for timers only,
    /// and only once their guard holds.
    pub fn timers_with(
        &self,
        place: &str,
        mut guard: impl FnMut(usize) -> bool,
        mut delay: impl FnMut(usize) -> Option<std::time::Duration>,
    ) -> Result<Vec<(usize, std::time::Duration)>, UnknownPlace> {
        Ok(self
            .leaving(place)?
            .filter(|(i, t)| t.is_timer() && guard(*i))
            .filter_map(|(i, _)| delay(i).map(|after| (i, after)))
            .collect())
    }

    /// A Mermaid `stateDiagram-v2` of the table: guards, priorities and wait marks as
    /// labels; `start` and `end` drawn as `[*]`.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("stateDiagram-v2\n");
        for t in self.transitions {
            for from in t.from {
                let from = if *from == START { "[*]" } else { from };
                let to = if t.to == END { "[*]" } else { t.to };
                let _ = write!(out, "    {from} --> {to}: {}", t.name);
                if let Some(g) = t.guard {
                    let _ = write!(out, " [{g}]");
                }
                if let Some(p) = t.priority {
                    let _ = write!(out, " (priority {p})");
                }
                if t.wait {
                    out.push_str(" (wait)");
                }
                if let Some(after) = t.after {
                    let _ = write!(out, " (after {})", fmt_duration(after));
                }
                if let Some(method) = t.after_fn {
                    let _ = write!(out, " (after {method})");
                }
                out.push('\n');
            }
        }
        out
    }

    /// Checks a hand-written table with the rules `#[workflow]` checks one with at
    /// compile time ([`loopstack_graph::problems`]): places exist (`start` and `end`
    /// among them, each listed once) and nothing leaves `end`; `start` has a way out
    /// and `end` a way in; every place is reachable from `start` and can reach `end`
    /// (each region reported once, where it is entered or where it ends); and no
    /// unguarded transition shadows a later one, nor a wait or timer transition
    /// beside it.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let errors: Vec<String> =
            loopstack_graph::problems(self.places, &self.graph()).iter().map(|p| p.message(self)).collect();
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }
}

/// A hand-written table names its parts by their stored names.
impl loopstack_graph::Names for Definition {
    fn place(&self, place: usize) -> String {
        self.places[place].to_owned()
    }
    fn transition(&self, transition: usize) -> String {
        self.transitions[transition].name.to_owned()
    }
    fn start(&self) -> &str {
        START
    }
    fn end(&self) -> &str {
        END
    }
    fn is_timer(&self, transition: usize) -> bool {
        self.transitions[transition].is_timer()
    }
}

/// A duration as the diagram prints it: `48h`, `90s`, `1500ms`.
fn fmt_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".to_owned(),
        ms if ms % 86_400_000 == 0 => format!("{}d", ms / 86_400_000),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// 64-bit FNV-1a, for [`Definition::hash`]: stable across builds, unlike std's hasher.
#[derive(Default)]
struct Fnv(crate::fnv::Fnv1a<u64>);

impl Fnv {
    fn byte(&mut self, b: u8) {
        self.0.byte(b);
    }
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.bytes(bytes);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
        self.byte(0);
    }
}
