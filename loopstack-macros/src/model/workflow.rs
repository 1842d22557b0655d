//! The model of `#[workflow]`: an impl block whose methods carry `#[transition]` and
//! `#[guard]`, checked as a state machine.

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::spanned::Spanned as _;
use syn::{Attribute, FnArg, Ident, ImplItem, ItemImpl, Path, ReturnType, Signature, Type};

use super::{cfg_attrs, default_crate, error_type_span, last_segment};
use crate::ctxt::Ctxt;
use crate::duration::parse_millis;
use crate::names::{is_upper_camel, pascal_case, snake_case};
use crate::parse::{self, TransitionArgs, WorkflowArgs, guard_args, transition_args};
use loopstack_graph::Problem;

pub(crate) const START: usize = 0;

/// A checked `#[workflow]`.
pub(crate) struct WorkflowModel {
    pub(crate) krate: Path,
    pub(crate) name: String,
    /// The impl block's doc comment: the table's description.
    pub(crate) description: Option<crate::docs::Text>,
    /// The impl block with `#[transition]` and `#[guard]` removed.
    pub(crate) item: ItemImpl,
    /// `ToolCallWorkflowPlace`.
    pub(crate) enum_ident: Ident,
    pub(crate) state: Type,
    /// `input = T`; `None` means the state type.
    pub(crate) input: Option<Type>,
    /// `definition = path`: a method `fn(&self, &'static Definition) -> &'static
    /// Definition` that picks the table a value uses (the macro's own, or one
    /// renamed from it).
    pub(crate) definition: Option<syn::Path>,
    /// `Start` first, `End` last, the others in order of first appearance.
    pub(crate) places: Vec<Place>,
    pub(crate) transitions: Vec<Transition>,
    pub(crate) guards: Vec<GuardMethod>,
    /// The `<Type>Signal` enum; `None` when it is not generated (a payload names one of
    /// the impl's generic parameters).
    pub(crate) signal: Option<SignalEnum>,
    pub(crate) cfgs: Vec<Attribute>,
}

#[derive(Clone)]
#[cfg_attr(test, derive(Debug))]
pub(crate) struct Place {
    /// The identifier as first written (`Start` when defaulted, spanned at the attribute).
    pub(crate) ident: Ident,
    /// The stored name: `prompt_executed`.
    pub(crate) name: String,
}

pub(crate) struct Transition {
    pub(crate) method: Ident,
    pub(crate) from: Vec<usize>,
    pub(crate) to: usize,
    pub(crate) priority: Option<i32>,
    /// An index into [`WorkflowModel::guards`].
    pub(crate) guard: Option<usize>,
    /// Whether it fires on a signal.
    pub(crate) wait: bool,
    /// A wait transition's payload type, with `Self` written as the workflow type (the
    /// table and the signal enum are outside the impl); `None` for one that takes no
    /// payload.
    pub(crate) payload: Option<Type>,
    /// A timer transition's delay, in milliseconds.
    pub(crate) after: Option<u64>,
    /// Spans of the user's state and context parameter types and of the return type.
    pub(crate) state_span: Span,
    pub(crate) cx_span: Span,
    pub(crate) output_span: Span,
}

/// The typed signals of a workflow: `RefundDeskSignal`, one variant per wait transition.
#[derive(Clone)]
pub(crate) struct SignalEnum {
    pub(crate) ident: Ident,
    pub(crate) variants: Vec<SignalVariant>,
}

#[derive(Clone)]
pub(crate) struct SignalVariant {
    /// `HumanReview`, from the method `human_review`.
    pub(crate) ident: Ident,
    /// The signal's name: the method's, without `r#`.
    pub(crate) signal: String,
    /// The payload type (as [`Transition::payload`]); `None` for a unit variant.
    pub(crate) payload: Option<Type>,
    /// The stored names of the places it leaves from and reaches, for its docs.
    pub(crate) from: Vec<String>,
    pub(crate) to: String,
}

pub(crate) struct GuardMethod {
    /// The method's name where it is defined.
    pub(crate) method: Ident,
    /// Its name in the first `#[guard(..)]` naming it.
    pub(crate) reference: Ident,
}

/// What is emitted when a check failed: the stripped impl block plus, as far as they are
/// known, the place enum and a stub `Workflow` impl, so that code using the workflow does
/// not add errors of its own.
pub(crate) struct WorkflowFailure {
    pub(crate) error: syn::Error,
    pub(crate) item: TokenStream,
    pub(crate) stub: Option<WorkflowStub>,
}

pub(crate) struct WorkflowStub {
    pub(crate) krate: Path,
    pub(crate) item: ItemImpl,
    pub(crate) enum_ident: Ident,
    pub(crate) places: Vec<Place>,
    pub(crate) state: Option<Type>,
    pub(crate) input: Option<Type>,
    /// Known once every transition checked out (the table itself failed).
    pub(crate) signal: Option<SignalEnum>,
    pub(crate) cfgs: Vec<Attribute>,
}

/// One `#[transition]` as written, before places are numbered.
struct RawTransition {
    method: Ident,
    args: TransitionArgs,
    attr: Attribute,
    guard: Option<Ident>,
    sig: Signature,
}

impl WorkflowModel {
    pub(crate) fn from_syn(args: TokenStream, item: TokenStream) -> Result<Self, Box<WorkflowFailure>> {
        let mut cx = Ctxt::new();
        let args = match syn::parse2::<WorkflowArgs>(args) {
            Ok(a) => a,
            Err(e) => {
                cx.syn_error(e);
                WorkflowArgs::default()
            }
        };
        let krate = args.krate.as_ref().map_or_else(default_crate, |k| k.clone());
        let mut item = match parse::item(item.clone()) {
            parse::Item::Impl(imp) => imp,
            parse::Item::Fn(_) | parse::Item::Other => {
                cx.error_at(
                    Span::call_site(),
                    "`#[workflow]` goes on an inherent `impl` block whose methods carry `#[transition(..)]`",
                );
                let error = cx.check().expect_err("just recorded");
                return Err(Box::new(WorkflowFailure { error, item, stub: None }));
            }
        };
        let (raw, transition_attrs) = strip_helpers(&mut cx, &mut item);
        let cfgs = cfg_attrs(&item.attrs);
        let description = crate::docs::doc_text(&item.attrs);

        let fail = |cx: Ctxt, item: &ItemImpl, stub: Option<WorkflowStub>| {
            let error = cx.check().expect_err("an error was recorded");
            Box::new(WorkflowFailure { error, item: item.to_token_stream(), stub })
        };
        if let Some((_, path, _)) = &item.trait_ {
            cx.error_spanned_by(
                path,
                "`#[workflow]` goes on an inherent impl block (`impl MyWorkflow { .. }`); it writes the \
                 `Workflow` impl itself",
            );
            return Err(fail(cx, &item, None));
        }
        let Some(type_ident) = last_segment(&item.self_ty).map(|s| s.ident.clone()) else {
            cx.error_spanned_by(&item.self_ty, "`#[workflow]` needs a named type here, such as `impl MyWorkflow`");
            return Err(fail(cx, &item, None));
        };
        let enum_ident =
            Ident::new(&format!("{}Place", type_ident.to_string().trim_start_matches("r#")), type_ident.span());
        let name = match &args.name {
            Some(lit) => {
                let name = lit.value();
                if name.is_empty() {
                    cx.error_spanned_by(lit, "the workflow name is empty");
                }
                name
            }
            None => snake_case(&type_ident.to_string()),
        };

        // Shapes of transition and guard methods; timers.
        let mut after_ms: Vec<Option<u64>> = Vec::new();
        for t in &raw {
            let kind = match (&t.args.wait, &t.args.after) {
                (Some(()), _) => Kind::Wait,
                (None, Some(_)) => Kind::Timer,
                (None, None) => Kind::Plain,
            };
            check_transition_sig(&mut cx, &t.sig, kind);
            after_ms.push(t.args.after.as_ref().and_then(|after| {
                if t.args.wait.is_some() {
                    cx.error_at(
                        after.key,
                        "a transition fires on a signal (`wait`) or after a delay (`after`), not both; a timer \
                         beside a wait transition is a transition of its own from the same place",
                    );
                    return None;
                }
                parse_millis(&after.value.value()).map_err(|e| cx.error_spanned_by(&after.value, e)).ok()
            }));
        }
        let methods: HashMap<String, &Signature> = item
            .items
            .iter()
            .filter_map(|i| match i {
                ImplItem::Fn(f) => Some((f.sig.ident.to_string(), &f.sig)),
                _ => None,
            })
            .collect();
        let mut guards: Vec<GuardMethod> = Vec::new();
        let mut guard_of: Vec<Option<usize>> = Vec::new();
        for t in &raw {
            let Some(reference) = &t.guard else {
                guard_of.push(None);
                continue;
            };
            if let Some(i) = guards.iter().position(|g| g.method == *reference) {
                guard_of.push(Some(i));
                continue;
            }
            match methods.get(&reference.to_string()) {
                None => {
                    cx.error_spanned_by(
                        reference,
                        format!(
                            "no method `{reference}` in this impl; a guard names a `fn(&self, &State) -> bool` \
                             method of the `#[workflow]` impl block"
                        ),
                    );
                    guard_of.push(None);
                }
                Some(sig) => {
                    check_guard_sig(&mut cx, sig);
                    guards.push(GuardMethod { method: sig.ident.clone(), reference: reference.clone() });
                    guard_of.push(Some(guards.len() - 1));
                }
            }
        }

        // Places, in order of first appearance.
        let start = |span| Ident::new("Start", span);
        let mut places: Vec<Place> =
            vec![Place { ident: start(Span::call_site()), name: loopstack_graph::START.into() }];
        let mut start_seen = false;
        let mut end: Option<Ident> = None;
        let mut place_index = |cx: &mut Ctxt, ident: &Ident, places: &mut Vec<Place>| -> usize {
            let text = ident.to_string();
            if text == "Start" {
                if !start_seen {
                    places[START].ident = ident.clone();
                    start_seen = true;
                }
                return START;
            }
            if text == "End" {
                end.get_or_insert_with(|| ident.clone());
                return usize::MAX;
            }
            if let Some(i) = places.iter().position(|p| p.ident == *ident) {
                return i;
            }
            if !is_upper_camel(&text) {
                let suggestion = pascal_case(&text);
                cx.error_spanned_by(
                    ident,
                    format!("places are UpperCamelCase identifiers: write `{suggestion}` for `{text}`"),
                );
            }
            let name = snake_case(&text);
            if let Some(other) = places.iter().find(|p| p.name == name) {
                cx.error_spanned_by(
                    ident,
                    format!("places `{}` and `{text}` would both be stored as `{name}`", other.ident),
                );
            }
            places.push(Place { ident: ident.clone(), name });
            places.len() - 1
        };
        struct Numbered {
            from: Vec<(usize, Ident)>,
            to: Option<usize>,
        }
        let mut numbered = Vec::new();
        for t in &raw {
            let from_idents = match &t.args.from {
                Some(f) => f.clone(),
                None => vec![start(t.attr.path().span())],
            };
            let mut from: Vec<(usize, Ident)> = Vec::new();
            for ident in &from_idents {
                let i = place_index(&mut cx, ident, &mut places);
                if from.iter().any(|(j, _)| *j == i) {
                    cx.error_spanned_by(ident, format!("place `{ident}` is listed twice"));
                    continue;
                }
                from.push((i, ident.clone()));
            }
            let to = match &t.args.to {
                Some(to) => Some(place_index(&mut cx, to, &mut places)),
                None => {
                    cx.error_spanned_by(&t.attr, "a transition needs a target: `#[transition(to = Place)]`");
                    None
                }
            };
            numbered.push(Numbered { from, to });
        }
        let end_index = places.len();
        places.push(Place {
            ident: end.unwrap_or_else(|| Ident::new("End", Span::call_site())),
            name: loopstack_graph::END.into(),
        });
        let fix = |i: usize| if i == usize::MAX { end_index } else { i };

        let state = match &args.state {
            Some(s) => Some(s.clone()),
            None => raw.iter().find_map(|t| state_param(&t.sig)).cloned(),
        };
        if transition_attrs == 0 {
            cx.error_spanned_by(
                &item.self_ty,
                "this `#[workflow]` impl has no `#[transition(..)]` method; the first one leaves `Start`, \
                 e.g. `#[transition(to = Ready)]`",
            );
        }
        let input = args.input.clone();
        let stub = |places: &[Place], item: &ItemImpl, signal: Option<SignalEnum>| WorkflowStub {
            krate: krate.clone(),
            item: item.clone(),
            enum_ident: enum_ident.clone(),
            places: places.to_vec(),
            state: state.clone(),
            input: input.clone(),
            signal,
            cfgs: cfgs.clone(),
        };
        if !cx.is_ok() {
            return Err(fail(cx, &item, Some(stub(&places, &item, None))));
        }

        let transitions: Vec<Transition> = raw
            .iter()
            .zip(&numbered)
            .zip(&guard_of)
            .zip(&after_ms)
            .map(|(((t, n), guard), after)| Transition {
                method: t.method.clone(),
                from: n.from.iter().map(|(i, _)| fix(*i)).collect(),
                to: fix(n.to.expect("checked")),
                priority: t.args.priority,
                guard: *guard,
                wait: t.args.wait.is_some(),
                payload: t.args.wait.as_ref().and_then(|_| payload_param(&t.sig)).map(|ty| spell_out_self(ty, &item)),
                after: *after,
                state_span: typed_input(&t.sig, 1).map_or_else(|| t.sig.ident.span(), |ty| ty.span()),
                cx_span: typed_input(&t.sig, 2).map_or_else(|| t.sig.ident.span(), |ty| ty.span()),
                output_span: error_type_span(&t.sig.output, t.sig.ident.span()),
            })
            .collect();

        let signal = signal_enum(&mut cx, &type_ident, &item, &transitions, &places);

        // The state machine, checked by the rules the runtime routes and checks by. A
        // timer waits like a wait transition: it shadows nothing and is an edge like
        // any other.
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
        let end_refs: Vec<Option<Ident>> = numbered
            .iter()
            .map(|n| n.from.iter().find(|(i, _)| *i == usize::MAX).map(|(_, ident)| ident.clone()))
            .collect();
        for problem in loopstack_graph::problems(&place_names, &graph) {
            report(&mut cx, problem, &places, &transitions, &end_refs, &item);
        }
        if !cx.is_ok() {
            return Err(fail(cx, &item, Some(stub(&places, &item, signal))));
        }
        cx.check().expect("no errors");
        Ok(Self {
            krate,
            description,
            name,
            definition: args.definition.clone(),
            enum_ident,
            state: state.expect("a transition exists"),
            input,
            places,
            transitions,
            guards,
            signal,
            cfgs,
            item,
        })
    }
}

/// Removes `#[transition]` and `#[guard]` from the impl's items, returning what they
/// said and how many `#[transition]` attributes there were (parsed or not).
fn strip_helpers(cx: &mut Ctxt, item: &mut ItemImpl) -> (Vec<RawTransition>, usize) {
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

fn typed_input(sig: &Signature, i: usize) -> Option<&Type> {
    match sig.inputs.iter().nth(i)? {
        FnArg::Typed(p) => Some(&p.ty),
        FnArg::Receiver(_) => None,
    }
}

fn mut_ref_elem(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => Some(&r.elem),
        Type::Paren(p) => mut_ref_elem(&p.elem),
        Type::Group(g) => mut_ref_elem(&g.elem),
        _ => None,
    }
}

/// `T` in the transition method's `state: &mut T`, when it takes `&self` first.
fn state_param(sig: &Signature) -> Option<&Type> {
    match sig.inputs.first() {
        Some(FnArg::Receiver(_)) => typed_input(sig, 1).and_then(mut_ref_elem),
        _ => None,
    }
}

fn payload_param(sig: &Signature) -> Option<&Type> {
    typed_input(sig, 3)
}

const SHAPE: &str = "(&self, state: &mut State, cx: &mut RunContext)";
const WAIT_SHAPE: &str = "(&self, state: &mut State, cx: &mut RunContext, payload: T)";

/// How a transition fires, as its method's shape sees it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// By itself, when its guard holds.
    Plain,
    /// On a signal, with an optional payload (`wait`).
    Wait,
    /// After a delay, without a signal (`after = ".."`).
    Timer,
}

fn check_transition_sig(cx: &mut Ctxt, sig: &Signature, kind: Kind) {
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

/// The `<Type>Signal` enum: a variant per wait transition, named in UpperCamelCase
/// after its method. It is not generic. A payload type that names one of the impl's
/// generic parameters does not compile in the (static) table either; the enum is left
/// out then, so that mistake is one error. Variant names that collide or are not
/// identifiers are errors.
fn signal_enum(
    cx: &mut Ctxt,
    type_ident: &Ident,
    item: &ItemImpl,
    transitions: &[Transition],
    places: &[Place],
) -> Option<SignalEnum> {
    let ident = Ident::new(&format!("{}Signal", type_ident.to_string().trim_start_matches("r#")), type_ident.span());
    let mut variants: Vec<SignalVariant> = Vec::new();
    let mut ok = true;
    for t in transitions.iter().filter(|t| t.wait) {
        let signal = t.method.to_string().trim_start_matches("r#").to_owned();
        let name = pascal_case(&signal);
        if syn::parse_str::<Ident>(&name).is_err() {
            cx.error_spanned_by(
                &t.method,
                format!(
                    "wait transition `{signal}` would be the signal `{ident}::{name}`, which is not an identifier; \
                     rename the method"
                ),
            );
            ok = false;
            continue;
        }
        if let Some(other) = variants.iter().find(|v| v.ident == name) {
            cx.error_spanned_by(
                &t.method,
                format!(
                    "wait transitions `{}` and `{signal}` would both be the signal `{ident}::{name}`; rename one",
                    other.signal
                ),
            );
            ok = false;
            continue;
        }
        variants.push(SignalVariant {
            ident: Ident::new(&name, t.method.span()),
            signal,
            payload: t.payload.clone(),
            from: t.from.iter().map(|&p| places[p].name.clone()).collect(),
            to: places[t.to].name.clone(),
        });
    }
    if !ok {
        return None;
    }
    let generics: Vec<String> = item
        .generics
        .params
        .iter()
        .map(|g| match g {
            syn::GenericParam::Type(t) => t.ident.to_string(),
            syn::GenericParam::Lifetime(l) => l.lifetime.ident.to_string(),
            syn::GenericParam::Const(c) => c.ident.to_string(),
        })
        .collect();
    let generic_payload =
        variants.iter().filter_map(|v| v.payload.as_ref()).any(|ty| mentions_any(ty.to_token_stream(), &generics));
    (!generic_payload).then_some(SignalEnum { ident, variants })
}

/// `ty` with every `Self` replaced by the workflow type, for code outside the impl.
fn spell_out_self(ty: &Type, item: &ItemImpl) -> Type {
    syn::parse2(replace_self(ty.to_token_stream(), &item.self_ty)).unwrap_or_else(|_| ty.clone())
}

fn replace_self(tokens: TokenStream, self_ty: &Type) -> TokenStream {
    tokens
        .into_iter()
        .flat_map(|tt| match tt {
            proc_macro2::TokenTree::Ident(i) if i == "Self" => self_ty.to_token_stream(),
            proc_macro2::TokenTree::Group(g) => {
                let mut group = proc_macro2::Group::new(g.delimiter(), replace_self(g.stream(), self_ty));
                group.set_span(g.span());
                proc_macro2::TokenTree::Group(group).into_token_stream()
            }
            other => other.into_token_stream(),
        })
        .collect()
}

/// Whether `tokens` contain an identifier in `names` (a lifetime by its name after `'`).
fn mentions_any(tokens: TokenStream, names: &[String]) -> bool {
    tokens.into_iter().any(|tt| match tt {
        proc_macro2::TokenTree::Ident(i) => names.iter().any(|n| i == n),
        proc_macro2::TokenTree::Group(g) => mentions_any(g.stream(), names),
        _ => false,
    })
}

fn check_guard_sig(cx: &mut Ctxt, sig: &Signature) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;
    use syn::parse_quote;

    fn model(item: syn::ItemImpl) -> Result<WorkflowModel, Vec<String>> {
        WorkflowModel::from_syn(TokenStream::new(), item.into_token_stream())
            .map_err(|f| f.error.into_iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn the_model_of_the_tool_call_workflow() {
        let m = model(parse_quote! {
            impl ToolCallWorkflow {
                #[transition(to = Ready)]
                async fn setup(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = Ready, to = PromptExecuted)]
                async fn llm_turn(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
                #[guard(has_tool_calls)]
                async fn execute_tool_calls(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = [AwaitingTools, Approved], to = Ready)]
                #[guard(has_tool_calls)]
                async fn tools_complete(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = AwaitingTools, to = Approved, wait)]
                async fn approve(&self, state: &mut S, cx: &mut RunContext, a: Approval) -> Result<()> { Ok(()) }
                #[transition(from = PromptExecuted, to = End)]
                async fn respond(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                fn has_tool_calls(&self, state: &S) -> bool { true }
            }
        })
        .unwrap();
        assert_eq!(m.name, "tool_call_workflow");
        assert_eq!(m.enum_ident, "ToolCallWorkflowPlace");
        let places: Vec<&str> = m.places.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(places, ["start", "ready", "prompt_executed", "awaiting_tools", "approved", "end"]);
        assert_eq!(m.transitions[3].from, [3, 4]);
        assert_eq!(m.transitions[2].priority, Some(10));
        assert_eq!((m.transitions[2].guard, m.transitions[3].guard), (Some(0), Some(0)));
        assert_eq!(m.guards.len(), 1, "a guard used twice is checked once");
        assert!(m.transitions[4].payload.is_some());
        assert_eq!(m.state.to_token_stream().to_string(), "S");
        // The helper attributes are gone from the re-emitted impl.
        let text = m.item.to_token_stream().to_string();
        assert!(!text.contains("transition") && !text.contains("guard ("), "{text}");
    }

    #[test]
    fn errors_name_the_problem() {
        let err = model(parse_quote! {
            impl W {
                #[transition(to = A)]
                async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End)]
                async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End)]
                async fn c(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            }
        })
        .err()
        .unwrap();
        assert_eq!(
            err,
            ["transition `c` from `A` can never fire: `b` has no guard and is tried first; give it a `#[guard(..)]` \
              or order them with `priority`"]
        );

        let err = model(parse_quote! {
            impl W {
                #[transition(to = End)]
                async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = Orphan, to = End)]
                async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            }
        })
        .err()
        .unwrap();
        assert_eq!(err, ["place `Orphan` cannot be reached from `Start`"]);

        let err = model(parse_quote! {
            impl W {
                #[transition(to = A, to = B)]
                async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(to = End)]
                #[guard(missing)]
                async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            }
        })
        .err()
        .unwrap();
        assert_eq!(
            err,
            [
                "duplicate `to`; each option is given once",
                "no method `missing` in this impl; a guard names a `fn(&self, &State) -> bool` method of the \
                 `#[workflow]` impl block",
            ],
            "independent mistakes are all reported, and the graph is not checked on top"
        );
    }

    #[test]
    fn an_unreachable_region_and_a_stuck_one_are_both_reported() {
        // The same rules as `Definition::check`: `Island` is never reached, and a run
        // that takes `trap` never leaves `Trap`; neither hides the other.
        let err = model(parse_quote! {
            impl W {
                #[transition(to = A)]
                async fn go(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End)]
                #[guard(ready)]
                async fn finish(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = Trap)]
                async fn trap(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = Trap, to = Trap)]
                async fn stuck(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = Island, to = End)]
                async fn island(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                fn ready(&self, s: &S) -> bool { true }
            }
        })
        .err()
        .unwrap();
        assert_eq!(
            err,
            [
                "place `Island` cannot be reached from `Start`",
                "`End` cannot be reached from place `Trap`: add a transition from `Trap` or a place it leads to \
                 toward `End`",
            ]
        );
    }

    #[test]
    fn timers_and_signals() {
        let m = model(parse_quote! {
            impl RefundDesk {
                #[transition(to = AwaitingHuman)]
                async fn open(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                // An unguarded timer shadows nothing: `close`, tried after it, may fire.
                #[transition(from = AwaitingHuman, to = End, after = "1h30m", priority = 5)]
                async fn expire(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = AwaitingHuman, to = End)]
                #[guard(never)]
                async fn close(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = AwaitingHuman, to = End, wait)]
                #[guard(never)]
                async fn human_review(&self, s: &mut S, cx: &mut RunContext, r: Review) -> Result<()> { Ok(()) }
                #[transition(from = AwaitingHuman, to = End, wait)]
                #[guard(never)]
                async fn r#cancel(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                fn never(&self, s: &S) -> bool { false }
            }
        })
        .map_err(|e| e.join("\n"))
        .unwrap();
        let t = &m.transitions;
        assert_eq!((t[1].after, t[1].wait), (Some(90 * 60_000), false));
        assert_eq!((t[3].wait, t[3].payload.is_some(), t[3].after), (true, true, None));
        assert_eq!((t[4].wait, t[4].payload.is_some()), (true, false));
        let signal = m.signal.unwrap();
        assert_eq!(signal.ident, "RefundDeskSignal");
        let variants: Vec<(String, &str, bool)> =
            signal.variants.iter().map(|v| (v.ident.to_string(), v.signal.as_str(), v.payload.is_some())).collect();
        assert_eq!(variants, [("HumanReview".into(), "human_review", true), ("Cancel".into(), "cancel", false)]);
        assert_eq!(
            (signal.variants[0].from.as_slice(), signal.variants[0].to.as_str()),
            (&["awaiting_human".to_owned()][..], "end")
        );
    }

    #[test]
    fn a_timer_behind_an_unguarded_transition_never_fires() {
        let err = model(parse_quote! {
            impl W {
                #[transition(to = A)]
                async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End)]
                async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End, after = "1s", priority = 3)]
                async fn c(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            }
        })
        .err()
        .unwrap();
        assert_eq!(
            err,
            ["timer transition `c` from `A` can never fire: `b` has no guard and fires without waiting for its delay"]
        );
    }

    #[test]
    fn signal_names_are_distinct_identifiers() {
        let err = model(parse_quote! {
            impl W {
                #[transition(to = A)]
                async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End, wait)]
                async fn go_on(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End, wait)]
                async fn goOn(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = A, to = End, wait)]
                async fn _self(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            }
        })
        .err()
        .unwrap();
        assert_eq!(
            err,
            [
                "wait transitions `go_on` and `goOn` would both be the signal `WSignal::GoOn`; rename one",
                "wait transition `_self` would be the signal `WSignal::Self`, which is not an identifier; rename the \
                 method",
            ]
        );
    }

    #[test]
    fn timer_mistakes() {
        let err = model(parse_quote! {
            impl W {
                #[transition(to = End, after = "5min")]
                async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(to = End, wait, after = "1h")]
                async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(to = End, after = "1h")]
                async fn c(&self, s: &mut S, cx: &mut RunContext, p: P) -> Result<()> { Ok(()) }
            }
        })
        .err()
        .unwrap();
        assert_eq!(err.len(), 3, "{err:?}");
        assert!(err[0].starts_with("unknown unit `min`"), "{}", err[0]);
        assert!(err[1].starts_with("a transition fires on a signal (`wait`) or after a delay"), "{}", err[1]);
        assert!(err[2].starts_with("a timer transition takes no payload"), "{}", err[2]);
    }

    #[test]
    fn places_must_be_camel_case_and_distinct() {
        let err = model(parse_quote! {
            impl W {
                #[transition(to = HTTPDone)]
                async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
                #[transition(from = HttpDone, to = End)]
                async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            }
        })
        .err()
        .unwrap();
        assert_eq!(err, ["places `HTTPDone` and `HttpDone` would both be stored as `http_done`"]);
    }

    #[test]
    fn options() {
        let m = WorkflowModel::from_syn(
            quote!(name = "agent", input = String, state = AgentState, crate = ::loopstack_core),
            quote! {
                impl Agent {
                    #[transition(to = End)]
                    async fn a(&self, s: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> { Ok(()) }
                }
            },
        )
        .ok()
        .unwrap();
        assert_eq!(m.name, "agent");
        assert_eq!(m.input.unwrap().to_token_stream().to_string(), "String");
        assert_eq!(m.krate.to_token_stream().to_string(), ":: loopstack_core");
    }
}
