//! The `<Type>Signal` enum of a workflow's wait transitions.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{Ident, ItemImpl, Type};

use super::{Place, SignalEnum, SignalVariant, Transition};
use crate::ctxt::Ctxt;
use crate::names::pascal_case;

/// The `<Type>Signal` enum: a variant per wait transition, named in UpperCamelCase
/// after its method. It is not generic. A payload type that names one of the impl's
/// generic parameters does not compile in the (static) table either; the enum is left
/// out then, so that mistake is one error. Variant names that collide or are not
/// identifiers are errors.
pub(super) fn signal_enum(
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
pub(super) fn spell_out_self(ty: &Type, item: &ItemImpl) -> Type {
    syn::parse2(replace_self(ty.to_token_stream(), &item.self_ty)).unwrap_or_else(|_| ty.clone())
}

pub(super) fn replace_self(tokens: TokenStream, self_ty: &Type) -> TokenStream {
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
pub(super) fn mentions_any(tokens: TokenStream, names: &[String]) -> bool {
    tokens.into_iter().any(|tt| match tt {
        proc_macro2::TokenTree::Ident(i) => names.iter().any(|n| i == n),
        proc_macro2::TokenTree::Group(g) => mentions_any(g.stream(), names),
        _ => false,
    })
}
