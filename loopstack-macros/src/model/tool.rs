//! The model of `#[tool]`: an `async fn`, or an impl block with an `async fn handle`.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::{Attribute, FnArg, Ident, ImplItem, ItemImpl, Pat, Path, Signature, Type, Visibility};

use super::{Output, RefKind, cfg_attrs, default_crate, last_segment, reference_kind};
use crate::ctxt::Ctxt;
use crate::docs::{Text, doc_text, is_doc};
use crate::names::{is_valid_tool_name, pascal_case, snake_case};
use crate::parse::{self, RawFn, ToolArgs};

/// A checked `#[tool]`.
pub(crate) struct ToolModel {
    pub(crate) krate: Path,
    pub(crate) name: String,
    pub(crate) description: Text,
    /// Seconds; 0 means 24 hours.
    pub(crate) timeout: Option<u64>,
    pub(crate) concurrent: Option<bool>,
    pub(crate) approve: Option<bool>,
    pub(crate) needs_run: Option<bool>,
    pub(crate) effect: Option<Effect>,
    pub(crate) cfgs: Vec<Attribute>,
    pub(crate) form: Form,
}

/// `effect = ..`: the variant of `ToolOptions`' `Effect` it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    AtLeastOnce,
    Idempotent,
    AtMostOnce,
}

impl Effect {
    /// The spellings, in the order the error lists them.
    const ALL: [(&'static str, Self); 3] =
        [("at_least_once", Self::AtLeastOnce), ("idempotent", Self::Idempotent), ("at_most_once", Self::AtMostOnce)];

    fn from_ident(cx: &mut Ctxt, ident: &Ident) -> Option<Self> {
        let found = Self::ALL.iter().find(|(name, _)| ident == name).map(|(_, e)| *e);
        if found.is_none() {
            cx.error_spanned_by(
                ident,
                format!(
                    "unknown effect `{ident}`; `effect` is one of `at_least_once` (the default), `idempotent` or \
                     `at_most_once`"
                ),
            );
        }
        found
    }

    /// The variant's name in `Effect`.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Self::AtLeastOnce => "AtLeastOnce",
            Self::Idempotent => "Idempotent",
            Self::AtMostOnce => "AtMostOnce",
        }
    }
}

pub(crate) enum Form {
    Fn(FnForm),
    Impl(ImplForm),
}

/// `#[tool] async fn get_weather(..)`.
pub(crate) struct FnForm {
    /// The user's fn, with parameter docs and `serde`/`schemars` attributes moved off.
    pub(crate) item: RawFn,
    /// `GetWeather`.
    pub(crate) struct_ident: Ident,
    pub(crate) params: Vec<FnParam>,
    pub(crate) output: Output,
}

pub(crate) enum FnParam {
    /// One field of the arguments struct.
    Arg { ident: Ident, ty: Box<Type>, attrs: Vec<Attribute> },
    /// The `&ToolContext` parameter.
    Context,
}

/// `#[tool] impl OrderStatus { async fn handle(&self, args: OrderQuery, cx: &ToolContext) .. }`.
pub(crate) struct ImplForm {
    pub(crate) item: ItemImpl,
    pub(crate) self_ty: Type,
    pub(crate) handle: Ident,
    /// The parameters after `&self`, in order.
    pub(crate) params: Vec<HandleParam>,
    pub(crate) output: Output,
}

pub(crate) enum HandleParam {
    Args(Box<Type>),
    Context,
}

impl ImplForm {
    /// The arguments type, when `handle` takes one.
    pub(crate) fn args(&self) -> Option<&Type> {
        self.params.iter().find_map(|p| match p {
            HandleParam::Args(ty) => Some(&**ty),
            HandleParam::Context => None,
        })
    }
}

/// What is emitted when a check failed: the user's item (helper attributes moved off)
/// and, when its type is known, a stub `Tool` impl so that uses of the tool elsewhere
/// do not add errors of their own.
pub(crate) struct ToolFailure {
    pub(crate) error: syn::Error,
    pub(crate) item: TokenStream,
    pub(crate) stub: Option<ToolStub>,
}

pub(crate) struct ToolStub {
    pub(crate) krate: Path,
    pub(crate) cfgs: Vec<Attribute>,
    pub(crate) target: StubTarget,
}

pub(crate) enum StubTarget {
    /// The fn form's unit struct, which must still exist.
    Struct { vis: Visibility, ident: Ident },
    /// The impl form's own type.
    Type(Box<Type>),
}

const PLACEMENT: &str = "`#[tool]` goes on an `async fn` or on an inherent `impl` block with an `async fn handle`";

impl ToolModel {
    pub(crate) fn from_syn(args: TokenStream, item: TokenStream) -> Result<Self, Box<ToolFailure>> {
        let mut cx = Ctxt::new();
        let args = match syn::parse2::<ToolArgs>(args) {
            Ok(args) => Some(args),
            Err(e) => {
                cx.syn_error(e);
                None
            }
        };
        let krate = args.as_ref().and_then(|a| a.krate.as_ref()).map_or_else(default_crate, |k| k.clone());
        match parse::item(item.clone()) {
            parse::Item::Fn(f) => fn_form(cx, args, krate, f),
            parse::Item::Impl(imp) => impl_form(cx, args, krate, imp),
            parse::Item::Other => {
                cx.error_at(Span::call_site(), PLACEMENT);
                Err(Box::new(ToolFailure { error: cx.check().expect_err("just recorded"), item, stub: None }))
            }
        }
    }
}

/// The name, description and options, checked against what the item provides.
struct Common {
    name: String,
    description: Text,
    timeout: Option<u64>,
    concurrent: Option<bool>,
    approve: Option<bool>,
    needs_run: Option<bool>,
    effect: Option<Effect>,
}

fn common(cx: &mut Ctxt, args: &ToolArgs, default_name: &Ident, docs: &[Attribute], what: &str) -> Option<Common> {
    let name = match &args.name {
        Some(lit) => {
            let name = lit.value();
            if !is_valid_tool_name(&name) {
                cx.error_spanned_by(
                    lit,
                    format!("tool name `{name}` is invalid: use 1 to 64 ASCII letters, digits, `_` or `-`"),
                );
            }
            name
        }
        None => {
            let name = snake_case(&default_name.to_string());
            if !is_valid_tool_name(&name) {
                cx.error_spanned_by(
                    default_name,
                    format!(
                        "the tool name `{name}` taken from this {what} is invalid: use 1 to 64 ASCII letters, \
                         digits, `_` or `-`, or set `#[tool(name = \"..\")]`"
                    ),
                );
            }
            name
        }
    };
    let description = match &args.description {
        Some(lit) => {
            let text = lit.value();
            if text.trim().is_empty() {
                cx.error_spanned_by(lit, "the tool description is empty; the model reads it to pick the tool");
            }
            Some(Text::Lit(text))
        }
        None => doc_text(docs),
    };
    let Some(description) = description else {
        cx.error_spanned_by(
            default_name,
            format!(
                "this tool has no description: add a `///` doc comment to the {what} or set \
                 `#[tool(description = \"..\")]`; the model reads it to decide when to call the tool"
            ),
        );
        return None;
    };
    let timeout = args.timeout.as_ref().and_then(|t| match t.base10_parse::<u64>() {
        Ok(secs) => Some(secs),
        Err(_) => {
            cx.error_spanned_by(t, "`timeout` is a whole number of seconds (`0` means 24 hours)");
            None
        }
    });
    let effect = args.effect.as_ref().and_then(|ident| Effect::from_ident(cx, ident));
    Some(Common {
        name,
        description,
        timeout,
        effect,
        concurrent: args.concurrent.as_ref().map(|c| c.value),
        approve: args.approve.as_ref().map(|c| c.value),
        needs_run: args.needs_run.as_ref().map(|c| c.value),
    })
}

/// `needs_run` hands the call its runtime through the context: a handler that
/// takes no `&ToolContext` could never read it, so the option is an error there,
/// at its token.
fn check_needs_run(cx: &mut Ctxt, args: Option<&ToolArgs>, context_seen: bool, add: &str) {
    if let Some(flag) = args.and_then(|a| a.needs_run.as_ref()).filter(|f| f.value)
        && !context_seen
    {
        cx.error_spanned_by(
            flag,
            format!(
                "`needs_run` gives the call its runtime through its context, which this tool does not take: add \
                 {add} and read the runtime with `cx.runtime()?`"
            ),
        );
    }
}

fn check_sig_basics(cx: &mut Ctxt, sig: &Signature, what: &str) {
    if sig.asyncness.is_none() {
        cx.error_spanned_by(sig.fn_token, format!("{what} must be an `async fn`"));
    }
    if let Some(c) = &sig.constness {
        cx.error_spanned_by(c, format!("{what} cannot be `const`"));
    }
    if let Some(u) = &sig.unsafety {
        cx.error_spanned_by(u, format!("{what} cannot be `unsafe`"));
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(abi, format!("{what} cannot have an `extern` ABI"));
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            format!("{what} cannot be generic: the JSON Schema of its arguments is fixed at compile time"),
        );
    } else if let Some(w) = &sig.generics.where_clause {
        cx.error_spanned_by(w, format!("{what} cannot have a `where` clause"));
    }
    if let Some(v) = &sig.variadic {
        cx.error_spanned_by(v, format!("{what} cannot be variadic"));
    }
}

fn fn_form(mut cx: Ctxt, args: Option<ToolArgs>, krate: Path, mut item: RawFn) -> Result<ToolModel, Box<ToolFailure>> {
    let cfgs = cfg_attrs(&item.attrs);
    let fn_ident = item.sig.ident.clone();
    let struct_ident = Ident::new(&pascal_case(&fn_ident.to_string()), fn_ident.span());
    check_sig_basics(&mut cx, &item.sig, "a `#[tool]` fn");

    let mut params = Vec::new();
    let mut context_seen = false;
    // A fn with `self` is a method inside an impl block, where nothing else may be emitted.
    let mut is_method = false;
    for input in &mut item.sig.inputs {
        let pat_ty = match input {
            FnArg::Receiver(r) => {
                is_method = true;
                cx.error_spanned_by(
                    &*r,
                    "a `#[tool]` fn takes no `self`; for a tool with state, put `#[tool]` on the impl block \
                     and name the method `handle`",
                );
                continue;
            }
            FnArg::Typed(p) => p,
        };
        // Parameter docs and `serde`/`schemars` attributes belong to the arguments
        // struct's field; rustc rejects them on a fn parameter.
        let (moved, kept): (Vec<Attribute>, Vec<Attribute>) = std::mem::take(&mut pat_ty.attrs)
            .into_iter()
            .partition(|a| is_doc(a) || a.path().is_ident("serde") || a.path().is_ident("schemars"));
        pat_ty.attrs = kept;
        for a in &pat_ty.attrs {
            if a.path().is_ident("cfg") || a.path().is_ident("cfg_attr") {
                cx.error_spanned_by(a, "a `#[tool]` parameter cannot be `#[cfg]`-dependent");
            }
        }
        match reference_kind(&pat_ty.ty) {
            Some(RefKind::Context) => {
                if context_seen {
                    cx.error_spanned_by(&pat_ty.ty, "a `#[tool]` fn takes at most one `&ToolContext` parameter");
                }
                if let Some(a) = moved.first() {
                    cx.error_spanned_by(
                        a,
                        "the `&ToolContext` parameter is not an argument; it takes no docs or attributes",
                    );
                }
                context_seen = true;
                params.push(FnParam::Context);
                continue;
            }
            Some(RefKind::MutContext) => {
                cx.error_spanned_by(&pat_ty.ty, "take the context as `&ToolContext`");
                continue;
            }
            Some(RefKind::Other) => {
                cx.error_spanned_by(
                    &pat_ty.ty,
                    "tool arguments are deserialized from the model's JSON and must be owned (e.g. `String` for \
                     `&str`); only the `&ToolContext` parameter is a reference",
                );
                continue;
            }
            None => {}
        }
        if let Type::ImplTrait(t) = &*pat_ty.ty {
            cx.error_spanned_by(t, "a `#[tool]` parameter needs a concrete type, not `impl Trait`");
            continue;
        }
        let ident = match &*pat_ty.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
            other => {
                cx.error_spanned_by(
                    other,
                    "a `#[tool]` parameter is a plain name: it is the argument's key in the model's JSON",
                );
                continue;
            }
        };
        params.push(FnParam::Arg { ident, ty: pat_ty.ty.clone(), attrs: moved });
    }

    check_needs_run(&mut cx, args.as_ref(), context_seen, "a `cx: &ToolContext` parameter");
    let common = args.as_ref().and_then(|args| common(&mut cx, args, &fn_ident, &item.attrs, "fn"));
    let output = Output::of(&item.sig.output, fn_ident.span());
    let stub = ToolStub {
        krate: krate.clone(),
        cfgs: cfgs.clone(),
        target: StubTarget::Struct { vis: item.vis.clone(), ident: struct_ident.clone() },
    };
    match (cx.check(), common) {
        (Ok(()), Some(c)) => Ok(ToolModel {
            krate,
            name: c.name,
            description: c.description,
            timeout: c.timeout,
            concurrent: c.concurrent,
            approve: c.approve,
            needs_run: c.needs_run,
            effect: c.effect,
            cfgs,
            form: Form::Fn(FnForm { item, struct_ident, params, output }),
        }),
        (Err(error), _) => {
            let stub = (!is_method).then_some(stub);
            Err(Box::new(ToolFailure { error, item: item.into_token_stream(), stub }))
        }
        (Ok(()), None) => unreachable!("a missing description is recorded as an error"),
    }
}

fn impl_form(mut cx: Ctxt, args: Option<ToolArgs>, krate: Path, item: ItemImpl) -> Result<ToolModel, Box<ToolFailure>> {
    let cfgs = cfg_attrs(&item.attrs);
    let fail = |cx: Ctxt, item: &ItemImpl, stub: Option<ToolStub>| {
        Box::new(ToolFailure {
            error: cx.check().expect_err("an error was recorded"),
            item: item.to_token_stream(),
            stub,
        })
    };
    if let Some((_, path, _)) = &item.trait_ {
        cx.error_spanned_by(
            path,
            "`#[tool]` goes on an inherent impl block (`impl MyTool { .. }`); it writes the `Tool` impl itself",
        );
        return Err(fail(cx, &item, None));
    }
    let type_ident = match last_segment(&item.self_ty) {
        Some(seg) => seg.ident.clone(),
        None => {
            cx.error_spanned_by(&item.self_ty, "`#[tool]` needs a named type here, such as `impl MyTool`");
            return Err(fail(cx, &item, None));
        }
    };
    if !item.generics.params.is_empty() {
        cx.error_spanned_by(
            &item.generics,
            "a `#[tool]` impl cannot be generic: the JSON Schema of its arguments is fixed at compile time",
        );
        return Err(fail(cx, &item, None));
    }
    let stub = ToolStub { krate: krate.clone(), cfgs: cfgs.clone(), target: StubTarget::Type(item.self_ty.clone()) };

    let handle = item.items.iter().find_map(|i| match i {
        ImplItem::Fn(f) if f.sig.ident == "handle" => Some(&f.sig),
        _ => None,
    });
    let handle_ident = handle.map_or_else(|| Ident::new("handle", Span::call_site()), |sig| sig.ident.clone());
    let mut params = Vec::new();
    let mut output = Output::Value { span: type_ident.span() };
    let mut context_seen = false;
    match handle {
        None => cx.error_spanned_by(
            &item.self_ty,
            "a `#[tool]` impl block needs the handler `async fn handle(&self, args: Args) -> ..`, where `Args` \
             derives `Deserialize` and `JsonSchema`; a `&ToolContext` parameter is optional",
        ),
        Some(sig) => {
            check_sig_basics(&mut cx, sig, "`handle`");
            output = Output::of(&sig.output, sig.ident.span());
            let mut inputs = sig.inputs.iter();
            match inputs.next() {
                Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
                Some(other) => cx.error_spanned_by(other, "`handle` takes `&self` first"),
                None => cx.error_spanned_by(&sig.ident, "`handle` takes `&self` first"),
            }
            let mut args_seen = false;
            for input in inputs {
                let FnArg::Typed(p) = input else { continue };
                match reference_kind(&p.ty) {
                    Some(RefKind::Context) if !context_seen => {
                        context_seen = true;
                        params.push(HandleParam::Context);
                    }
                    Some(RefKind::MutContext) => cx.error_spanned_by(&p.ty, "take the context as `&ToolContext`"),
                    Some(RefKind::Other) => cx.error_spanned_by(
                        &p.ty,
                        "take the arguments by value: they are deserialized from the model's JSON",
                    ),
                    None if !args_seen => {
                        args_seen = true;
                        params.push(HandleParam::Args(p.ty.clone()));
                    }
                    _ => cx.error_spanned_by(
                        p,
                        "`handle` takes `&self`, one arguments parameter and an optional `&ToolContext`; put \
                         every argument in the arguments struct",
                    ),
                }
            }
        }
    }
    if handle.is_some() {
        check_needs_run(&mut cx, args.as_ref(), context_seen, "a `cx: &ToolContext` parameter to `handle`");
    }
    let common = args.as_ref().and_then(|args| common(&mut cx, args, &type_ident, &item.attrs, "`impl` block"));
    match (cx.is_ok(), common) {
        (true, Some(c)) => {
            cx.check().expect("no errors");
            Ok(ToolModel {
                krate,
                name: c.name,
                description: c.description,
                timeout: c.timeout,
                concurrent: c.concurrent,
                approve: c.approve,
                needs_run: c.needs_run,
                effect: c.effect,
                cfgs,
                form: Form::Impl(ImplForm {
                    self_ty: (*item.self_ty).clone(),
                    item,
                    handle: handle_ident,
                    params,
                    output,
                }),
            })
        }
        _ => Err(fail(cx, &item, Some(stub))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn model(args: TokenStream, item: TokenStream) -> Result<ToolModel, String> {
        ToolModel::from_syn(args, item).map_err(|f| f.error.to_string())
    }

    #[test]
    fn effects_by_name() {
        let item = quote! {
            /// Refunds an order.
            async fn refund(order: String) -> String { order }
        };
        for (args, effect) in [
            (quote!(effect = at_most_once), Some(Effect::AtMostOnce)),
            (quote!(effect = idempotent), Some(Effect::Idempotent)),
            (quote!(effect = at_least_once), Some(Effect::AtLeastOnce)),
            (quote!(), None),
        ] {
            assert_eq!(model(args, item.clone()).unwrap().effect, effect);
        }
        let err = model(quote!(effect = twice), item.clone()).err().unwrap();
        assert!(err.starts_with("unknown effect `twice`"), "{err}");
        let err = model(quote!(effect = idempotent, effect = at_most_once), item).err().unwrap();
        assert_eq!(err, "duplicate `effect`; each option is given once");
    }

    #[test]
    fn fn_form_defaults() {
        let m = model(
            quote!(),
            quote! {
                /// Retrieve weather information.
                async fn get_weather(
                    /// City or location name
                    location: String,
                    unit: Option<String>,
                    cx: &ToolContext,
                ) -> Result<String, ToolError> { todo!() }
            },
        )
        .unwrap();
        assert_eq!(m.name, "get_weather");
        assert_eq!(m.description, Text::Lit("Retrieve weather information.".into()));
        let Form::Fn(f) = &m.form else { panic!("fn form") };
        assert_eq!(f.struct_ident, "GetWeather");
        assert!(matches!(f.output, Output::Result { .. }));
        let kinds: Vec<String> = f
            .params
            .iter()
            .map(|p| match p {
                FnParam::Arg { ident, attrs, .. } => format!("{ident}:{}", attrs.len()),
                FnParam::Context => "cx".into(),
            })
            .collect();
        assert_eq!(kinds, ["location:1", "unit:0", "cx"]);
        // The parameter's doc comment is moved off the fn.
        assert!(!f.item.to_token_stream().to_string().contains("City"));
    }

    #[test]
    fn fn_form_options() {
        let m = model(
            quote!(name = "weather", description = "Weather.", timeout = 0, concurrent = false),
            quote!(
                async fn get_weather() -> String {
                    todo!()
                }
            ),
        )
        .unwrap();
        assert_eq!((m.name.as_str(), m.timeout, m.concurrent), ("weather", Some(0), Some(false)));
    }

    #[test]
    fn fn_form_errors() {
        let cases = [
            (
                quote!(),
                quote!(
                    async fn f() {}
                ),
                "this tool has no description",
            ),
            (
                quote!(name = "a b", description = "x"),
                quote!(
                    async fn f() {}
                ),
                "tool name `a b` is invalid",
            ),
            (
                quote!(description = "x"),
                quote!(
                    fn f() {}
                ),
                "a `#[tool]` fn must be an `async fn`",
            ),
            (
                quote!(description = "x"),
                quote!(
                    async fn f<T>(t: T) {}
                ),
                "cannot be generic",
            ),
            (
                quote!(description = "x"),
                quote!(
                    async fn f(s: &str) {}
                ),
                "must be owned",
            ),
            (
                quote!(description = "x"),
                quote!(
                    async fn f((a, b): (u8, u8)) {}
                ),
                "plain name",
            ),
            (
                quote!(description = "x"),
                quote!(
                    async fn f(&self) {}
                ),
                "takes no `self`",
            ),
            (
                quote!(descripton = "x"),
                quote!(
                    async fn f() {}
                ),
                "expected one of: `name`, `description`",
            ),
            (
                quote!(description = "x"),
                quote!(
                    struct S;
                ),
                "goes on an `async fn`",
            ),
        ];
        for (args, item, expected) in cases {
            let err = model(args, item).err().unwrap();
            assert!(err.starts_with(expected) || err.contains(expected), "{err:?} vs {expected:?}");
        }
    }

    #[test]
    fn attribute_errors_do_not_cascade() {
        // A broken attribute must not also report a missing description.
        let f = ToolModel::from_syn(
            quote!(nam = "x"),
            quote!(
                async fn f() {}
            ),
        )
        .err()
        .unwrap();
        assert_eq!(f.error.into_iter().count(), 1);
    }

    #[test]
    fn impl_form() {
        let m = model(
            quote!(),
            quote! {
                /// Look up an order's status.
                impl OrderStatus {
                    async fn handle(&self, args: OrderQuery, cx: &ToolContext) -> Result<OrderReport, ToolError> { todo!() }
                    fn helper(&self) {}
                }
            },
        )
        .unwrap();
        assert_eq!(m.name, "order_status");
        let Form::Impl(i) = &m.form else { panic!("impl form") };
        assert_eq!(i.args().unwrap().to_token_stream().to_string(), "OrderQuery");
        assert_eq!(i.params.len(), 2);
    }

    #[test]
    fn impl_form_errors() {
        let cases = [
            (
                quote!(
                    /** D */
                    impl T {
                        async fn run(&self) {}
                    }
                ),
                "needs the handler `async fn handle",
            ),
            (
                quote!(
                    /** D */
                    impl T {
                        fn handle(&self) {}
                    }
                ),
                "`handle` must be an `async fn`",
            ),
            (
                quote!(
                    /** D */
                    impl T {
                        async fn handle(self) {}
                    }
                ),
                "`handle` takes `&self` first",
            ),
            (
                quote!(
                    /** D */
                    impl T {
                        async fn handle() {}
                    }
                ),
                "`handle` takes `&self` first",
            ),
            (
                quote!(
                    /** D */
                    impl<X> T<X> {
                        async fn handle(&self) {}
                    }
                ),
                "cannot be generic",
            ),
            (
                quote!(
                    /** D */
                    impl Tool for T {}
                ),
                "inherent impl block",
            ),
            (
                quote!(
                    /** D */
                    impl T {
                        async fn handle(&self, a: A, b: B) {}
                    }
                ),
                "one arguments parameter",
            ),
        ];
        for (item, expected) in cases {
            let err = model(quote!(), item).err().unwrap();
            assert!(err.contains(expected), "{err:?} vs {expected:?}");
        }
    }
}
