//! The model's checks, on impl blocks written inline.
use super::*;
use quote::quote;
use syn::parse_quote;

fn model(item: syn::ItemImpl) -> Result<WorkflowModel, Vec<String>> {
    WorkflowModel::from_syn(TokenStream::new(), item.into_token_stream())
        .map_err(|f| f.error.into_iter().map(|e| e.to_string()).collect())
}

#[test]
fn the_model_of_the_tool_call_workflow() {
    let m = model(parse_quote! {
        impl ToolCallWorkflow {
            #[transition(to = Ready)]
            async fn setup(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = Ready, to = PromptExecuted)]
            async fn llm_turn(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
            #[guard(has_tool_calls)]
            async fn execute_tool_calls(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = [AwaitingTools, Approved], to = Ready)]
            #[guard(has_tool_calls)]
            async fn tools_complete(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = AwaitingTools, to = Approved, wait)]
            async fn approve(&self, state: &mut S, cx: &mut RunContext, a: Approval) -> Result<()> { Ok(()) }
            #[transition(from = PromptExecuted, to = End)]
            async fn respond(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            fn has_tool_calls(&self, state: &S) -> bool { true }
        }
    })
    .unwrap();
    assert_eq!(m.name, "tool_call_workflow");
    assert_eq!(m.outline.enum_ident, "ToolCallWorkflowPlace");
    let places: Vec<&str> = m.outline.places.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(places, ["start", "ready", "prompt_executed", "awaiting_tools", "approved", "end"]);
    assert_eq!(m.transitions[3].from, [3, 4]);
    assert_eq!(m.transitions[2].priority, Some(10));
    assert_eq!((m.transitions[2].guard, m.transitions[3].guard), (Some(0), Some(0)));
    assert_eq!(m.guards.len(), 1, "a guard used twice is checked once");
    assert!(m.transitions[4].payload.is_some());
    assert_eq!(m.state.to_token_stream().to_string(), "S");
    // The helper attributes are gone from the re-emitted impl.
    let text = m.outline.item.to_token_stream().to_string();
    assert!(!text.contains("transition") && !text.contains("guard ("), "{text}");
}

#[test]
fn errors_name_the_problem() {
    let err = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End)]
            async fn c(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(
        err,
        ["transition `c` from `A` can never fire: `b` has no guard and is tried first; give it a `#[guard(..)]` \
          or order them with `priority`"]
    );

    let err = model(parse_quote! {
        impl W {
            #[transition(to = End)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = Orphan, to = End)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(err, ["place `Orphan` cannot be reached from `Start`"]);

    let err = model(parse_quote! {
        impl W {
            #[transition(to = A, to = B)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(to = End)]
            #[guard(missing)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(
        err,
        [
            "duplicate `to`; each option is given once",
            "no method `missing` in this impl; a guard names a `fn(&self, &State) -> bool` method of the \
             `#[workflow]` impl block",
        ],
        "independent mistakes are all reported, and the graph is not checked on top"
    );
}

#[test]
fn an_unreachable_region_and_a_stuck_one_are_both_reported() {
    // The same rules as `Definition::check`: `Island` is never reached, and a run
    // that takes `trap` never leaves `Trap`; neither hides the other.
    let err = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn go(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End)]
            #[guard(ready)]
            async fn finish(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = Trap)]
            async fn trap(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = Trap, to = Trap)]
            async fn stuck(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = Island, to = End)]
            async fn island(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            fn ready(&self, s: &S) -> bool { true }
        }
    })
    .err()
    .unwrap();
    assert_eq!(
        err,
        [
            "place `Island` cannot be reached from `Start`",
            "`End` cannot be reached from place `Trap`: add a transition from `Trap` or a place it leads to \
             toward `End`",
        ]
    );
}

#[test]
fn timers_and_signals() {
    let m = model(parse_quote! {
        impl RefundDesk {
            #[transition(to = AwaitingHuman)]
            async fn open(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            // An unguarded timer shadows nothing: `close`, tried after it, may fire.
            #[transition(from = AwaitingHuman, to = End, after = "1h30m", priority = 5)]
            async fn expire(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = AwaitingHuman, to = End)]
            #[guard(never)]
            async fn close(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = AwaitingHuman, to = End, wait)]
            #[guard(never)]
            async fn human_review(&self, s: &mut S, cx: &mut RunContext, r: Review) -> Result<()> { Ok(()) }
            #[transition(from = AwaitingHuman, to = End, wait)]
            #[guard(never)]
            async fn r#cancel(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            fn never(&self, s: &S) -> bool { false }
        }
    })
    .map_err(|e| e.join("\n"))
    .unwrap();
    let t = &m.transitions;
    assert_eq!((t[1].after, t[1].wait), (Some(90 * 60_000), false));
    assert_eq!((t[3].wait, t[3].payload.is_some(), t[3].after), (true, true, None));
    assert_eq!((t[4].wait, t[4].payload.is_some()), (true, false));
    let signal = m.outline.signal.unwrap();
    assert_eq!(signal.ident, "RefundDeskSignal");
    let variants: Vec<(String, &str, bool)> =
        signal.variants.iter().map(|v| (v.ident.to_string(), v.signal.as_str(), v.payload.is_some())).collect();
    assert_eq!(variants, [("HumanReview".into(), "human_review", true), ("Cancel".into(), "cancel", false)]);
    assert_eq!(
        (signal.variants[0].from.as_slice(), signal.variants[0].to.as_str()),
        (&["awaiting_human".to_owned()][..], "end")
    );
}

#[test]
fn a_timer_behind_an_unguarded_transition_never_fires() {
    let err = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, after = "1s", priority = 3)]
            async fn c(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(
        err,
        ["timer transition `c` from `A` can never fire: `b` has no guard and fires without waiting for its delay"]
    );
}

#[test]
fn a_timer_from_a_method_waits_like_a_fixed_one() {
    // Its place waits (the run is not at a dead end there), and it is shadowed like one.
    let m = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, after = Self::delay)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            fn delay(&self, s: &S) -> Duration { Duration::from_secs(1) }
        }
    })
    .unwrap();
    let b = &m.transitions[1];
    assert_eq!((b.after, b.after_fn.to_token_stream().to_string().as_str()), (None, "Self :: delay"));
    assert!(b.is_timer() && !b.wait);
    let err = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, after = config::delay)]
            async fn c(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(
        err,
        ["timer transition `c` from `A` can never fire: `b` has no guard and fires without waiting for its delay"]
    );
}

#[test]
fn a_timer_method_has_the_shape_of_a_guard() {
    let err = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, after = Self::delay)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, after = Self::later)]
            async fn c(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            fn delay(&self) -> Duration { Duration::from_secs(1) }
            fn later(&self, s: &S) {}
        }
    })
    .err()
    .unwrap();
    let shape = "a timer's delay method is a plain `fn(&self, state: &State) -> Duration`";
    assert_eq!(err, [shape, shape]);
    let err = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, after = delay)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            fn delay(&self, s: &S) -> Duration { Duration::from_secs(1) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(err, ["`delay` is a method of this impl: write `after = Self::delay`"]);
}

#[test]
fn signal_names_are_distinct_identifiers() {
    let err = model(parse_quote! {
        impl W {
            #[transition(to = A)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, wait)]
            async fn go_on(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, wait)]
            async fn goOn(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = A, to = End, wait)]
            async fn _self(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(
        err,
        [
            "wait transitions `go_on` and `goOn` would both be the signal `WSignal::GoOn`; rename one",
            "wait transition `_self` would be the signal `WSignal::Self`, which is not an identifier; rename the \
             method",
        ]
    );
}

#[test]
fn timer_mistakes() {
    let err = model(parse_quote! {
        impl W {
            #[transition(to = End, after = "5min")]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(to = End, wait, after = "1h")]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(to = End, after = "1h")]
            async fn c(&self, s: &mut S, cx: &mut RunContext, p: P) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(err.len(), 3, "{err:?}");
    assert!(err[0].starts_with("unknown unit `min`"), "{}", err[0]);
    assert!(err[1].starts_with("a transition fires on a signal (`wait`) or after a delay"), "{}", err[1]);
    assert!(err[2].starts_with("a timer transition takes no payload"), "{}", err[2]);
}

#[test]
fn places_must_be_camel_case_and_distinct() {
    let err = model(parse_quote! {
        impl W {
            #[transition(to = HTTPDone)]
            async fn a(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
            #[transition(from = HttpDone, to = End)]
            async fn b(&self, s: &mut S, cx: &mut RunContext) -> Result<()> { Ok(()) }
        }
    })
    .err()
    .unwrap();
    assert_eq!(err, ["places `HTTPDone` and `HttpDone` would both be stored as `http_done`"]);
}

#[test]
fn options() {
    let m = WorkflowModel::from_syn(
        quote!(name = "agent", input = String, state = AgentState, crate = ::loopstack_core),
        quote! {
            impl Agent {
                #[transition(to = End)]
                async fn a(&self, s: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> { Ok(()) }
            }
        },
    )
    .ok()
    .unwrap();
    assert_eq!(m.name, "agent");
    assert_eq!(m.outline.input.unwrap().to_token_stream().to_string(), "String");
    assert_eq!(m.outline.krate.to_token_stream().to_string(), ":: loopstack_core");
}
