//! `#[migrate(from = N)]` methods: what they say, their shapes, and the versions they
//! come from.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{Attribute, FnArg, Ident, ImplItem, ItemImpl, LitInt, ReturnType, Signature, Type};

use crate::ctxt::Ctxt;
use crate::parse::migrate_args;

const SHAPE: &str = "fn(&self, state: OldState, place: OldPlace) -> (State, Place)";

/// One `#[migrate(from = N)]` method, checked.
pub(crate) struct Migration {
    /// The version it migrates runs from.
    pub(crate) from: u32,
    pub(crate) method: Ident,
    /// Whether it takes `&self`.
    pub(crate) receiver: bool,
    /// The older version's state type, deserialized from the stored JSON.
    pub(crate) state: Type,
    /// The older version's place type (its place enum, or `String`), when it takes one.
    pub(crate) place: Option<Type>,
    /// The span of its return type, where a return that is not a migration is reported.
    pub(crate) output_span: Span,
}

/// One `#[migrate]` as written.
pub(super) struct RawMigration {
    from: Option<LitInt>,
    sig: Signature,
}

impl RawMigration {
    pub(super) fn method(&self) -> &Ident {
        &self.sig.ident
    }
}

/// Removes `#[migrate]` from the impl's items, returning what each said.
pub(super) fn strip_migrations(cx: &mut Ctxt, item: &mut ItemImpl) -> Vec<RawMigration> {
    let mut raw = Vec::new();
    for impl_item in &mut item.items {
        let (attrs, sig) = match impl_item {
            ImplItem::Fn(f) => (&mut f.attrs, Some(&f.sig)),
            ImplItem::Const(c) => (&mut c.attrs, None),
            ImplItem::Type(t) => (&mut t.attrs, None),
            ImplItem::Macro(m) => (&mut m.attrs, None),
            _ => continue,
        };
        let is_migrate = |a: &Attribute| a.path().is_ident("migrate");
        let (found, kept): (Vec<Attribute>, Vec<Attribute>) = std::mem::take(attrs).into_iter().partition(is_migrate);
        *attrs = kept;
        let Some(first) = found.first() else { continue };
        let Some(sig) = sig else {
            cx.error_spanned_by(first, "`#[migrate(from = N)]` goes on a method of the impl block");
            continue;
        };
        for extra in &found[1..] {
            cx.error_spanned_by(
                extra,
                "a method has one `#[migrate]`; a migration from another version is a method of its own",
            );
        }
        let from = migrate_args(first).map(|a| a.from).map_err(|e| cx.syn_error(e)).ok();
        raw.push(RawMigration { from, sig: sig.clone() });
    }
    raw
}

/// Checks each migration against the workflow's `version`: it comes from an older
/// version, once per version, and has a migration's shape.
pub(super) fn check(cx: &mut Ctxt, raw: &[RawMigration], version: u32) -> Vec<Migration> {
    let mut migrations: Vec<Migration> = Vec::new();
    for m in raw {
        let Some(lit) = &m.from else { continue };
        let Ok(from) = lit.base10_parse::<u32>() else {
            cx.error_spanned_by(lit, "`from` is a version: an integer of at least 1");
            continue;
        };
        if from == 0 {
            cx.error_spanned_by(lit, "`from` is a version: an integer of at least 1");
            continue;
        }
        if from >= version {
            let message = if version == 1 {
                "a migration comes from an older version, and this workflow is of version 1 (the default): raise \
                 it with `#[workflow(version = 2)]`"
                    .to_owned()
            } else {
                format!("a migration comes from an older version: `from` is below this workflow's version {version}")
            };
            cx.error_spanned_by(lit, message);
            continue;
        }
        if migrations.iter().any(|other| other.from == from) {
            cx.error_spanned_by(lit, format!("two migrations from version {from}; keep one"));
            continue;
        }
        if let Some(migration) = shape(cx, &m.sig, from) {
            migrations.push(migration);
        }
    }
    migrations.sort_by_key(|m| m.from);
    migrations
}

/// The method's shape: a plain, non-generic fn of `&self` (optional), the old state
/// (owned) and optionally the old place, returning something.
fn shape(cx: &mut Ctxt, sig: &Signature, from: u32) -> Option<Migration> {
    if let Some(a) = &sig.asyncness {
        cx.error_spanned_by(a, format!("a migration is a plain `{SHAPE}`, not `async`"));
        return None;
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(&sig.generics, "a migration cannot be generic: it reads one state type");
        return None;
    }
    let mut inputs = sig.inputs.iter().peekable();
    let receiver = match inputs.peek() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {
            inputs.next();
            true
        }
        Some(FnArg::Receiver(r)) => {
            cx.error_spanned_by(r, format!("a migration takes `&self`, or no receiver: `{SHAPE}`"));
            return None;
        }
        _ => false,
    };
    let typed: Vec<&Type> = inputs
        .filter_map(|i| match i {
            FnArg::Typed(p) => Some(&*p.ty),
            FnArg::Receiver(_) => None,
        })
        .collect();
    let (state, place) = match typed.as_slice() {
        [state] => (*state, None),
        [state, place] => (*state, Some((*place).clone())),
        [] => {
            cx.error_spanned_by(&sig.ident, format!("a migration takes the old state: `{SHAPE}`"));
            return None;
        }
        [_, _, extra, ..] => {
            cx.error_spanned_by(extra, format!("a migration takes the old state and place, nothing more: `{SHAPE}`"));
            return None;
        }
    };
    if let Type::Reference(_) = state {
        cx.error_spanned_by(
            state,
            "the old state is deserialized from the stored JSON and must be owned: take `OldState`, not a reference",
        );
        return None;
    }
    let output_span = match &sig.output {
        ReturnType::Default => {
            cx.error_spanned_by(
                &sig.ident,
                "a migration returns the new state and place: `(State, Place)` or `Result<(State, Place), E>`",
            );
            return None;
        }
        ReturnType::Type(_, ty) => ty.span(),
    };
    Some(Migration { from, method: sig.ident.clone(), receiver, state: state.clone(), place, output_span })
}
