//! Both macros expand cleanly under strict lints in modules that shadow prelude names,
//! so the generated code must name everything by absolute path.

#![deny(warnings, unused_qualifications, missing_docs, unreachable_pub)]
#![allow(clippy::disallowed_names)]

/// The user's own types. serde's and schemars' derives are not hygienic against
/// shadowed primitives, so they live outside the shadowing module.
pub mod types {
    /// Arguments of `Lookup`.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    pub struct LookupArgs {
        /// The key.
        pub key: String,
    }

    /// A workflow's state.
    #[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
    pub struct FlowState {
        /// Steps taken.
        pub n: u64,
    }

    /// A payload the crate keeps to itself, in a public signal enum.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    pub(crate) struct Note {
        pub(crate) text: String,
    }

    /// A signal's payload (`Serialize` too, to be sent as `FlowSignal::Finish`).
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    pub struct Go {
        /// How far.
        pub by: u64,
    }
}

/// Public items: generated public items must be documented (`missing_docs`).
pub mod public {
    #![allow(dead_code, non_camel_case_types)]

    // Prelude names and primitives, shadowed.
    struct Result;
    struct Ok;
    struct Err;
    struct Option;
    struct Some;
    struct None;
    struct Box;
    struct String;
    struct Vec;
    struct Send;
    struct Sync;
    struct Sized;
    struct Into;
    struct From;
    struct ToString;
    struct Iterator;
    struct Drop;
    struct Fn;
    struct FnOnce;
    struct Future;
    struct IntoFuture;
    struct AsRef;
    struct Debug;
    struct Clone;
    struct Copy;
    struct Default;
    struct PartialEq;
    struct Eq;
    struct Hash;
    struct Display;
    struct Formatter;
    mod core {}
    struct bool;
    struct str;
    struct usize;
    struct u64;
    struct i32;
    // Loopstack's own names, which generated code must not pick up from here either.
    struct Tool;
    struct Workflow;
    struct Definition;
    struct TransitionDef;
    struct ToolOutput;
    struct ToolOptions;
    struct BoxFuture;
    struct TransitionError;
    struct Value;
    struct IntoSignal;
    struct PhantomData;
    struct Cow;
    struct Duration;
    struct FromIterator;
    struct Serialize;
    struct Serializer;
    struct serde;
    struct schemars;
    struct loopstack_core;
    mod __private {}

    use super::types::{FlowState, Go, LookupArgs, Note};
    use loopstack::{RunContext, ToolContext, ToolError, tool, workflow};

    /// Echoes its input.
    #[tool(timeout = 3, concurrent = false)]
    pub async fn echo(
        /// The text to echo.
        text: std::string::String,
        times: std::option::Option<::core::primitive::u64>,
        cx: &ToolContext,
    ) -> std::result::Result<std::string::String, ToolError> {
        let _ = (times, cx);
        std::result::Result::Ok(text)
    }

    /// Structured output.
    #[tool]
    pub async fn structured() -> serde_json::Value {
        serde_json::json!({"ok": true})
    }

    /// A tool with a dependency.
    #[derive(Debug)]
    pub struct Lookup {
        /// The table.
        pub table: std::vec::Vec<(&'static ::core::primitive::str, ::core::primitive::i32)>,
    }

    /// Looks a key up.
    #[tool]
    impl Lookup {
        async fn handle(&self, args: LookupArgs) -> std::option::Option<::core::primitive::i32> {
            self.table.iter().find(|(k, _)| *k == args.key).map(|(_, v)| *v)
        }
    }

    /// A workflow.
    #[derive(Debug)]
    pub struct Flow;

    #[workflow(name = "flow")]
    impl Flow {
        #[transition(to = Working)]
        async fn begin(&self, state: &mut FlowState, _cx: &mut RunContext) -> loopstack::Result {
            state.n += 1;
            std::result::Result::Ok(())
        }

        #[transition(from = Working, to = Working, priority = 2)]
        #[guard(more)]
        async fn work(&self, state: &mut FlowState, _cx: &mut RunContext) -> loopstack::Result {
            state.n += 1;
            std::result::Result::Ok(())
        }

        #[transition(from = Working, to = End, wait)]
        async fn finish(&self, state: &mut FlowState, _cx: &mut RunContext, go: Go) -> loopstack::Result {
            state.n += go.by;
            std::result::Result::Ok(())
        }

        #[transition(from = Working, to = End, wait)]
        async fn stop(&self, _state: &mut FlowState, _cx: &mut RunContext) -> loopstack::Result {
            std::result::Result::Ok(())
        }

        #[transition(from = Working, to = End, after = "1h30m")]
        async fn time_out(&self, _state: &mut FlowState, _cx: &mut RunContext) -> loopstack::Result {
            std::result::Result::Ok(())
        }

        fn more(&self, state: &FlowState) -> ::core::primitive::bool {
            state.n < 3
        }
    }

    /// A later version of a workflow, with migrations from two older ones.
    #[derive(Debug)]
    pub struct Flow2;

    #[workflow(name = "flow2", version = 3)]
    impl Flow2 {
        #[transition(to = Working)]
        async fn begin(&self, _state: &mut FlowState, _cx: &mut RunContext) -> loopstack::Result {
            std::result::Result::Ok(())
        }

        #[transition(from = Working, to = End)]
        async fn done(&self, _state: &mut FlowState, _cx: &mut RunContext) -> loopstack::Result {
            std::result::Result::Ok(())
        }

        #[migrate(from = 1)]
        fn upgrade_v1(&self, old: FlowState, place: FlowPlace) -> (FlowState, Flow2Place) {
            let _ = place;
            (old, Flow2Place::Working)
        }

        #[migrate(from = 2)]
        fn from_v2(
            old: FlowState,
            place: std::string::String,
        ) -> std::result::Result<(FlowState, Flow2Place), std::string::String> {
            let _ = place;
            std::result::Result::Ok((old, Flow2Place::End))
        }
    }

    /// A workflow whose payload is private to the crate.
    #[derive(Debug)]
    pub struct Quiet;

    #[workflow]
    impl Quiet {
        #[transition(to = End, wait)]
        async fn hush(&self, _state: &mut FlowState, _cx: &mut RunContext, note: Note) -> loopstack::Result {
            let _ = note.text;
            std::result::Result::Ok(())
        }
    }
}

/// Private items: generated `pub` items must not trip `unreachable_pub`.
mod private {
    use loopstack::{RunContext, tool, workflow};

    /// Adds one.
    #[tool(crate = ::loopstack)]
    pub(crate) async fn add_one(n: i64) -> i64 {
        n + 1
    }

    pub(crate) struct Counter;

    #[workflow(crate = ::loopstack, input = u8)]
    impl Counter {
        #[transition(to = End)]
        async fn count(&self, state: &mut u32, _cx: &mut RunContext) -> loopstack::Result {
            *state += 1;
            Ok(())
        }
    }
}

use loopstack::{Runtime, Tool, ToolContext, WorkflowExt};
use serde_json::json;

#[tokio::test]
async fn shadowed_expansions_work() {
    let cx = ToolContext::new("1", "echo");
    let out = public::Echo.call(json!({"text": "hi"}), &cx).await.unwrap();
    assert_eq!(out.to_text(), "hi");
    assert_eq!(public::Echo.options().timeout, Some(std::time::Duration::from_secs(3)));
    assert_eq!(public::Structured.call(json!({}), &cx).await.unwrap().to_text(), r#"{"ok":true}"#);
    let lookup = public::Lookup { table: vec![("a", 1)] };
    assert_eq!(lookup.call(json!({"key": "a"}), &cx).await.unwrap().to_text(), "1");
    assert_eq!(lookup.call(json!({"key": "b"}), &cx).await.unwrap().to_text(), "null");
    assert_eq!(private::AddOne.call(json!({"n": 41}), &cx).await.unwrap().to_text(), "42");

    let rt = Runtime::new();
    let report = rt.start(&public::Flow, types::FlowState::default()).await.unwrap();
    assert_eq!(report.state.n, 3);
    let report = rt.signal(&public::Flow, report.run_id, ("finish", json!({"by": 10}))).await.unwrap();
    assert_eq!(report.state.n, 13);
    let run_id = rt.start(&public::Flow, types::FlowState::default()).await.unwrap().run_id;
    let report = rt.signal(&public::Flow, run_id, public::FlowSignal::Finish(types::Go { by: 20 })).await.unwrap();
    assert_eq!(report.state.n, 23);
    let run_id = rt.start(&public::Flow, types::FlowState::default()).await.unwrap().run_id;
    assert_eq!(rt.signal(&public::Flow, run_id, public::FlowSignal::Stop).await.unwrap().state.n, 3);
    let (state, place) = loopstack::Workflow::migrate(&public::Flow2, 1, "working", r#"{"n": 2}"#).unwrap();
    assert_eq!((state.n, place), (2, "working"));
    assert_eq!(loopstack::Workflow::migrate(&public::Flow2, 2, "x", r#"{"n": 1}"#).unwrap().1, "end");
    let timer = loopstack::Workflow::definition(&public::Flow).transition("time_out").unwrap().1;
    assert_eq!(timer.after, Some(std::time::Duration::from_secs(5400)));
    let run_id = rt.start(&public::Quiet, types::FlowState::default()).await.unwrap().run_id;
    let hush = public::QuietSignal::Hush(types::Note { text: "sh".into() });
    assert_eq!(rt.signal(&public::Quiet, run_id, hush).await.unwrap().outcome, loopstack::RunOutcome::Completed);
    assert_eq!(public::FlowPlace::Working.as_str(), "working");

    let report = rt.start(&private::Counter, 7).await.unwrap();
    assert_eq!(report.state, 8, "the state is `u32::from(input)`, plus one");
    assert_eq!(private::Counter.next_transition(private::CounterPlace::Start, &0).unwrap(), Some("count"));
}
