//! The model of `#[workflow]`: an impl block whose methods carry `#[transition]` and
//! `#[guard]`, checked as a state machine.
//!
//! [`WorkflowModel::from_syn`] works in stages, as serde's `check.rs` and statig's
//! `analyze.rs` do, each recording its errors and the next going on where it can, so
//! one expansion reports every independent mistake: the header (arguments, the impl
//! block, the names), the methods' shapes and timers ([`signature`]), the guards,
//! the places ([`places`]), the transitions, the signal enum ([`signal`]) and the
//! graph check ([`graph`]). A failure keeps the [`Outline`] the stages before it
//! found (the place enum, the signal enum, the `Workflow` impl's types), the part of
//! the model the expansion emits either way, so code using the workflow adds no
//! errors of its own.

use std::collections::HashMap;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::spanned::Spanned as _;
use syn::{Attribute, Ident, ImplItem, ItemImpl, Path, Signature, Type};

use super::{cfg_attrs, default_crate, error_type_span, last_segment};
use crate::ctxt::Ctxt;
use crate::duration::parse_millis;
use crate::names::snake_case;
use crate::parse::{self, AfterValue, TransitionArgs, WorkflowArgs};

mod graph;
mod migrate;
mod places;
mod signal;
mod signature;
#[cfg(test)]
mod tests;

pub(crate) use migrate::Migration;
use migrate::{RawMigration, strip_migrations};
use places::{Named, PlaceId, Places};
use signature::{
    Kind, check_guard_sig, check_timer_sig, check_transition_sig, payload_param, state_param, strip_helpers,
    typed_input,
};

/// What a `#[workflow]` is known to be before its table is checked, and what the
/// expansion emits whether or not the check passes: the place enum, the signal enum
/// and the types of the `Workflow` impl.
pub(crate) struct Outline {
    pub(crate) krate: Path,
    /// The impl block with `#[transition]` and `#[guard]` removed.
    pub(crate) item: ItemImpl,
    /// `ToolCallWorkflowPlace`.
    pub(crate) enum_ident: Ident,
    /// `Start` first, `End` last, the others in order of first appearance.
    pub(crate) places: Places,
    /// `input = T`; `None` means the state type.
    pub(crate) input: Option<Type>,
    /// The `<Type>Signal` enum; `None` when it is not generated (a payload names one of
    /// the impl's generic parameters) or not known (a transition failed its checks).
    pub(crate) signal: Option<SignalEnum>,
    pub(crate) cfgs: Vec<Attribute>,
}

/// A checked `#[workflow]`.
pub(crate) struct WorkflowModel {
    pub(crate) outline: Outline,
    pub(crate) name: String,
    /// The impl block's doc comment: the table's description.
    pub(crate) description: Option<crate::docs::Text>,
    pub(crate) state: Type,
    /// `definition = path`: a method `fn(&self, &'static Definition) -> &'static
    /// Definition` that picks the table a value uses (the macro's own, or one
    /// renamed from it).
    pub(crate) definition: Option<syn::Path>,
    /// `fork_check = path`: a method `fn(&self, &ForkSettings) -> Result<(),
    /// ForkError>` that checks a fork's system prompt and model.
    pub(crate) fork_check: Option<syn::Path>,
    /// `on_create = path`: a method `fn(&self, &mut State, &mut RunContext) ->
    /// Result<(), E>` that saves the documents a run starts with.
    pub(crate) on_create: Option<syn::Path>,
    pub(crate) transitions: Vec<Transition>,
    pub(crate) guards: Vec<GuardMethod>,
    /// `version = N`; 1 by default.
    pub(crate) version: u32,
    /// The `#[migrate(from = N)]` methods, by the version they come from.
    pub(crate) migrations: Vec<Migration>,
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
    /// A timer transition's delay, in milliseconds, when the attribute fixes it.
    pub(crate) after: Option<u64>,
    /// A timer transition's delay method (`after = Self::method`), when the workflow
    /// gives the delay at run time.
    pub(crate) after_fn: Option<Path>,
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

/// What is emitted when a check failed: the stripped impl block and, once the header
/// was read, the outline (with the state type if one is known), so that code using
/// the workflow does not add errors of its own.
pub(crate) struct WorkflowFailure {
    pub(crate) error: syn::Error,
    pub(crate) item: TokenStream,
    pub(crate) outline: Option<Outline>,
    pub(crate) state: Option<Type>,
}

/// One `#[transition]` as written, before places are numbered.
struct RawTransition {
    method: Ident,
    args: TransitionArgs,
    attr: Attribute,
    guard: Option<Ident>,
    sig: Signature,
}

/// What the first stage reads: the arguments, the impl block without the helper
/// attributes, the names, and each `#[transition]` as written.
struct Header {
    args: WorkflowArgs,
    krate: Path,
    item: ItemImpl,
    type_ident: Ident,
    enum_ident: Ident,
    name: String,
    raw: Vec<RawTransition>,
    /// `#[migrate]` methods as written.
    migrations: Vec<RawMigration>,
    /// `version = N`, checked (1 when it is not given or not valid).
    version: u32,
    /// `#[transition]` attributes, parsed or not.
    transition_attrs: usize,
    cfgs: Vec<Attribute>,
    description: Option<crate::docs::Text>,
}

/// A failure before the header gave an outline.
fn failure(cx: Ctxt, item: &ItemImpl) -> Box<WorkflowFailure> {
    let error = cx.check().expect_err("an error was recorded");
    Box::new(WorkflowFailure { error, item: item.to_token_stream(), outline: None, state: None })
}

/// The header's arguments an outline does not hold.
struct Rest {
    args: WorkflowArgs,
    name: String,
    description: Option<crate::docs::Text>,
    version: u32,
}

impl Header {
    /// Stage 1: the arguments and the impl block. An impl that is not an inherent
    /// impl of a named type ends the expansion here.
    fn read(mut cx: Ctxt, args: TokenStream, item: TokenStream) -> Result<(Ctxt, Self), Box<WorkflowFailure>> {
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
                return Err(Box::new(WorkflowFailure { error, item, outline: None, state: None }));
            }
        };
        let migrations = strip_migrations(&mut cx, &mut item);
        let (mut raw, transition_attrs) = strip_helpers(&mut cx, &mut item);
        // A method that is both is reported once, here: its transition is not read
        // further (its shape is a migration's).
        raw.retain(|t| {
            let both = migrations.iter().any(|m| *m.method() == t.method);
            if both {
                cx.error_spanned_by(
                    &t.attr,
                    "a method is a transition or a migration, not both: a migration converts a run of an older \
                     version before it goes on",
                );
            }
            !both
        });
        let version = match &args.version {
            None => 1,
            Some(lit) => match lit.base10_parse::<u32>() {
                Ok(v) if v >= 1 => v,
                _ => {
                    cx.error_spanned_by(lit, "`version` is an integer of at least 1 (the default)");
                    1
                }
            },
        };
        let cfgs = cfg_attrs(&item.attrs);
        let description = crate::docs::doc_text(&item.attrs);
        if let Some((_, path, _)) = &item.trait_ {
            cx.error_spanned_by(
                path,
                "`#[workflow]` goes on an inherent impl block (`impl MyWorkflow { .. }`); it writes the \
                 `Workflow` impl itself",
            );
            return Err(failure(cx, &item));
        }
        let Some(type_ident) = last_segment(&item.self_ty).map(|s| s.ident.clone()) else {
            cx.error_spanned_by(&item.self_ty, "`#[workflow]` needs a named type here, such as `impl MyWorkflow`");
            return Err(failure(cx, &item));
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
        let header = Self {
            args,
            krate,
            item,
            type_ident,
            enum_ident,
            name,
            raw,
            migrations,
            version,
            transition_attrs,
            cfgs,
            description,
        };
        Ok((cx, header))
    }

    /// The outline, from the header and the places and signals the stages found, and
    /// the rest of the header.
    fn split(self, places: Places, signal: Option<SignalEnum>) -> (Outline, Rest) {
        let Self { mut args, krate, item, enum_ident, name, cfgs, description, version, .. } = self;
        let input = args.input.take();
        let outline = Outline { krate, item, enum_ident, places, input, signal, cfgs };
        (outline, Rest { args, name, description, version })
    }

    /// The failure of a table whose header was read.
    fn fail(self, cx: Ctxt, places: Places, state: Option<Type>, signal: Option<SignalEnum>) -> Box<WorkflowFailure> {
        let error = cx.check().expect_err("an error was recorded");
        let item = self.item.to_token_stream();
        let (outline, _) = self.split(places, signal);
        Box::new(WorkflowFailure { error, item, outline: Some(outline), state })
    }
}

impl Transition {
    /// Whether it fires after a delay, fixed or computed.
    pub(crate) fn is_timer(&self) -> bool {
        self.after.is_some() || self.after_fn.is_some()
    }
}

/// A timer's delay as the attribute gives it.
enum Delay {
    /// In milliseconds, checked here.
    Fixed(u64),
    /// By a method, at run time.
    Method(Path),
}

/// Stage 2: each transition method's shape, and its timer's delay: a literal's in
/// milliseconds, or the method that gives it (its shape checked when it is one of
/// this impl's, written `Self::method`; rustc checks any other path's type).
fn timers(cx: &mut Ctxt, raw: &[RawTransition], item: &ItemImpl) -> Vec<Option<Delay>> {
    raw.iter()
        .map(|t| {
            let kind = match (&t.args.wait, &t.args.after) {
                (Some(()), _) => Kind::Wait,
                (None, Some(_)) => Kind::Timer,
                (None, None) => Kind::Plain,
            };
            check_transition_sig(cx, &t.sig, kind);
            t.args.after.as_ref().and_then(|after| {
                if t.args.wait.is_some() {
                    cx.error_at(
                        after.key,
                        "a transition fires on a signal (`wait`) or after a delay (`after`), not both; a timer \
                         beside a wait transition is a transition of its own from the same place",
                    );
                    return None;
                }
                match &after.value {
                    AfterValue::Literal(lit) => {
                        parse_millis(&lit.value()).map(Delay::Fixed).map_err(|e| cx.error_spanned_by(lit, e)).ok()
                    }
                    AfterValue::Method(path) => {
                        // A method named as a guard is: rustc would not find it, nor say why.
                        if let Some(name) = path.get_ident()
                            && method(item, name).is_some()
                        {
                            cx.error_spanned_by(
                                path,
                                format!("`{name}` is a method of this impl: write `after = Self::{name}`"),
                            );
                            return None;
                        }
                        if let Some(sig) = own_method(item, path) {
                            check_timer_sig(cx, sig);
                        }
                        Some(Delay::Method(path.clone()))
                    }
                }
            })
        })
        .collect()
}

/// The method of this impl block that `Self::name` names.
fn own_method<'a>(item: &'a ItemImpl, path: &Path) -> Option<&'a Signature> {
    let mut segments = path.segments.iter();
    let (Some(this), Some(name), None) = (segments.next(), segments.next(), segments.next()) else {
        return None;
    };
    if this.ident != "Self" || path.leading_colon.is_some() {
        return None;
    }
    method(item, &name.ident)
}

/// The signature of the impl block's method `name`.
fn method<'a>(item: &'a ItemImpl, name: &Ident) -> Option<&'a Signature> {
    item.items.iter().find_map(|i| match i {
        ImplItem::Fn(f) if f.sig.ident == *name => Some(&f.sig),
        _ => None,
    })
}

/// Stage 3: the guard methods the transitions name, each once, and each
/// transition's guard (an index into them).
fn resolve_guards(cx: &mut Ctxt, item: &ItemImpl, raw: &[RawTransition]) -> (Vec<GuardMethod>, Vec<Option<usize>>) {
    let methods: HashMap<String, &Signature> = item
        .items
        .iter()
        .filter_map(|i| match i {
            ImplItem::Fn(f) => Some((f.sig.ident.to_string(), &f.sig)),
            _ => None,
        })
        .collect();
    let mut guards: Vec<GuardMethod> = Vec::new();
    let guard_of = raw
        .iter()
        .map(|t| {
            let reference = t.guard.as_ref()?;
            if let Some(i) = guards.iter().position(|g| g.method == *reference) {
                return Some(i);
            }
            let Some(sig) = methods.get(&reference.to_string()) else {
                cx.error_spanned_by(
                    reference,
                    format!(
                        "no method `{reference}` in this impl; a guard names a `fn(&self, &State) -> bool` method \
                         of the `#[workflow]` impl block"
                    ),
                );
                return None;
            };
            check_guard_sig(cx, sig);
            guards.push(GuardMethod { method: sig.ident.clone(), reference: reference.clone() });
            Some(guards.len() - 1)
        })
        .collect();
    (guards, guard_of)
}

/// Stage 5: one transition, its places numbered.
fn transition(
    t: &RawTransition,
    named: &Named,
    guard: Option<usize>,
    after: Option<Delay>,
    places: &Places,
    item: &ItemImpl,
) -> Transition {
    Transition {
        method: t.method.clone(),
        from: named.from.iter().map(|&(p, _)| places.index(p)).collect(),
        to: places.index(named.to.expect("checked")),
        priority: t.args.priority,
        guard,
        wait: t.args.wait.is_some(),
        payload: t.args.wait.as_ref().and_then(|_| payload_param(&t.sig)).map(|ty| signal::spell_out_self(ty, item)),
        after: match &after {
            Some(Delay::Fixed(ms)) => Some(*ms),
            _ => None,
        },
        after_fn: match after {
            Some(Delay::Method(path)) => Some(path),
            _ => None,
        },
        state_span: typed_input(&t.sig, 1).map_or_else(|| t.sig.ident.span(), |ty| ty.span()),
        cx_span: typed_input(&t.sig, 2).map_or_else(|| t.sig.ident.span(), |ty| ty.span()),
        output_span: error_type_span(&t.sig.output, t.sig.ident.span()),
    }
}

impl WorkflowModel {
    pub(crate) fn from_syn(args: TokenStream, item: TokenStream) -> Result<Self, Box<WorkflowFailure>> {
        let (mut cx, header) = Header::read(Ctxt::new(), args, item)?;
        let mut after = timers(&mut cx, &header.raw, &header.item);
        let migrations = migrate::check(&mut cx, &header.migrations, header.version);
        let (guards, guard_of) = resolve_guards(&mut cx, &header.item, &header.raw);
        let (places, named) = Places::of(&mut cx, &header.raw);

        let state = match &header.args.state {
            Some(s) => Some(s.clone()),
            None => header.raw.iter().find_map(|t| state_param(&t.sig)).cloned(),
        };
        if header.transition_attrs == 0 {
            cx.error_spanned_by(
                &header.item.self_ty,
                "this `#[workflow]` impl has no `#[transition(..)]` method; the first one leaves `Start`, \
                 e.g. `#[transition(to = Ready)]`",
            );
        }
        if !cx.is_ok() {
            return Err(header.fail(cx, places, state, None));
        }

        let transitions: Vec<Transition> = (0..header.raw.len())
            .map(|i| transition(&header.raw[i], &named[i], guard_of[i], after[i].take(), &places, &header.item))
            .collect();
        let signal = signal::signal_enum(&mut cx, &header.type_ident, &header.item, &transitions, &places);

        // Stage 6: the graph.
        let end_refs: Vec<Option<Ident>> = named
            .iter()
            .map(|n| n.from.iter().find(|(p, _)| *p == PlaceId::End).map(|(_, ident)| ident.clone()))
            .collect();
        graph::check(&mut cx, &places, &transitions, &end_refs, &header.item);
        if !cx.is_ok() {
            return Err(header.fail(cx, places, state, signal));
        }
        cx.check().expect("no errors");
        let (outline, Rest { args, name, description, version }) = header.split(places, signal);
        Ok(Self {
            outline,
            description,
            name,
            definition: args.definition,
            fork_check: args.fork_check,
            on_create: args.on_create,
            state: state.expect("a transition exists"),
            transitions,
            guards,
            version,
            migrations,
        })
    }
}
