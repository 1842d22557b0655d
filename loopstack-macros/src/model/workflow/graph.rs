//! The graph check: the table by the rules the runtime routes by, its problems as
//! errors at the user's tokens.

use syn::{Ident, ItemImpl};

use super::{Place, Transition};
use crate::ctxt::Ctxt;
use loopstack_graph::Problem;

/// Checks the table (places, transitions) by the rules the runtime routes and checks
/// by, and reports each problem. A timer waits like a wait transition: it shadows
/// nothing and is an edge like any other. `end_refs` are the `End` identifiers a
/// transition names in its `from`, for the error of a transition that leaves `End`.
pub(super) fn check(
    cx: &mut Ctxt,
    places: &[Place],
    transitions: &[Transition],
    end_refs: &[Option<Ident>],
    item: &ItemImpl,
) {
    let place_names: Vec<&str> = places.iter().map(|p| p.name.as_str()).collect();
    let method_names: Vec<String> = transitions.iter().map(|t| t.method.to_string()).collect();
    let from_names: Vec<Vec<&str>> =
        transitions.iter().map(|t| t.from.iter().map(|&p| place_names[p]).collect()).collect();
    let graph: Vec<loopstack_graph::Transition<'_>> = transitions
        .iter()
        .zip(&method_names)
        .zip(&from_names)
        .map(|((t, name), from)| loopstack_graph::Transition {
            name,
            from,
            to: place_names[t.to],
            priority: t.priority.unwrap_or(0),
            guarded: t.guard.is_some(),
            waits: t.wait || t.is_timer(),
        })
        .collect();
    for problem in loopstack_graph::problems(&place_names, &graph) {
        report(cx, problem, places, transitions, end_refs, item);
    }
}

/// The table's names as the user wrote them: `Start`, `PromptExecuted`, the methods.
struct Written<'a> {
    places: &'a [Place],
    transitions: &'a [Transition],
}

impl loopstack_graph::Names for Written<'_> {
    fn place(&self, place: usize) -> String {
        self.places[place].ident.to_string()
    }
    fn transition(&self, transition: usize) -> String {
        self.transitions[transition].method.to_string()
    }
    fn start(&self) -> &str {
        "Start"
    }
    fn end(&self) -> &str {
        "End"
    }
    fn is_timer(&self, transition: usize) -> bool {
        self.transitions[transition].is_timer()
    }
}

/// Turns a problem of the table into an error at the user's tokens: its message
/// ([`Problem::message`]) and, where the attributes can fix it, how.
fn report(
    cx: &mut Ctxt,
    problem: Problem<'_>,
    places: &[Place],
    transitions: &[Transition],
    end_refs: &[Option<Ident>],
    item: &ItemImpl,
) {
    let message = problem.message(&Written { places, transitions });
    let place = |p: usize| &places[p].ident;
    match problem {
        // Places come from the transitions' own identifiers, `Start` and `End` always
        // among them, each stored name once (a collision is an error before this).
        Problem::MissingPlace { .. } => cx.error_spanned_by(&item.self_ty, format!("internal error: {message}")),
        Problem::DuplicatePlace { place: p } => cx.error_spanned_by(place(p), format!("internal error: {message}")),
        Problem::UnknownPlace { transition, .. } => {
            cx.error_spanned_by(&transitions[transition].method, format!("internal error: {message}"));
        }
        Problem::LeavesEnd { transition } => {
            let t = &transitions[transition];
            let span = end_refs[transition].as_ref().map_or_else(|| t.method.span(), Ident::span);
            cx.error_at(span, message);
        }
        Problem::NoWayOutOfStart => cx.error_spanned_by(
            &item.self_ty,
            format!(
                "{message}; the first transition method needs `#[transition(to = ..)]` (`from` defaults to `Start`)"
            ),
        ),
        Problem::NoWayIntoEnd => cx.error_spanned_by(
            &item.self_ty,
            format!("{message}; the last transition method needs `#[transition(from = .., to = End)]`"),
        ),
        Problem::Unreachable { place: p } => cx.error_spanned_by(place(p), message),
        Problem::CannotEnd { place: p, dead_end } => {
            let fix = if dead_end {
                String::new()
            } else {
                format!(": add a transition from `{}` or a place it leads to toward `End`", place(p))
            };
            cx.error_spanned_by(place(p), format!("{message}{fix}"));
        }
        Problem::Shadowed { transition, .. } => cx.error_spanned_by(
            &transitions[transition].method,
            format!("{message}; give it a `#[guard(..)]` or order them with `priority`"),
        ),
        Problem::WaitShadowed { transition, .. } => cx.error_spanned_by(&transitions[transition].method, message),
    }
}
