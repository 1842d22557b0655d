//! Stage 1: the attribute arguments, parsed by hand (`custom_keyword!` + `lookahead1`).
//!
//! Only syntax lives here; what the values mean is checked in `model`.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, TokenStreamExt as _};
use syn::parse::{Parse, ParseStream, Parser as _};
use syn::spanned::Spanned as _;
use syn::{
    Attribute, Block, Expr, Ident, ImplItem, ItemImpl, LitBool, LitInt, LitStr, Path, Signature, Stmt, Token, Type,
    Visibility, bracketed,
};

pub(crate) mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(description);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(concurrent);
    syn::custom_keyword!(approve);
    syn::custom_keyword!(needs_run);
    syn::custom_keyword!(effect);
    syn::custom_keyword!(input);
    syn::custom_keyword!(state);
    syn::custom_keyword!(definition);
    syn::custom_keyword!(fork_check);
    syn::custom_keyword!(on_create);
    syn::custom_keyword!(from);
    syn::custom_keyword!(to);
    syn::custom_keyword!(priority);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(after);
    syn::custom_keyword!(version);
}

/// The one helper every option goes through: a key may be given once.
fn set_once<T>(slot: &mut Option<T>, key: Span, name: &str, value: T) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(key, format!("duplicate `{name}`; each option is given once")));
    }
    *slot = Some(value);
    Ok(())
}

/// Parses `key = value` pairs separated by commas, calling `one` for each key.
fn parse_list(input: ParseStream<'_>, mut one: impl FnMut(ParseStream<'_>) -> syn::Result<()>) -> syn::Result<()> {
    while !input.is_empty() {
        one(input)?;
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(())
}

fn crate_path(input: ParseStream<'_>) -> syn::Result<Path> {
    input.parse::<Token![=]>()?;
    Path::parse_mod_style(input)
}

fn value<T: Parse>(input: ParseStream<'_>) -> syn::Result<T> {
    input.parse::<Token![=]>()?;
    input.parse()
}

/// `#[tool(name = "..", description = "..", timeout = 10, concurrent = false, approve, needs_run,
/// effect = at_most_once, crate = path)]`
#[derive(Default)]
pub(crate) struct ToolArgs {
    pub(crate) name: Option<LitStr>,
    pub(crate) description: Option<LitStr>,
    pub(crate) timeout: Option<LitInt>,
    pub(crate) concurrent: Option<LitBool>,
    /// `approve` or `approve = true|false`.
    pub(crate) approve: Option<LitBool>,
    /// `needs_run` or `needs_run = true|false`.
    pub(crate) needs_run: Option<LitBool>,
    /// `effect = at_least_once|idempotent|at_most_once`: an ident, checked in `model`.
    pub(crate) effect: Option<Ident>,
    pub(crate) krate: Option<Path>,
}

impl Parse for ToolArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Self::default();
        parse_list(input, |input| {
            let lh = input.lookahead1();
            if lh.peek(kw::name) {
                let key = input.parse::<kw::name>()?.span;
                set_once(&mut args.name, key, "name", value(input)?)
            } else if lh.peek(kw::description) {
                let key = input.parse::<kw::description>()?.span;
                set_once(&mut args.description, key, "description", value(input)?)
            } else if lh.peek(kw::timeout) {
                let key = input.parse::<kw::timeout>()?.span;
                set_once(&mut args.timeout, key, "timeout", value(input)?)
            } else if lh.peek(kw::concurrent) {
                let key = input.parse::<kw::concurrent>()?.span;
                set_once(&mut args.concurrent, key, "concurrent", value(input)?)
            } else if lh.peek(kw::approve) {
                let key = input.parse::<kw::approve>()?.span;
                let flag = if input.peek(Token![=]) { value(input)? } else { LitBool::new(true, key) };
                set_once(&mut args.approve, key, "approve", flag)
            } else if lh.peek(kw::needs_run) {
                let key = input.parse::<kw::needs_run>()?.span;
                let flag = if input.peek(Token![=]) { value(input)? } else { LitBool::new(true, key) };
                set_once(&mut args.needs_run, key, "needs_run", flag)
            } else if lh.peek(kw::effect) {
                let key = input.parse::<kw::effect>()?.span;
                input.parse::<Token![=]>()?;
                let effect = input.parse::<Ident>().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "expected `at_least_once`, `idempotent` or `at_most_once`: the effect is a name, not a string",
                    )
                })?;
                set_once(&mut args.effect, key, "effect", effect)
            } else if lh.peek(Token![crate]) {
                let key = input.parse::<Token![crate]>()?.span;
                set_once(&mut args.krate, key, "crate", crate_path(input)?)
            } else {
                Err(lh.error())
            }
        })?;
        Ok(args)
    }
}

/// `#[workflow(name = "..", version = N, input = Type, state = Type, definition = path, fork_check = path,
/// on_create = path, crate = path)]`
#[derive(Default)]
pub(crate) struct WorkflowArgs {
    pub(crate) name: Option<LitStr>,
    /// `version = N`; `model` checks it is a `u32` of at least 1.
    pub(crate) version: Option<LitInt>,
    pub(crate) input: Option<Type>,
    pub(crate) state: Option<Type>,
    pub(crate) definition: Option<Path>,
    pub(crate) fork_check: Option<Path>,
    pub(crate) on_create: Option<Path>,
    pub(crate) krate: Option<Path>,
}

impl Parse for WorkflowArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Self::default();
        parse_list(input, |input| {
            let lh = input.lookahead1();
            if lh.peek(kw::name) {
                let key = input.parse::<kw::name>()?.span;
                set_once(&mut args.name, key, "name", value(input)?)
            } else if lh.peek(kw::version) {
                let key = input.parse::<kw::version>()?.span;
                set_once(&mut args.version, key, "version", value(input)?)
            } else if lh.peek(kw::input) {
                let key = input.parse::<kw::input>()?.span;
                set_once(&mut args.input, key, "input", value(input)?)
            } else if lh.peek(kw::state) {
                let key = input.parse::<kw::state>()?.span;
                set_once(&mut args.state, key, "state", value(input)?)
            } else if lh.peek(kw::definition) {
                let key = input.parse::<kw::definition>()?.span;
                set_once(&mut args.definition, key, "definition", value(input)?)
            } else if lh.peek(kw::fork_check) {
                let key = input.parse::<kw::fork_check>()?.span;
                set_once(&mut args.fork_check, key, "fork_check", value(input)?)
            } else if lh.peek(kw::on_create) {
                let key = input.parse::<kw::on_create>()?.span;
                set_once(&mut args.on_create, key, "on_create", value(input)?)
            } else if lh.peek(Token![crate]) {
                let key = input.parse::<Token![crate]>()?.span;
                set_once(&mut args.krate, key, "crate", crate_path(input)?)
            } else {
                Err(lh.error())
            }
        })?;
        Ok(args)
    }
}

/// `#[transition(from = A | [A, B], to = B, priority = 10, wait)]` or, instead of
/// `wait`, `after = "48h"` or `after = Self::method`.
#[derive(Default)]
pub(crate) struct TransitionArgs {
    pub(crate) from: Option<Vec<Ident>>,
    pub(crate) to: Option<Ident>,
    pub(crate) priority: Option<i32>,
    pub(crate) wait: Option<()>,
    pub(crate) after: Option<After>,
}

/// `after = "48h"` or `after = Self::method`: the key's span (where `after` beside
/// `wait` is reported) and the delay as written (`model` reads it).
pub(crate) struct After {
    pub(crate) key: Span,
    pub(crate) value: AfterValue,
}

/// What `after = ..` says.
pub(crate) enum AfterValue {
    /// A duration, checked at compile time: `"48h"`.
    Literal(LitStr),
    /// The method that gives the delay at run time, as `on_create = path` names one:
    /// `Self::escalation`, called as `path(self, state)`.
    Method(Path),
}

fn places(input: ParseStream<'_>) -> syn::Result<Vec<Ident>> {
    input.parse::<Token![=]>()?;
    if input.peek(syn::token::Bracket) {
        let content;
        let brackets = bracketed!(content in input);
        let list = content.parse_terminated(Ident::parse, Token![,])?;
        if list.is_empty() {
            return Err(syn::Error::new(brackets.span.join(), "`from` lists at least one place"));
        }
        Ok(list.into_iter().collect())
    } else {
        Ok(vec![place(input)?])
    }
}

fn place(input: ParseStream<'_>) -> syn::Result<Ident> {
    let lh = input.lookahead1();
    if lh.peek(Ident) { input.parse() } else { Err(lh.error()) }
}

fn after(input: ParseStream<'_>, key: Span) -> syn::Result<After> {
    const FORMS: &str = concat!(
        "`after` is a duration in a string, such as `after = \"48h\"`, ",
        "or the method that gives it, such as `after = Self::escalation`"
    );
    input.parse::<Token![=]>()?;
    if input.peek(LitStr) {
        return Ok(After { key, value: AfterValue::Literal(input.parse()?) });
    }
    if input.peek(Token![Self]) || input.peek(Ident) || input.peek(Token![::]) {
        let path = input.parse::<Path>().map_err(|e| syn::Error::new(e.span(), FORMS))?;
        return Ok(After { key, value: AfterValue::Method(path) });
    }
    let span = if input.is_empty() { input.span() } else { input.parse::<TokenTree>()?.span() };
    Err(syn::Error::new(span, FORMS))
}

fn priority(input: ParseStream<'_>) -> syn::Result<i32> {
    input.parse::<Token![=]>()?;
    let minus: Option<Token![-]> = input.parse()?;
    let lit: LitInt = input.parse()?;
    let magnitude: i64 =
        lit.base10_parse().map_err(|_| syn::Error::new(lit.span(), "`priority` is an `i32`, such as `10` or `-1`"))?;
    let value = if minus.is_some() { -magnitude } else { magnitude };
    let value = i32::try_from(value)
        .map_err(|_| syn::Error::new(lit.span(), "`priority` is an `i32`, such as `10` or `-1`"))?;
    Ok(value)
}

impl Parse for TransitionArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Self::default();
        parse_list(input, |input| {
            let lh = input.lookahead1();
            if lh.peek(kw::from) {
                let key = input.parse::<kw::from>()?.span;
                set_once(&mut args.from, key, "from", places(input)?)
            } else if lh.peek(kw::to) {
                let key = input.parse::<kw::to>()?.span;
                input.parse::<Token![=]>()?;
                set_once(&mut args.to, key, "to", place(input)?)
            } else if lh.peek(kw::priority) {
                let key = input.parse::<kw::priority>()?.span;
                set_once(&mut args.priority, key, "priority", priority(input)?)
            } else if lh.peek(kw::wait) {
                let key = input.parse::<kw::wait>()?.span;
                set_once(&mut args.wait, key, "wait", ())
            } else if lh.peek(kw::after) {
                let key = input.parse::<kw::after>()?.span;
                set_once(&mut args.after, key, "after", after(input, key)?)
            } else {
                Err(lh.error())
            }
        })?;
        Ok(args)
    }
}

/// `#[guard(method)]`
pub(crate) struct GuardArgs {
    pub(crate) method: Ident,
}

impl Parse for GuardArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let method: Ident = input
            .parse()
            .map_err(|e| syn::Error::new(e.span(), "expected the guard method's name: `#[guard(method)]`"))?;
        if !input.is_empty() {
            return Err(syn::Error::new(
                input.span(),
                "`#[guard]` takes one method name; combine several conditions in one method",
            ));
        }
        Ok(Self { method })
    }
}

/// `#[migrate(from = N)]`: the older version whose runs the method migrates.
pub(crate) struct MigrateArgs {
    pub(crate) from: LitInt,
}

impl Parse for MigrateArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut from = None;
        parse_list(input, |input| {
            let lh = input.lookahead1();
            if lh.peek(kw::from) {
                let key = input.parse::<kw::from>()?.span;
                set_once(&mut from, key, "from", value(input)?)
            } else {
                Err(lh.error())
            }
        })?;
        from.map(|from| Self { from })
            .ok_or_else(|| syn::Error::new(input.span(), "write the older version: `#[migrate(from = 1)]`"))
    }
}

/// The arguments of `#[migrate(from = N)]`.
pub(crate) fn migrate_args(attr: &syn::Attribute) -> syn::Result<MigrateArgs> {
    match &attr.meta {
        syn::Meta::List(list) => list.parse_args(),
        _ => Err(syn::Error::new_spanned(attr, "write the older version: `#[migrate(from = 1)]`")),
    }
}

/// The arguments of `#[transition]`; a bare `#[transition]` has none.
pub(crate) fn transition_args(attr: &syn::Attribute) -> syn::Result<TransitionArgs> {
    match &attr.meta {
        syn::Meta::Path(_) => Ok(TransitionArgs::default()),
        syn::Meta::List(list) => list.parse_args(),
        syn::Meta::NameValue(nv) => Err(syn::Error::new(nv.eq_token.span(), "write `#[transition(..)]`")),
    }
}

/// The argument of `#[guard(method)]`.
pub(crate) fn guard_args(attr: &syn::Attribute) -> syn::Result<GuardArgs> {
    match &attr.meta {
        syn::Meta::List(list) => list.parse_args(),
        _ => Err(syn::Error::new_spanned(attr, "expected the guard method's name: `#[guard(method)]`")),
    }
}

/// A fn whose body is kept as raw tokens: the macros never look inside it, and a body
/// that does not parse yet (while typing in an IDE) still expands.
pub(crate) struct RawFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    pub(crate) body: Group,
}

impl ToTokens for RawFn {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.append_all(&self.attrs);
        self.vis.to_tokens(tokens);
        self.sig.to_tokens(tokens);
        tokens.append(self.body.clone());
    }
}

/// What an attribute macro was put on.
pub(crate) enum Item {
    Fn(RawFn),
    Impl(ItemImpl),
    Other,
}

/// Parses the annotated item: a fn (body kept raw), an impl block, or something else.
pub(crate) fn item(tokens: TokenStream) -> Item {
    let as_fn = |input: ParseStream<'_>| -> syn::Result<RawFn> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let body: Group = input.parse()?;
        if body.delimiter() != Delimiter::Brace {
            return Err(syn::Error::new(body.span(), "expected a fn body"));
        }
        Ok(RawFn { attrs, vis, sig, body })
    };
    if let Ok(f) = as_fn.parse2(tokens.clone()) {
        return Item::Fn(f);
    }
    match syn::parse2::<ItemImpl>(tokens.clone()) {
        Ok(imp) => Item::Impl(imp),
        Err(_) => impl_with_raw_bodies(tokens).map_or(Item::Other, Item::Impl),
    }
}

/// Parses an impl block one of whose method bodies does not parse: each method body is
/// set aside, the impl parsed without them, and the bodies put back as raw tokens.
fn impl_with_raw_bodies(tokens: TokenStream) -> Option<ItemImpl> {
    let mut trees: Vec<TokenTree> = tokens.into_iter().collect();
    let Some(TokenTree::Group(body)) = trees.last() else {
        return None;
    };
    if body.delimiter() != Delimiter::Brace {
        return None;
    }
    let mut bodies = Vec::new();
    let mut after_fn = false;
    let mut hollow = TokenStream::new();
    for tree in body.stream() {
        match &tree {
            TokenTree::Ident(i) if i == "fn" => after_fn = true,
            TokenTree::Punct(p) if p.as_char() == ';' => after_fn = false,
            TokenTree::Group(g) if after_fn && g.delimiter() == Delimiter::Brace => {
                after_fn = false;
                let marker = Ident::new(&format!("__loopstack_body_{}", bodies.len()), Span::call_site());
                let mut placeholder = Group::new(Delimiter::Brace, marker.into_token_stream());
                placeholder.set_span(g.span());
                bodies.push(g.clone());
                hollow.append(placeholder);
                continue;
            }
            _ => {}
        }
        hollow.append(tree);
    }
    let mut new_body = Group::new(Delimiter::Brace, hollow);
    new_body.set_span(body.span());
    *trees.last_mut().expect("checked above") = TokenTree::Group(new_body);
    let mut imp: ItemImpl = syn::parse2(trees.into_iter().collect()).ok()?;
    for item in &mut imp.items {
        let ImplItem::Fn(f) = item else { continue };
        let index = match f.block.stmts.as_slice() {
            [Stmt::Expr(Expr::Path(p), None)] => {
                p.path.get_ident().and_then(|i| i.to_string().strip_prefix("__loopstack_body_")?.parse::<usize>().ok())
            }
            _ => None,
        };
        if let Some(original) = index.and_then(|i| bodies.get(i)) {
            f.block = Block {
                brace_token: syn::token::Brace(original.delim_span()),
                stmts: vec![Stmt::Expr(Expr::Verbatim(original.stream()), None)],
            };
        }
    }
    Some(imp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_args() {
        let args: TransitionArgs = syn::parse_str("from = [A, B], to = C, priority = -3, wait").unwrap();
        let from: Vec<String> = args.from.unwrap().iter().map(Ident::to_string).collect();
        assert_eq!(from, ["A", "B"]);
        assert_eq!(args.to.unwrap(), "C");
        assert_eq!(args.priority.unwrap(), -3);
        assert!(args.wait.is_some());
        let args: TransitionArgs = syn::parse_str(r#"from = A, to = B, after = "1h30m""#).unwrap();
        let AfterValue::Literal(lit) = args.after.unwrap().value else { panic!("a literal") };
        assert_eq!(lit.value(), "1h30m");
        let args: TransitionArgs = syn::parse_str("from = A, to = B, after = Self::escalation, priority = 1").unwrap();
        let AfterValue::Method(path) = args.after.unwrap().value else { panic!("a method") };
        assert_eq!(path.to_token_stream().to_string(), "Self :: escalation");
        assert_eq!(args.priority, Some(1));
    }

    #[test]
    fn after_is_a_string_or_a_method() {
        for text in [
            "to = A, after = 48",
            "to = A, after = 48h",
            "to = A, after = 1.5",
            "to = A, after = Self::",
            "to = A, after =",
        ] {
            let err = syn::parse_str::<TransitionArgs>(text).err().unwrap();
            assert_eq!(
                err.to_string(),
                "`after` is a duration in a string, such as `after = \"48h\"`, or the method that gives it, such as \
                 `after = Self::escalation`",
                "{text}"
            );
        }
    }

    #[test]
    fn duplicate_and_unknown_keys() {
        let err = syn::parse_str::<TransitionArgs>("to = A, to = B").err().unwrap();
        assert_eq!(err.to_string(), "duplicate `to`; each option is given once");
        let err = syn::parse_str::<TransitionArgs>("form = A").err().unwrap();
        assert_eq!(err.to_string(), "expected one of: `from`, `to`, `priority`, `wait`, `after`");
        let err = syn::parse_str::<ToolArgs>("timeout = 1, timeout = 2").err().unwrap();
        assert_eq!(err.to_string(), "duplicate `timeout`; each option is given once");
        let err = syn::parse_str::<WorkflowArgs>("crate = ::a, crate = b").err().unwrap();
        assert_eq!(err.to_string(), "duplicate `crate`; each option is given once");
    }

    #[test]
    fn items() {
        assert!(matches!(
            item(quote::quote!(
                async fn f(a: u8) -> u8 {
                    a
                }
            )),
            Item::Fn(_)
        ));
        assert!(matches!(
            item(quote::quote!(
                struct S;
            )),
            Item::Other
        ));
        let Item::Impl(imp) = item(quote::quote!(impl W { fn ok(&self) {} fn broken(&self) { let x = ; } })) else {
            panic!("an impl with a broken body still parses")
        };
        let text = imp.into_token_stream().to_string();
        assert!(text.contains("let x = ;"), "{text}");
        let Item::Fn(f) = item(quote::quote!(async fn f() { let x = ; })) else { panic!("raw fn body") };
        assert_eq!(f.sig.ident, "f");
    }

    #[test]
    fn migrate_and_version_args() {
        let args: MigrateArgs = syn::parse_str("from = 2").unwrap();
        assert_eq!(args.from.base10_parse::<u32>().unwrap(), 2);
        let err = syn::parse_str::<MigrateArgs>("from = 1, from = 2").err().unwrap();
        assert_eq!(err.to_string(), "duplicate `from`; each option is given once");
        let err = syn::parse_str::<MigrateArgs>("to = 1").err().unwrap();
        assert_eq!(err.to_string(), "expected `from`");
        let err = syn::parse_str::<MigrateArgs>("").err().unwrap();
        assert_eq!(err.to_string(), "write the older version: `#[migrate(from = 1)]`");
        let args: WorkflowArgs = syn::parse_str(r#"name = "triage", version = 3"#).unwrap();
        assert_eq!(args.version.unwrap().base10_parse::<u32>().unwrap(), 3);
    }

    #[test]
    fn priority_range() {
        let err = syn::parse_str::<TransitionArgs>("to = A, priority = 3000000000").err().unwrap();
        assert_eq!(err.to_string(), "`priority` is an `i32`, such as `10` or `-1`");
    }
}
