//! `#[tool]` -> a `Tool` impl (and, for the fn form, the unit struct it is for).

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};

use super::{at, respan};
use crate::model::tool::{FnParam, Form, HandleParam, StubTarget, ToolFailure, ToolModel, ToolStub};
use crate::model::{Output, path_string};

pub(crate) fn tool(m: &ToolModel) -> TokenStream {
    let krate = &m.krate;
    let p = quote!(#krate::__private);
    let cfgs = &m.cfgs;
    let name = &m.name;
    let description = m.description.to_tokens();
    let options = options(m, &p);
    let str_ = quote!(::core::primitive::str);
    let common = quote! {
        fn name(&self) -> &#str_ {
            #name
        }
        fn description(&self) -> &#str_ {
            #description
        }
        #options
    };
    let hygiene = block_imports(&p);
    match &m.form {
        Form::Fn(f) => {
            let item = &f.item;
            let vis = &f.item.vis;
            let fn_ident = &f.item.sig.ident;
            let struct_ident = &f.struct_ident;
            let args_ident = format_ident!("__loopstack_Args");
            // Fields without `serde`/`schemars` attributes get a type parameter, so that
            // a field type missing `Deserialize` or `JsonSchema` is one error, at the
            // user's type in the turbofish of the helper fns below.
            let mut params = Vec::new();
            let mut fields = Vec::new();
            let mut generic_tys = Vec::new();
            for (i, param) in f.params.iter().enumerate() {
                let FnParam::Arg { ident, ty, attrs } = param else { continue };
                let plain = attrs.iter().all(crate::docs::is_doc);
                if plain {
                    let param = format_ident!("__LoopstackA{}", i);
                    fields.push(quote!(#(#attrs)* #ident: #param));
                    params.push(param);
                    generic_tys.push(ty);
                } else {
                    fields.push(quote!(#(#attrs)* #ident: #ty));
                }
            }
            let bindings = f.params.iter().filter_map(|param| match param {
                FnParam::Arg { ident, .. } => Some(ident),
                FnParam::Context => None,
            });
            let call_args = f.params.iter().map(|param| match param {
                FnParam::Arg { ident, .. } => ident.to_token_stream(),
                FnParam::Context => quote!(__loopstack_cx),
            });
            let args_struct = args_struct(&p, &args_ident, quote!(<#(#params),*> { #(#fields,)* }));
            let args_ty = quote!(#args_ident<#(#params),*>);
            let value = quote_spanned!(at(fn_ident.span())=> #fn_ident(#(#call_args),*).await);
            let ret = convert(&p, f.output, value);
            let doc = struct_doc(&f.item.attrs, fn_ident, name);
            let async_token = quote_spanned!(at(fn_ident.span())=> async);
            quote! {
                #item

                #(#cfgs)*
                #doc
                #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::marker::Copy, ::core::default::Default)]
                #vis struct #struct_ident;

                #(#cfgs)*
                const _: () = {
                    #args_struct

                    fn __loopstack_parse<#(#params: #p::serde::de::DeserializeOwned),*>(
                        args: #p::serde_json::Value,
                    ) -> #p::Result<#args_ty, #p::ToolError> {
                        #p::parse_tool_arguments::<#args_ty>(#name, args)
                    }

                    fn __loopstack_schema<#(#params: #p::schemars::JsonSchema),*>() -> #p::serde_json::Value {
                        #p::tool_input_schema::<#args_ty>()
                    }

                    #hygiene

                    #[automatically_derived]
                    #[#p::async_trait]
                    impl #p::Tool for #struct_ident {
                        #common
                        fn input_schema(&self) -> #p::serde_json::Value {
                            __loopstack_schema::<#(#generic_tys),*>()
                        }
                        #async_token fn call(
                            &self,
                            __loopstack_args: #p::serde_json::Value,
                            __loopstack_cx: &#p::ToolContext,
                        ) -> #p::Result<#p::ToolOutput, #p::ToolError> {
                            let #args_ident { #(#bindings),* } =
                                __loopstack_parse::<#(#generic_tys),*>(__loopstack_args)?;
                            #ret
                        }
                    }
                };
            }
        }
        Form::Impl(i) => {
            let item = &i.item;
            let self_ty = &i.self_ty;
            let handle = &i.handle;
            let (args_ty, args_struct) = match i.args() {
                Some(ty) => (ty.to_token_stream(), TokenStream::new()),
                None => {
                    let ident = format_ident!("__loopstack_NoArgs");
                    (ident.to_token_stream(), args_struct(&p, &ident, quote!({})))
                }
            };
            let args_span = i.args().map_or_else(Span::call_site, |ty| at(syn::spanned::Spanned::span(ty)));
            let call_args = i.params.iter().map(|param| match param {
                HandleParam::Args(_) => quote!(__loopstack_args),
                HandleParam::Context => quote!(__loopstack_cx),
            });
            let ps = respan(&p, args_span);
            let schema = quote_spanned!(args_span=> #ps::tool_input_schema::<#args_ty>());
            let parse = quote_spanned!(args_span=> #ps::parse_tool_arguments::<#args_ty>(#name, __loopstack_args));
            let async_token = quote_spanned!(at(handle.span())=> async);
            let value = quote_spanned!(at(handle.span())=> Self::#handle(self, #(#call_args),*).await);
            let ret = convert(&p, i.output, value);
            let bind = if i.args().is_some() { quote!(__loopstack_args) } else { quote!(_) };
            quote! {
                #item

                #(#cfgs)*
                const _: () = {
                    #args_struct

                    #hygiene

                    #[automatically_derived]
                    #[#p::async_trait]
                    impl #p::Tool for #self_ty {
                        #common
                        fn input_schema(&self) -> #p::serde_json::Value {
                            #schema
                        }
                        #async_token fn call(
                            &self,
                            __loopstack_args: #p::serde_json::Value,
                            __loopstack_cx: &#p::ToolContext,
                        ) -> #p::Result<#p::ToolOutput, #p::ToolError> {
                            let #bind = #parse?;
                            #ret
                        }
                    }
                };
            }
        }
    }
}

/// Imports at the top of the generated `const _` block, which shadow whatever the
/// user's module calls these names: `async_trait` writes a bare `Box`, and the serde
/// and schemars derives of the arguments struct write bare primitive types.
fn block_imports(p: &TokenStream) -> TokenStream {
    quote! {
        #[allow(unused_imports)]
        use #p::Box;
        #[allow(unused_imports)]
        use ::core::primitive::{
            bool, char, f32, f64, i8, i16, i32, i64, i128, isize, str, u8, u16, u32, u64, u128, usize,
        };
    }
}

/// The hidden struct the arguments deserialize into.
fn args_struct(p: &TokenStream, ident: &syn::Ident, body: TokenStream) -> TokenStream {
    let serde = path_string(&syn::parse_quote!(#p::serde));
    let schemars = path_string(&syn::parse_quote!(#p::schemars));
    quote! {
        #[derive(#p::serde::Deserialize, #p::schemars::JsonSchema)]
        #[serde(crate = #serde)]
        #[schemars(crate = #schemars)]
        #[allow(non_camel_case_types)]
        struct #ident #body
    }
}

fn options(m: &ToolModel, p: &TokenStream) -> TokenStream {
    if m.timeout.is_none()
        && m.concurrent.is_none()
        && m.approve.is_none()
        && m.needs_run.is_none()
        && m.effect.is_none()
    {
        return TokenStream::new();
    }
    let timeout = m.timeout.map(|secs| quote!(.timeout(::core::time::Duration::from_secs(#secs))));
    let concurrent = m.concurrent.map(|c| quote!(.concurrent(#c)));
    let approve = m.approve.map(|c| quote!(.approve(#c)));
    let needs_run = m.needs_run.map(|c| quote!(.needs_run(#c)));
    let effect = m.effect.map(|e| {
        let variant = format_ident!("{}", e.variant());
        quote!(.effect(#p::Effect::#variant))
    });
    quote! {
        fn options(&self) -> #p::ToolOptions {
            #p::ToolOptions::new() #timeout #concurrent #approve #needs_run #effect
        }
    }
}

/// The handler's value as `Result<ToolOutput, ToolError>`: text stays text, other
/// `Serialize` values become JSON, and an `Err` goes through `tool_error`.
fn convert(p: &TokenStream, output: Output, value: TokenStream) -> TokenStream {
    let to_output = |v: TokenStream, span: Span| {
        let span = at(span);
        let p = respan(p, span);
        quote_spanned! {span=> {
            use #p::{ViaIntoToolOutput as _, ViaSerialize as _};
            (&&#p::OutputSlot::new(#v)).__loopstack_output()
        }}
    };
    match output {
        Output::Result { ok, err } => {
            let converted = to_output(quote!(__loopstack_ok), ok);
            let err = at(err);
            let pe = respan(p, err);
            let error = quote_spanned!(err=> #pe::tool_error(__loopstack_err));
            quote! {
                match #value {
                    #p::Ok(__loopstack_ok) => #p::Ok(#converted),
                    #p::Err(__loopstack_err) => #p::Err(#error),
                }
            }
        }
        Output::Value { span } => {
            let converted = to_output(value, span);
            quote!(#p::Ok(#converted))
        }
    }
}

fn struct_doc(fn_attrs: &[syn::Attribute], fn_ident: &syn::Ident, name: &str) -> TokenStream {
    let head = format!(" The `{name}` tool, generated by `#[tool]` from the fn `{fn_ident}`.");
    let docs = fn_attrs.iter().filter(|a| crate::docs::is_doc(a));
    let blank = (fn_attrs.iter().any(crate::docs::is_doc)).then(|| quote!(#[doc = ""]));
    quote! {
        #[doc = #head]
        #blank
        #(#docs)*
    }
}

/// The user's item, a compile error, and a stub so uses of the tool add no errors.
pub(crate) fn tool_fallback(f: &ToolFailure) -> TokenStream {
    let item = &f.item;
    let error = f.error.to_compile_error();
    let stub = f.stub.as_ref().map(stub);
    quote! {
        #item
        #stub
        #error
    }
}

fn stub(s: &ToolStub) -> TokenStream {
    let krate = &s.krate;
    let p = quote!(#krate::__private);
    let cfgs = &s.cfgs;
    let (decl, ty) = match &s.target {
        StubTarget::Struct { vis, ident } => (
            Some(quote! {
                #(#cfgs)*
                #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::marker::Copy, ::core::default::Default)]
                #[allow(missing_docs)]
                #vis struct #ident;
            }),
            ident.to_token_stream(),
        ),
        StubTarget::Type(ty) => (None, ty.to_token_stream()),
    };
    let str_ = quote!(::core::primitive::str);
    let hygiene = block_imports(&p);
    quote! {
        #decl
        #(#cfgs)*
        const _: () = {
            #hygiene
            #[#p::async_trait]
            impl #p::Tool for #ty {
                fn name(&self) -> &#str_ {
                    ::core::unreachable!()
                }
                fn description(&self) -> &#str_ {
                    ::core::unreachable!()
                }
                fn input_schema(&self) -> #p::serde_json::Value {
                    ::core::unreachable!()
                }
                async fn call(
                    &self,
                    _: #p::serde_json::Value,
                    _: &#p::ToolContext,
                ) -> #p::Result<#p::ToolOutput, #p::ToolError> {
                    ::core::unreachable!()
                }
            }
        };
    }
}
