//! Doc comments as data: the description a model reads.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, Expr, ExprLit, Lit, Meta};

/// A description taken from doc comments or from `description = ".."`.
#[derive(Clone)]
#[cfg_attr(test, derive(Debug))]
pub(crate) enum Text {
    /// Known at expansion time.
    Lit(String),
    /// `#[doc = include_str!(..)]` and the like: a `concat!` expression.
    Expr(TokenStream),
}

#[cfg(test)]
impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Lit(a), Self::Lit(b)) => a == b,
            (Self::Expr(a), Self::Expr(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

impl Text {
    pub(crate) fn to_tokens(&self) -> TokenStream {
        match self {
            Self::Lit(s) => quote!(#s),
            Self::Expr(tokens) => tokens.clone(),
        }
    }
}

pub(crate) fn is_doc(attr: &Attribute) -> bool {
    attr.path().is_ident("doc")
}

/// The doc comment on `attrs`, with each line's single leading space trimmed, lines
/// joined with `\n` and blank lines at either edge dropped; `None` when there is none
/// or it is blank.
pub(crate) fn doc_text(attrs: &[Attribute]) -> Option<Text> {
    let mut lines: Vec<String> = Vec::new();
    let mut exprs: Vec<TokenStream> = Vec::new();
    let mut all_literal = true;
    for attr in attrs.iter().filter(|a| is_doc(a)) {
        let Meta::NameValue(nv) = &attr.meta else {
            continue;
        };
        match &nv.value {
            Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => {
                let value = s.value();
                for line in value.lines() {
                    lines.push(line.strip_prefix(' ').unwrap_or(line).trim_end().to_owned());
                }
                if value.is_empty() {
                    lines.push(String::new());
                }
                let trimmed = value.strip_prefix(' ').unwrap_or(&value).to_owned();
                exprs.push(quote!(#trimmed));
            }
            other => {
                all_literal = false;
                exprs.push(quote!(#other));
            }
        }
    }
    if all_literal {
        let first = lines.iter().position(|l| !l.trim().is_empty())?;
        let last = lines.iter().rposition(|l| !l.trim().is_empty())?;
        Some(Text::Lit(lines[first..=last].join("\n")))
    } else {
        let mut joined = TokenStream::new();
        for (i, e) in exprs.iter().enumerate() {
            if i > 0 {
                joined.extend(quote!(, "\n",));
            }
            joined.extend(e.clone());
        }
        Some(Text::Expr(quote!(::core::concat!(#joined))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn doc_lines() {
        let attrs: Vec<Attribute> = vec![
            parse_quote!(#[doc = ""]),
            parse_quote!(#[doc = " Retrieve weather information."]),
            parse_quote!(#[doc = ""]),
            parse_quote!(#[doc = "  Indented stays indented by one."]),
            parse_quote!(#[doc = " "]),
        ];
        assert_eq!(
            doc_text(&attrs),
            Some(Text::Lit("Retrieve weather information.\n\n Indented stays indented by one.".into()))
        );
        assert_eq!(doc_text(&[parse_quote!(#[doc = "  "])]), None);
        assert_eq!(doc_text(&[parse_quote!(#[allow(dead_code)])]), None);
    }

    #[test]
    fn doc_expressions() {
        let attrs: Vec<Attribute> = vec![parse_quote!(#[doc = " Intro."]), parse_quote!(#[doc = include_str!("x.md")])];
        let Some(Text::Expr(e)) = doc_text(&attrs) else { panic!("expected an expression") };
        let e = e.to_string();
        assert!(e.contains("concat") && e.contains("include_str"), "{e}");
    }
}
