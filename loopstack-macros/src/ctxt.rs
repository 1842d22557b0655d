//! Collects errors so a macro reports every independent mistake at once.

use std::fmt::Display;

use quote::ToTokens;

/// An error collector (as serde's `Ctxt`): push errors while checking, then call
/// [`Ctxt::check`]. Dropping it unchecked is a bug in this crate and panics.
pub(crate) struct Ctxt {
    errors: Option<Vec<syn::Error>>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Self { errors: Some(Vec::new()) }
    }

    fn errors(&mut self) -> &mut Vec<syn::Error> {
        self.errors.as_mut().expect("a checked Ctxt is not used again")
    }

    /// Records an error spanning `tokens`.
    pub(crate) fn error_spanned_by(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.errors().push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at `span`.
    pub(crate) fn error_at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.errors().push(syn::Error::new(span, message));
    }

    /// Records a parse error.
    pub(crate) fn syn_error(&mut self, err: syn::Error) {
        self.errors().push(err);
    }

    /// Whether no error was recorded so far.
    pub(crate) fn is_ok(&self) -> bool {
        self.errors.as_ref().is_some_and(Vec::is_empty)
    }

    /// All recorded errors, combined into one.
    pub(crate) fn check(mut self) -> syn::Result<()> {
        let mut errors = self.errors.take().expect("a Ctxt is checked once").into_iter();
        match errors.next() {
            None => Ok(()),
            Some(mut first) => {
                for e in errors {
                    first.combine(e);
                }
                Err(first)
            }
        }
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        if !std::thread::panicking() && self.errors.is_some() {
            panic!("loopstack-macros: a Ctxt was dropped without being checked");
        }
    }
}
