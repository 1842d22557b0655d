//! Stage 3: code generation. Infallible: every check happened in `model`.
//!
//! Generated code names everything by absolute path through `<crate>::__private` (or
//! `::core`), so it works whatever the user's module imports or shadows. Code that
//! rustc checks for the user (bounds, signatures, `Send`) is located at the user's
//! tokens, so an error points there.

mod tool;
mod workflow;

use proc_macro2::{Group, Span, TokenStream, TokenTree};

pub(crate) use tool::{tool, tool_fallback};
pub(crate) use workflow::{workflow, workflow_fallback};

/// Resolves like generated code (so lints treat it as macro output) but reports errors
/// at the user's `span`.
fn at(span: Span) -> Span {
    Span::call_site().located_at(span)
}

/// `tokens` with every span set to `span`, so an expression built from them (including
/// `<crate>::__private` paths) is reported at one place.
fn respan(tokens: &TokenStream, span: Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|tt| match tt {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), respan(&g.stream(), span));
                group.set_span(span);
                TokenTree::Group(group)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}
