//! `#[workflow]` -> the stripped impl block, the place enum, the signal enum, the
//! static `Definition` and the `Workflow` impl.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned as _;

use super::{at, respan};
use crate::model::workflow::{Outline, Place, SignalEnum, WorkflowFailure, WorkflowModel};

pub(crate) fn workflow(m: &WorkflowModel) -> TokenStream {
    let Outline { krate, item, places, input, cfgs, .. } = &m.outline;
    let p = quote!(#krate::__private);
    let self_ty = &item.self_ty;
    let (impl_generics, _, where_clause) = item.generics.split_for_impl();
    let state = &m.state;
    let name = &m.name;
    let enums = outline_enums(&m.outline, false);
    // The schema of a wait transition that takes no payload: `null`.
    let null_schema = m.transitions.iter().any(|t| t.wait && t.payload.is_none()).then(|| {
        quote! {
            fn __loopstack_null_schema() -> #p::serde_json::Value {
                #p::serde_json::Value::Object(::core::iter::FromIterator::from_iter([(
                    #p::String::from("type"),
                    #p::serde_json::Value::String(#p::String::from("null")),
                )]))
            }
        }
    });

    let place_names = places.iter().map(|pl| &pl.name);
    let defs = m.transitions.iter().map(|t| {
        let method = t.method.to_string();
        let method = method.trim_start_matches("r#");
        let from = t.from.iter().map(|&i| &places[i].name);
        let to = &places[t.to].name;
        let priority = t.priority.map(|n| quote!(.priority(#n)));
        let guard = t.guard.map(|g| {
            let g = m.guards[g].method.to_string();
            let g = g.trim_start_matches("r#").to_owned();
            quote!(.guard(#g))
        });
        let wait = t.wait.then(|| match &t.payload {
            Some(ty) => {
                let schema = quote_spanned!(at(syn::spanned::Spanned::span(ty))=> #p::payload_schema::<#ty>);
                let check = quote_spanned!(at(syn::spanned::Spanned::span(ty))=> #p::payload_check::<#ty>);
                quote!(.wait(#schema).check(#check))
            }
            None => quote!(.wait(__loopstack_null_schema).check(#p::payload_check::<()>)),
        });
        let after = t.after.map(|ms| quote!(.after(::core::time::Duration::from_millis(#ms))));
        let after_fn = t.after_fn.as_ref().and_then(|path| path.segments.last()).map(|segment| {
            let name = segment.ident.to_string();
            let name = name.trim_start_matches("r#");
            quote!(.after_fn(#name))
        });
        quote!(#p::TransitionDef::new(#method, &[#(#from),*], #to) #priority #guard #wait #after #after_fn)
    });

    let (input, init) = match input {
        None => (state.to_token_stream(), quote!(__loopstack_input)),
        Some(input) => {
            let span = at(syn::spanned::Spanned::span(input));
            let state = respan(&state.to_token_stream(), span);
            let init = quote_spanned!(span=> <#state as ::core::convert::From<#input>>::from(__loopstack_input));
            (input.to_token_stream(), init)
        }
    };

    let guard_arms = m.guards.iter().enumerate().map(|(g, guard)| {
        let indices = m.transitions.iter().enumerate().filter(|(_, t)| t.guard == Some(g)).map(|(i, _)| i);
        let method = &guard.method;
        let ty = quote_spanned!(at(guard.reference.span())=> fn(&Self, &#state) -> ::core::primitive::bool);
        let value = quote_spanned!(at(method.span())=> Self::#method);
        quote! {
            #(#indices)|* => {
                let __loopstack_guard: #ty = #value;
                __loopstack_guard(self, __loopstack_state)
            }
        }
    });

    // Written only for a table with a computed delay; the trait's default reads the
    // fixed ones from the table.
    let timer = m.transitions.iter().any(|t| t.after_fn.is_some()).then(|| {
        let arms = m.transitions.iter().enumerate().filter_map(|(i, t)| {
            let path = t.after_fn.as_ref()?;
            let span = at(path.span());
            let ty = quote_spanned!(span=> fn(&Self, &#state) -> ::core::time::Duration);
            let value = quote_spanned!(span=> #path);
            Some(quote! {
                #i => {
                    let __loopstack_timer: #ty = #value;
                    #p::Some(__loopstack_timer(self, __loopstack_state))
                }
            })
        });
        let fixed = m.transitions.iter().enumerate().filter_map(|(i, t)| {
            let ms = t.after?;
            Some(quote!(#i => #p::Some(::core::time::Duration::from_millis(#ms)),))
        });
        quote! {
            fn timer(
                &self,
                __loopstack_transition: ::core::primitive::usize,
                __loopstack_state: &Self::State,
            ) -> #p::Option<::core::time::Duration> {
                match __loopstack_transition {
                    #(#arms)*
                    #(#fixed)*
                    _ => #p::None,
                }
            }
        }
    });

    let transition_arms = m.transitions.iter().enumerate().map(|(i, t)| {
        let method = &t.method;
        let state_arg = quote_spanned!(at(t.state_span)=> __loopstack_state);
        let cx_arg = quote_spanned!(at(t.cx_span)=> __loopstack_cx);
        let (payload, payload_arg) = match &t.payload {
            Some(ty) => {
                let span = at(syn::spanned::Spanned::span(ty));
                let ps = respan(&p, span);
                let decode = quote_spanned!(span=> #ps::signal_payload::<#ty>(__loopstack_payload));
                (
                    quote! {
                        let __loopstack_payload = match #decode {
                            #p::Ok(__loopstack_payload) => __loopstack_payload,
                            #p::Err(__loopstack_err) => return #p::Err(__loopstack_err),
                        };
                    },
                    Some(quote!(__loopstack_payload)),
                )
            }
            // A wait transition without a payload takes `null`.
            None if t.wait => (
                quote! {
                    if let #p::Err(__loopstack_err) = #p::signal_payload::<()>(__loopstack_payload) {
                        return #p::Err(__loopstack_err);
                    }
                },
                None,
            ),
            None => (quote!(let _ = __loopstack_payload;), None),
        };
        let call = quote_spanned!(at(method.span())=>
            Self::#method(self, #state_arg, #cx_arg, #payload_arg).await
        );
        let out = at(t.output_span);
        let po = respan(&p, out);
        let result = quote_spanned!(out=> #po::Result::map_err(__loopstack_result, #po::transition_error));
        let pm = respan(&p, at(method.span()));
        let future = quote_spanned!(at(method.span())=> #pm::Box::pin(async move {
            #payload
            let __loopstack_result = #call;
            #result
        }));
        quote!(#i => #future,)
    });
    let unknown = format!("workflow `{name}` has no transition with this index");
    let describe = m.description.as_ref().map(|text| {
        let text = text.to_tokens();
        quote!(.with_description(#text))
    });
    let version = (m.version != 1).then(|| {
        let v = m.version;
        quote!(.with_version(#v))
    });
    let migrates_from = (!m.migrations.is_empty()).then(|| {
        let from = m.migrations.iter().map(|mg| mg.from);
        quote!(.with_migrations(&[#(#from),*]))
    });
    let migrate = (!m.migrations.is_empty()).then(|| migrate_fn(m));
    let fork_check = m.fork_check.as_ref().map(|path| {
        let call = quote_spanned!(path.span()=> #path(self, __loopstack_settings));
        quote! {
            fn check_fork(
                &self,
                __loopstack_settings: &#p::ForkSettings,
            ) -> #p::Result<(), #p::ForkError> {
                #call
            }
        }
    });
    let on_create = m.on_create.as_ref().map(|path| {
        let call = quote_spanned!(path.span()=> #path(self, __loopstack_state, __loopstack_cx));
        quote! {
            fn on_create(
                &self,
                __loopstack_state: &mut Self::State,
                __loopstack_cx: &mut #p::RunContext,
            ) -> #p::Result<(), #p::BoxError> {
                #p::Result::map_err(#call, ::core::convert::Into::into)
            }
        }
    });
    let definition = match &m.definition {
        Some(path) => quote_spanned!(path.span()=> #path(self, &__LOOPSTACK_DEFINITION)),
        None => quote!(&__LOOPSTACK_DEFINITION),
    };

    quote! {
        #item

        #enums

        #(#cfgs)*
        const _: () = {
            #null_schema

            static __LOOPSTACK_DEFINITION: #p::Definition = #p::Definition::new(
                #name,
                &[#(#place_names),*],
                &[#(#defs),*],
            )#describe #version #migrates_from;

            #[automatically_derived]
            impl #impl_generics #p::Workflow for #self_ty #where_clause {
                type State = #state;
                type Input = #input;

                fn definition(&self) -> &'static #p::Definition {
                    #definition
                }

                fn init(&self, __loopstack_input: Self::Input) -> Self::State {
                    #init
                }

                #migrate
                #fork_check
                #on_create

                fn input_schema(&self) -> #p::Option<#p::serde_json::Value> {
                    #[allow(unused_imports)]
                    use #p::{ViaJsonSchema as _, ViaNoSchema as _};
                    (&&#p::SchemaProbe::<Self::Input>::new()).__loopstack_schema()
                }

                fn guard(
                    &self,
                    __loopstack_transition: ::core::primitive::usize,
                    __loopstack_state: &Self::State,
                ) -> ::core::primitive::bool {
                    match __loopstack_transition {
                        #(#guard_arms)*
                        _ => true,
                    }
                }

                #timer

                fn transition<'__loopstack_a>(
                    &'__loopstack_a self,
                    __loopstack_transition: ::core::primitive::usize,
                    __loopstack_state: &'__loopstack_a mut Self::State,
                    __loopstack_cx: &'__loopstack_a mut #p::RunContext,
                    __loopstack_payload: #p::Option<#p::serde_json::Value>,
                ) -> #p::BoxFuture<'__loopstack_a, #p::Result<(), #p::TransitionError>> {
                    match __loopstack_transition {
                        #(#transition_arms)*
                        _ => #p::Box::pin(async move {
                            let _ = (__loopstack_state, __loopstack_cx, __loopstack_payload);
                            #p::Err(#p::TransitionError::failed(#unknown))
                        }),
                    }
                }
            }
        };
    }
}

/// `Workflow::migrate`: a match on the version a run comes from, each arm reading the
/// stored state and place as the older version's types (errors at those types when
/// they do not fit) and the method's return as this table's state and place enum
/// (an error at the return type when it is not).
fn migrate_fn(m: &WorkflowModel) -> TokenStream {
    let Outline { krate, enum_ident, .. } = &m.outline;
    let p = quote!(#krate::__private);
    let arms = m.migrations.iter().map(|mg| {
        let from = mg.from;
        let method = &mg.method;
        let old = &mg.state;
        let old_span = at(syn::spanned::Spanned::span(old));
        let ps = respan(&p, old_span);
        let state = quote_spanned!(old_span=> #ps::migration_state::<#old>(__loopstack_state));
        let place = mg.place.as_ref().map(|ty| {
            let span = at(syn::spanned::Spanned::span(ty));
            let pp = respan(&p, span);
            quote_spanned!(span=> #pp::migration_place::<#ty>(__loopstack_place))
        });
        let place_arg = place.as_ref().map(|_| quote!(__loopstack_old_place));
        let read_place = place.map(|place| {
            quote! {
                let __loopstack_old_place = match #place {
                    #p::Ok(__loopstack_place) => __loopstack_place,
                    #p::Err(__loopstack_err) => return #p::Err(__loopstack_err),
                };
            }
        });
        let receiver = mg.receiver.then(|| quote!(self,));
        let call = quote_spanned!(at(method.span())=> Self::#method(#receiver __loopstack_old, #place_arg));
        let out = at(mg.output_span);
        let po = respan(&p, out);
        let migrated = quote_spanned!(out=> #po::migrated::<Self::State, #enum_ident, _>(#call));
        quote! {
            #from => {
                let __loopstack_old = match #state {
                    #p::Ok(__loopstack_old) => __loopstack_old,
                    #p::Err(__loopstack_err) => return #p::Err(__loopstack_err),
                };
                #read_place
                match #migrated {
                    #p::Ok((__loopstack_new, __loopstack_to)) => #p::Ok((__loopstack_new, __loopstack_to.as_str())),
                    #p::Err(__loopstack_err) => #p::Err(__loopstack_err),
                }
            }
        }
    });
    quote! {
        fn migrate(
            &self,
            __loopstack_from: ::core::primitive::u32,
            __loopstack_place: &::core::primitive::str,
            __loopstack_state: &::core::primitive::str,
        ) -> #p::Result<(Self::State, &'static ::core::primitive::str), #p::BoxError> {
            match __loopstack_from {
                #(#arms)*
                _ => {
                    let _ = (__loopstack_place, __loopstack_state);
                    #p::Err(#p::Box::from(::std::format!("version {} has no migration", __loopstack_from)))
                }
            }
        }
    }
}

/// What the outline gives in either case: the place enum and the signal enum
/// (`fallback` after a failed check, when places may be misspelled).
fn outline_enums(o: &Outline, fallback: bool) -> TokenStream {
    let self_ty = o.item.self_ty.to_token_stream();
    let place_enum = place_enum(&o.krate, &o.enum_ident, &o.places, &self_ty, &o.cfgs, fallback);
    let signal_enum = o.signal.as_ref().map(|sig| signal_enum(&o.krate, sig, &o.item, &o.cfgs));
    quote! {
        #place_enum
        #signal_enum
    }
}

fn place_enum(
    krate: &syn::Path,
    ident: &syn::Ident,
    places: &[Place],
    self_ty: &TokenStream,
    cfgs: &[syn::Attribute],
    fallback: bool,
) -> TokenStream {
    let workflow = self_ty.to_string().replace(' ', "");
    let doc = format!(" The places of the `{workflow}` workflow, generated by `#[workflow]`.");
    let usage = format!(
        " A place is shown and stored as its snake_case name ([`{ident}::as_str`]); use it with \
         `WorkflowExt::route` and `next_transition` to test routing."
    );
    let last = places.len().saturating_sub(1);
    let variants = places.iter().enumerate().map(|(i, pl)| {
        let v = &pl.ident;
        let doc = match i {
            0 => format!(" `{}`: where every run begins.", pl.name),
            i if i == last => format!(" `{}`: where a run ends.", pl.name),
            _ => format!(" `{}`.", pl.name),
        };
        quote!(#[doc = #doc] #v)
    });
    let all = places.iter().map(|pl| &pl.ident);
    let arms = places.iter().map(|pl| {
        let v = &pl.ident;
        let name = &pl.name;
        quote!(Self::#v => #name)
    });
    let by_name = places.iter().map(|pl| {
        let v = &pl.ident;
        let name = &pl.name;
        quote!(#name => ::core::option::Option::Some(Self::#v))
    });
    let str_ = quote!(::core::primitive::str);
    // On an error, places may be misspelled; the error says so, not a lint.
    let allow_case = fallback.then(|| quote!(#[allow(non_camel_case_types)]));
    quote! {
        #(#cfgs)*
        #allow_case
        #[doc = #doc]
        #[doc = ""]
        #[doc = #usage]
        #[derive(
            ::core::fmt::Debug,
            ::core::clone::Clone,
            ::core::marker::Copy,
            ::core::cmp::PartialEq,
            ::core::cmp::Eq,
            ::core::hash::Hash,
        )]
        #[allow(unreachable_pub, dead_code)]
        pub enum #ident {
            #(#variants,)*
        }

        #(#cfgs)*
        #[allow(unreachable_pub, dead_code)]
        impl #ident {
            /// Every place: `Start` first, `End` last, the others in order of first appearance.
            pub const ALL: &'static [Self] = &[#(Self::#all),*];

            /// The place's stable snake_case name, as stored in runs and drawn in diagrams.
            pub const fn as_str(self) -> &'static #str_ {
                match self {
                    #(#arms,)*
                }
            }
        }

        #(#cfgs)*
        #[automatically_derived]
        impl #krate::__private::FromPlaceName for #ident {
            fn from_place_name(__loopstack_name: &#str_) -> ::core::option::Option<Self> {
                match __loopstack_name {
                    #(#by_name,)*
                    _ => ::core::option::Option::None,
                }
            }
        }

        #(#cfgs)*
        #[automatically_derived]
        impl ::core::convert::AsRef<#str_> for #ident {
            fn as_ref(&self) -> &#str_ {
                self.as_str()
            }
        }

        #(#cfgs)*
        #[automatically_derived]
        impl ::core::fmt::Display for #ident {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    }
}

/// `pub enum <Type>Signal` and its `IntoSignal` impl.
///
/// The impl holds when every payload type implements `Serialize`, and only then: the
/// bounds name a type parameter (the workflow `__LoopstackW`, or the workflow type's own
/// generics), so rustc checks them where a signal is sent rather than here, and a
/// workflow whose payloads only deserialize still compiles.
fn signal_enum(krate: &syn::Path, s: &SignalEnum, item: &syn::ItemImpl, cfgs: &[syn::Attribute]) -> TokenStream {
    let p = quote!(#krate::__private);
    let ident = &s.ident;
    let self_ty = &item.self_ty;
    let workflow = self_ty.to_token_stream().to_string().replace(' ', "");
    let doc = format!(
        " The signals of the `{workflow}` workflow, generated by `#[workflow]`: one variant per wait transition, \
         carrying its payload."
    );
    let usage = match s.variants.first() {
        Some(v) => {
            let example =
                if v.payload.is_some() { format!("{ident}::{}(..)", v.ident) } else { format!("{ident}::{}", v.ident) };
            format!(
                " Send one with `runtime.signal(&workflow, run_id, {example})`: the variant names the wait \
                 transition and its payload is serialized to JSON, so the signal's name and payload type are \
                 checked at compile time. It implements `IntoSignal<{workflow}>` when every payload type implements \
                 `Serialize`; a unit variant sends `null`. It derives nothing, as payload types need not implement \
                 `Debug` or `Clone`."
            )
        }
        None => format!(" `{workflow}` has no wait transitions, so no signals."),
    };
    let variants = s.variants.iter().map(|v| {
        let from = v.from.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
        let mut doc = format!(" Fires the wait transition `{}` ({from} -> `{}`).", v.signal, v.to);
        if v.payload.is_none() {
            doc.push_str(" It takes no payload: it sends `null`.");
        }
        let id = &v.ident;
        match &v.payload {
            Some(ty) => quote!(#[doc = #doc] #id(#ty)),
            None => quote!(#[doc = #doc] #id),
        }
    });

    let generic = !item.generics.params.is_empty();
    // The workflow the impl is for: a type parameter when the workflow type is not
    // generic, so that the payload bounds are not global.
    let w = if generic { self_ty.to_token_stream() } else { quote!(__LoopstackW) };
    let payload_bounds = s.variants.iter().filter_map(|v| v.payload.as_ref()).map(|ty| {
        let span = at(syn::spanned::Spanned::span(ty));
        let ps = respan(&p, span);
        quote_spanned!(span=> __LoopstackPayload<#w, #ty>: #ps::serde::Serialize)
    });
    let own_bounds = item.generics.where_clause.as_ref().map(|w| w.predicates.iter());
    let own_bounds = own_bounds.into_iter().flatten();
    let header = if generic {
        let (impl_generics, _, _) = item.generics.split_for_impl();
        quote!(impl #impl_generics #p::IntoSignal<#self_ty> for #ident)
    } else {
        quote!(impl<__LoopstackW: ?::core::marker::Sized + __LoopstackIs<#self_ty>> #p::IntoSignal<__LoopstackW> for #ident)
    };
    let is = (!generic).then(|| {
        let message = format!("`{ident}` is a signal of the `{workflow}` workflow, not of `{{Self}}`");
        quote! {
            #[diagnostic::on_unimplemented(message = #message)]
            trait __LoopstackIs<T: ?::core::marker::Sized> {}
            impl<T: ?::core::marker::Sized> __LoopstackIs<T> for T {}
        }
    });
    let arms = s.variants.iter().map(|v| {
        let id = &v.ident;
        let name = &v.signal;
        match &v.payload {
            Some(ty) => quote! {
                Self::#id(__loopstack_payload) => #p::Result::map(
                    #p::serde_json::to_value(__LoopstackPayload::<#w, #ty>(
                        ::core::marker::PhantomData,
                        __loopstack_payload,
                    )),
                    |__loopstack_value| (::core::convert::From::from(#name), __loopstack_value),
                ),
            },
            None => quote! {
                Self::#id => #p::Ok((::core::convert::From::from(#name), #p::serde_json::Value::Null)),
            },
        }
    });
    let str_ = quote!(::core::primitive::str);
    quote! {
        #(#cfgs)*
        #[doc = #doc]
        #[doc = ""]
        #[doc = #usage]
        #[allow(unreachable_pub, dead_code, private_interfaces)]
        pub enum #ident {
            #(#variants,)*
        }

        #(#cfgs)*
        const _: () = {
            #is

            /// A payload, serialized as itself; its bound names the workflow.
            struct __LoopstackPayload<W: ?::core::marker::Sized, T>(::core::marker::PhantomData<W>, T);

            #[automatically_derived]
            impl<W: ?::core::marker::Sized, T: #p::serde::Serialize> #p::serde::Serialize for __LoopstackPayload<W, T> {
                fn serialize<S: #p::serde::Serializer>(&self, serializer: S) -> #p::Result<S::Ok, S::Error> {
                    #p::serde::Serialize::serialize(&self.1, serializer)
                }
            }

            #[automatically_derived]
            #header
            where
                #(#own_bounds,)*
                #(#payload_bounds,)*
            {
                fn into_signal(
                    self,
                ) -> #p::Result<(::std::borrow::Cow<'static, #str_>, #p::serde_json::Value), #p::serde_json::Error> {
                    match self {
                        #(#arms)*
                    }
                }
            }
        };
    }
}

/// The stripped impl block, a compile error, and as much of the generated API as is
/// known, so that code using the workflow adds no errors of its own.
pub(crate) fn workflow_fallback(f: &WorkflowFailure) -> TokenStream {
    let item = &f.item;
    let error = f.error.to_compile_error();
    let outline = f.outline.as_ref().map(|o| outline_stub(o, f.state.as_ref()));
    quote! {
        #item
        #outline
        #error
    }
}

/// The outline's enums and, when the state type is known, a `Workflow` impl whose
/// methods are never called (the crate does not compile).
fn outline_stub(o: &Outline, state: Option<&syn::Type>) -> TokenStream {
    let krate = &o.krate;
    let p = quote!(#krate::__private);
    let self_ty = &o.item.self_ty;
    let cfgs = &o.cfgs;
    let enums = outline_enums(o, true);
    let imp = state.map(|state| {
        let input = o.input.as_ref().unwrap_or(state);
        let (impl_generics, _, where_clause) = o.item.generics.split_for_impl();
        quote! {
            #(#cfgs)*
            impl #impl_generics #p::Workflow for #self_ty #where_clause {
                type State = #state;
                type Input = #input;
                fn definition(&self) -> &'static #p::Definition {
                    ::core::unreachable!()
                }
                fn init(&self, _: Self::Input) -> Self::State {
                    ::core::unreachable!()
                }
                fn guard(&self, _: ::core::primitive::usize, _: &Self::State) -> ::core::primitive::bool {
                    ::core::unreachable!()
                }
                fn transition<'__loopstack_a>(
                    &'__loopstack_a self,
                    _: ::core::primitive::usize,
                    _: &'__loopstack_a mut Self::State,
                    _: &'__loopstack_a mut #p::RunContext,
                    _: #p::Option<#p::serde_json::Value>,
                ) -> #p::BoxFuture<'__loopstack_a, #p::Result<(), #p::TransitionError>> {
                    ::core::unreachable!()
                }
            }
        }
    });
    quote! {
        #enums
        #imp
    }
}
