//! The `#[tool]` and `#[workflow]` macros of loopstack (being written).
use proc_macro::TokenStream;

/// Placeholder.
#[proc_macro_attribute]
pub fn tool(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// Placeholder.
#[proc_macro_attribute]
pub fn workflow(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
