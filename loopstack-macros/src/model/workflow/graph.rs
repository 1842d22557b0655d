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
            waits: t.wait || t.after.is_some(),
        })
        .collect();
    for problem in loopstack_graph::problems(&place_names, &graph) {
        report(cx, problem, places, transitions, end_refs, item);
    }
}

fn names(transitions: &[Transition], list: &[usize]) -> String {
    list.iter().map(|&i| format!("`{}`", transitions[i].method)).collect::<Vec<_>>().join(", ")
}

/// Turns a problem of the table into an error at the user's tokens.
fn report(
    cx: &mut Ctxt,
    problem: Problem<'_>,
    places: &[Place],
    transitions: &[Transition],
    end_refs: &[Option<Ident>],
    item: &ItemImpl,
) {
    let place = |p: usize| &places[p].ident;
    match problem {
        // Places come from the transitions' own identifiers, `Start` and `End` always
        // among them, each stored name once (a collision is an error before this).
        Problem::MissingPlace { place } => {
            cx.error_spanned_by(&item.self_ty, format!("internal error: the table has no place `{place}`"));
        }
        Problem::DuplicatePlace { place: p } => {
            cx.error_spanned_by(place(p), format!("internal error: place `{}` is listed twice", place(p)));
        }
        Problem::UnknownPlace { transition, place } => cx.error_spanned_by(
            &transitions[transition].method,
            format!("internal error: transition `{}` names unknown place `{place}`", transitions[transition].method),
        ),
        Problem::LeavesEnd { transition } => {
            let t = &transitions[transition];
            let span = end_refs[transition].as_ref().map_or_else(|| t.method.span(), Ident::span);
            cx.error_at(span, format!("transition `{}` leaves `End`; a run stops at `End`", t.method));
        }
        Problem::NoWayOutOfStart => cx.error_spanned_by(
            &item.self_ty,
            "no transition leaves `Start`; the first transition method needs `#[transition(to = ..)]` \
             (`from` defaults to `Start`)",
        ),
        Problem::NoWayIntoEnd => cx.error_spanned_by(
            &item.self_ty,
            "no transition reaches `End`; the last transition method needs `#[transition(from = .., to = End)]`",
        ),
        Problem::Unreachable { place: p } => {
            cx.error_spanned_by(place(p), format!("place `{}` cannot be reached from `Start`", place(p)));
        }
        Problem::CannotEnd { place: p, dead_end } => {
            let why = if dead_end {
                "no transition leaves it".to_owned()
            } else {
                format!("add a transition from `{}` or a place it leads to toward `End`", place(p))
            };
            cx.error_spanned_by(place(p), format!("`End` cannot be reached from place `{}`: {why}", place(p)));
        }
        Problem::Shadowed { place: p, transition, by, also } => {
            let mut msg = format!(
                "transition `{}` from `{}` can never fire: `{}` has no guard and is tried first",
                transitions[transition].method,
                place(p),
                transitions[by].method,
            );
            if !also.is_empty() {
                msg.push_str(&format!(" (neither can {})", names(transitions, &also)));
            }
            msg.push_str("; give it a `#[guard(..)]` or order them with `priority`");
            cx.error_spanned_by(&transitions[transition].method, msg);
        }
        Problem::WaitShadowed { place: p, transition, by, also } => {
            let (kind, what) =
                if transitions[transition].after.is_some() { ("timer", "its delay") } else { ("wait", "a signal") };
            let mut msg = format!(
                "{kind} transition `{}` from `{}` can never fire: `{}` has no guard and fires without waiting for \
                 {what}",
                transitions[transition].method,
                place(p),
                transitions[by].method,
            );
            if !also.is_empty() {
                msg.push_str(&format!(" (neither can {})", names(transitions, &also)));
            }
            cx.error_spanned_by(&transitions[transition].method, msg);
        }
    }
}
