//! Stage 2: every check, on syn types, keeping the spans errors point at.
//!
//! A model that builds is one `expand` can turn into code without failing.

pub(crate) mod tool;
pub(crate) mod workflow;

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{Attribute, GenericArgument, Path, PathArguments, ReturnType, Type};

/// `::loopstack`, the default of `crate = path`.
pub(crate) fn default_crate() -> Path {
    syn::parse_quote!(::loopstack)
}

/// The `#[cfg]` attributes of an item, copied onto what is generated beside it.
pub(crate) fn cfg_attrs(attrs: &[Attribute]) -> Vec<Attribute> {
    attrs.iter().filter(|a| a.path().is_ident("cfg")).cloned().collect()
}

/// The last segment of a path type, looking through parentheses and groups.
pub(crate) fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        Type::Paren(p) => last_segment(&p.elem),
        Type::Group(g) => last_segment(&g.elem),
        _ => None,
    }
}

/// What a reference parameter's type is, when it is one.
pub(crate) enum RefKind {
    /// `&ToolContext` (by the last path segment).
    Context,
    /// `&mut ToolContext`.
    MutContext,
    /// Any other reference.
    Other,
}

pub(crate) fn reference_kind(ty: &Type) -> Option<RefKind> {
    match ty {
        Type::Reference(r) => {
            let is_cx = last_segment(&r.elem).is_some_and(|s| s.ident == "ToolContext");
            Some(match (is_cx, r.mutability.is_some()) {
                (true, false) => RefKind::Context,
                (true, true) => RefKind::MutContext,
                (false, _) => RefKind::Other,
            })
        }
        Type::Paren(p) => reference_kind(&p.elem),
        Type::Group(g) => reference_kind(&g.elem),
        _ => None,
    }
}

/// How a handler's return value becomes a `ToolOutput`.
#[derive(Clone, Copy)]
#[cfg_attr(test, derive(Debug))]
pub(crate) enum Output {
    /// `..::Result<T, E>`: `Ok` is converted, `Err` goes through `tool_error`. The spans
    /// are those of `T` and `E`, where conversion errors are reported.
    Result { ok: Span, err: Span },
    /// Anything else is the value itself.
    Value { span: Span },
}

impl Output {
    pub(crate) fn of(ret: &ReturnType, fallback: Span) -> Self {
        let ReturnType::Type(_, ty) = ret else { return Self::Value { span: fallback } };
        match result_args(ty) {
            Some(args) => Self::Result {
                ok: args.first().map_or_else(|| ty.span(), |t| t.span()),
                err: args.get(1).map_or_else(|| ty.span(), |t| t.span()),
            },
            None => Self::Value { span: ty.span() },
        }
    }
}

/// The type arguments of a return type whose last segment is `Result<..>`.
fn result_args(ty: &Type) -> Option<Vec<&Type>> {
    let seg = last_segment(ty)?;
    let PathArguments::AngleBracketed(a) = &seg.arguments else { return None };
    let args: Vec<&Type> = a
        .args
        .iter()
        .filter_map(|g| match g {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    (seg.ident == "Result" && !args.is_empty()).then_some(args)
}

/// The span of `E` in a `..::Result<T, E>` return type, else of the whole type: where an
/// error type that does not convert is reported.
pub(crate) fn error_type_span(ret: &ReturnType, fallback: Span) -> Span {
    let ReturnType::Type(_, ty) = ret else { return fallback };
    match result_args(ty) {
        Some(args) if args.len() > 1 => args[1].span(),
        _ => ty.span(),
    }
}

/// `::a::b` -> `"::a::b"`, for `#[serde(crate = "..")]` and `#[schemars(crate = "..")]`.
pub(crate) fn path_string(path: &Path) -> String {
    let mut s = String::new();
    if path.leading_colon.is_some() {
        s.push_str("::");
    }
    let segments: Vec<String> = path.segments.iter().map(|seg| seg.ident.to_string()).collect();
    s.push_str(&segments.join("::"));
    s
}
