//! The shapes of transition and guard methods, and what the macro reads of them.

use syn::{Attribute, FnArg, Ident, ImplItem, ItemImpl, ReturnType, Signature, Type};

use super::RawTransition;
use crate::ctxt::Ctxt;
use crate::parse::{TransitionArgs, guard_args, transition_args};

/// Removes `#[transition]` and `#[guard]` from the impl's items, returning what they
/// said and how many `#[transition]` attributes there were (parsed or not).
pub(super) fn strip_helpers(cx: &mut Ctxt, item: &mut ItemImpl) -> (Vec<RawTransition>, usize) {
    let mut raw = Vec::new();
    let mut transition_attrs = 0;
    for impl_item in &mut item.items {
        let (attrs, sig) = match impl_item {
            ImplItem::Fn(f) => (&mut f.attrs, Some(&f.sig)),
            ImplItem::Const(c) => (&mut c.attrs, None),
            ImplItem::Type(t) => (&mut t.attrs, None),
            ImplItem::Macro(m) => (&mut m.attrs, None),
            _ => continue,
        };
        let is_helper = |a: &Attribute| a.path().is_ident("transition") || a.path().is_ident("guard");
        let (helpers, kept): (Vec<Attribute>, Vec<Attribute>) = std::mem::take(attrs).into_iter().partition(is_helper);
        *attrs = kept;
        if helpers.is_empty() {
            continue;
        }
        let Some(sig) = sig else {
            cx.error_spanned_by(&helpers[0], "`#[transition]` and `#[guard]` go on methods of the impl block");
            continue;
        };
        let mut transition: Option<(Attribute, Option<TransitionArgs>)> = None;
        let mut guard: Option<(Attribute, Option<Ident>)> = None;
        for attr in helpers {
            if attr.path().is_ident("transition") {
                transition_attrs += 1;
                if transition.is_some() {
                    cx.error_spanned_by(
                        &attr,
                        "a method has one `#[transition]`; list several source places as `from = [A, B]`",
                    );
                    continue;
                }
                let args = transition_args(&attr).map_err(|e| cx.syn_error(e)).ok();
                transition = Some((attr, args));
            } else {
                if guard.is_some() {
                    cx.error_spanned_by(
                        &attr,
                        "a transition has one `#[guard]`; combine the conditions in one guard method",
                    );
                    continue;
                }
                let method = guard_args(&attr).map(|g| g.method).map_err(|e| cx.syn_error(e)).ok();
                guard = Some((attr, method));
            }
        }
        match (transition, guard) {
            (None, Some((attr, _))) => cx.error_spanned_by(
                &attr,
                "`#[guard]` goes on a `#[transition]` method; the guard method itself needs no attribute",
            ),
            (Some((attr, Some(args))), guard) => raw.push(RawTransition {
                method: sig.ident.clone(),
                args,
                attr,
                guard: guard.and_then(|(_, m)| m),
                sig: sig.clone(),
            }),
            _ => {}
        }
    }
    (raw, transition_attrs)
}

pub(super) fn typed_input(sig: &Signature, i: usize) -> Option<&Type> {
    match sig.inputs.iter().nth(i)? {
        FnArg::Typed(p) => Some(&p.ty),
        FnArg::Receiver(_) => None,
    }
}

pub(super) fn mut_ref_elem(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => Some(&r.elem),
        Type::Paren(p) => mut_ref_elem(&p.elem),
        Type::Group(g) => mut_ref_elem(&g.elem),
        _ => None,
    }
}

/// `T` in the transition method's `state: &mut T`, when it takes `&self` first.
pub(super) fn state_param(sig: &Signature) -> Option<&Type> {
    match sig.inputs.first() {
        Some(FnArg::Receiver(_)) => typed_input(sig, 1).and_then(mut_ref_elem),
        _ => None,
    }
}

pub(super) fn payload_param(sig: &Signature) -> Option<&Type> {
    typed_input(sig, 3)
}

const SHAPE: &str = "(&self, state: &mut State, cx: &mut RunContext)";
const WAIT_SHAPE: &str = "(&self, state: &mut State, cx: &mut RunContext, payload: T)";

/// How a transition fires, as its method's shape sees it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// By itself, when its guard holds.
    Plain,
    /// On a signal, with an optional payload (`wait`).
    Wait,
    /// After a delay, without a signal (`after = ".."`).
    Timer,
}

pub(super) fn check_transition_sig(cx: &mut Ctxt, sig: &Signature, kind: Kind) {
    let wait = kind == Kind::Wait;
    let shape = if wait { WAIT_SHAPE } else { SHAPE };
    if sig.asyncness.is_none() {
        cx.error_spanned_by(sig.fn_token, format!("a transition method is an `async fn{shape}`"));
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(&sig.generics, "a transition method cannot be generic");
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        Some(other) => {
            cx.error_spanned_by(other, format!("a transition method takes `&self` first: `{shape}`"));
            return;
        }
        None => {
            cx.error_spanned_by(&sig.ident, format!("a transition method takes `{shape}`"));
            return;
        }
    }
    let typed: Vec<&syn::PatType> = inputs
        .filter_map(|i| match i {
            FnArg::Typed(p) => Some(p),
            FnArg::Receiver(_) => None,
        })
        .collect();
    let expected = if wait { 3 } else { 2 };
    if typed.len() < 2 {
        cx.error_spanned_by(&sig.ident, format!("a transition method takes `{shape}`"));
        return;
    }
    if typed.len() == 3 && kind == Kind::Plain {
        cx.error_spanned_by(
            typed[2],
            "only a wait transition takes a payload: add `wait` to its `#[transition(..)]` or remove this parameter",
        );
        return;
    }
    if typed.len() == 3 && kind == Kind::Timer {
        cx.error_spanned_by(
            typed[2],
            "a timer transition takes no payload: it fires after its delay, without a signal; remove this parameter",
        );
        return;
    }
    if typed.len() > expected {
        cx.error_spanned_by(typed[expected], format!("a transition method takes `{shape}`"));
        return;
    }
    if mut_ref_elem(&typed[0].ty).is_none() {
        cx.error_spanned_by(&typed[0].ty, "the state parameter is `&mut State`");
    }
    if mut_ref_elem(&typed[1].ty).is_none() {
        cx.error_spanned_by(&typed[1].ty, "the context parameter is `&mut RunContext`");
    }
    if let Some(payload) = typed.get(2) {
        match &*payload.ty {
            Type::Reference(_) => {
                cx.error_spanned_by(&payload.ty, "the payload is deserialized from the signal's JSON and must be owned")
            }
            Type::ImplTrait(_) => cx.error_spanned_by(
                &payload.ty,
                "the payload is a concrete type, deserialized from the signal's JSON: a transition method cannot be \
                 generic",
            ),
            _ => {}
        }
    }
    if let ReturnType::Default = sig.output {
        cx.error_spanned_by(
            &sig.ident,
            "a transition method returns `Result<(), E>` with `E: Into<BoxError>`, such as `loopstack::Result`",
        );
    }
}

/// A timer's delay method, named by `after = Self::method`: its type is checked by
/// rustc where it is used; what is reported here is a shape that cannot be one.
pub(super) fn check_timer_sig(cx: &mut Ctxt, sig: &Signature) {
    const TIMER: &str = "a timer's delay method is a plain `fn(&self, state: &State) -> Duration`";
    if let Some(a) = &sig.asyncness {
        cx.error_spanned_by(a, format!("{TIMER}, not `async`: the run's wake time is set when it parks"));
        return;
    }
    let inputs: Vec<&FnArg> = sig.inputs.iter().collect();
    let receiver_ok =
        matches!(inputs.first(), Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none());
    if !receiver_ok || inputs.len() != 2 {
        cx.error_spanned_by(&sig.ident, TIMER);
        return;
    }
    if let FnArg::Typed(p) = inputs[1]
        && !matches!(&*p.ty, Type::Reference(r) if r.mutability.is_none())
    {
        cx.error_spanned_by(&p.ty, format!("{TIMER}: it reads the state through `&State`"));
        return;
    }
    if let ReturnType::Default = sig.output {
        cx.error_spanned_by(&sig.ident, TIMER);
    }
}

pub(super) fn check_guard_sig(cx: &mut Ctxt, sig: &Signature) {
    const GUARD: &str = "a guard method is a plain `fn(&self, state: &State) -> bool`";
    if let Some(a) = &sig.asyncness {
        cx.error_spanned_by(a, format!("{GUARD}, not `async`"));
        return;
    }
    let inputs: Vec<&FnArg> = sig.inputs.iter().collect();
    let receiver_ok =
        matches!(inputs.first(), Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none());
    if !receiver_ok || inputs.len() != 2 {
        cx.error_spanned_by(&sig.ident, GUARD);
        return;
    }
    if let FnArg::Typed(p) = inputs[1]
        && !matches!(&*p.ty, Type::Reference(r) if r.mutability.is_none())
    {
        cx.error_spanned_by(&p.ty, format!("{GUARD}: it reads the state through `&State`"));
        return;
    }
    if let ReturnType::Default = sig.output {
        cx.error_spanned_by(&sig.ident, GUARD);
    }
}
