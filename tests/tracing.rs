//! The `tracing` spans and events a run emits: one span per run, transition, model
//! request and tool call, with the fields users filter and alert on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use loopstack::llm::{Agent, ScriptedModel};
use loopstack::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

type Fields = BTreeMap<String, String>;

#[derive(Default)]
struct Visitor(Fields);

impl Visit for Visitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}").trim_matches('"').to_owned());
    }
}

/// Records every span (name and fields, including those recorded later) and event.
#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<(Id, String, Fields)>>>,
    events: Arc<Mutex<Vec<(tracing::Level, Fields)>>>,
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut v = Visitor::default();
        attrs.record(&mut v);
        self.spans.lock().unwrap().push((id.clone(), attrs.metadata().name().to_owned(), v.0));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut v = Visitor::default();
        values.record(&mut v);
        if let Some(span) = self.spans.lock().unwrap().iter_mut().rev().find(|s| &s.0 == id) {
            span.2.extend(v.0);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut v = Visitor::default();
        event.record(&mut v);
        self.events.lock().unwrap().push((*event.metadata().level(), v.0));
    }
}

impl Recorder {
    fn spans(&self, name: &str) -> Vec<Fields> {
        self.spans.lock().unwrap().iter().filter(|s| s.1 == name).map(|s| s.2.clone()).collect()
    }
}

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
) -> Result<String, ToolError> {
    Ok(format!("Sunny in {location}"))
}

#[tokio::test]
async fn runs_transitions_model_requests_and_tool_calls_have_spans() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));

    let model = ScriptedModel::new()
        .tool_call("get_weather", serde_json::json!({"location": "Oslo", "mood": "grumpy"}))
        .text("Sunny.");
    let agent = Agent::new(model, "m-1", ToolRegistry::new().with(GetWeather).unwrap());
    let reply = agent.ask(&Runtime::new(), "Weather in Oslo?").await.unwrap();

    let runs = recorder.spans("loopstack.run");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["workflow"], "agent");
    assert_eq!(runs[0]["run_id"], reply.run_id.to_string());
    // OpenTelemetry's GenAI names: an agent's run is an `invoke_agent` operation, the
    // run its conversation.
    assert_eq!(runs[0]["otel.name"], "invoke_agent agent");
    assert_eq!(runs[0]["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(runs[0]["gen_ai.agent.name"], "agent");
    assert_eq!(runs[0]["gen_ai.conversation.id"], reply.run_id.to_string());

    let transitions: Vec<(String, String, String)> = recorder
        .spans("loopstack.transition")
        .into_iter()
        .map(|f| (f["transition"].clone(), f["from"].clone(), f["to"].clone()))
        .collect();
    let expected = [
        ("llm_turn", "start", "prompt_executed"),
        ("run_tool_calls", "prompt_executed", "ready"),
        ("llm_turn", "ready", "prompt_executed"),
        ("respond", "prompt_executed", "end"),
    ];
    let expected: Vec<(String, String, String)> =
        expected.iter().map(|(a, b, c)| ((*a).into(), (*b).into(), (*c).into())).collect();
    assert_eq!(transitions, expected);

    let requests = recorder.spans("loopstack.llm");
    assert_eq!(requests.len(), 2);
    // Fields named after OpenTelemetry's GenAI conventions.
    for r in &requests {
        assert_eq!(r["otel.name"], "chat m-1");
        assert_eq!(r["gen_ai.operation.name"], "chat");
        assert_eq!((r["gen_ai.provider.name"].as_str(), r["gen_ai.request.model"].as_str()), ("scripted", "m-1"));
        assert_eq!(r["gen_ai.response.model"], "scripted", "the scripted model answers as `scripted`");
        let tokens = (r["gen_ai.usage.input_tokens"].as_str(), r["gen_ai.usage.output_tokens"].as_str());
        assert_eq!(tokens, ("10", "10"));
        assert!(r.contains_key("latency_ms"), "{r:?}");
        assert_eq!(r["gen_ai.agent.name"], "agent", "an unnamed agent is `agent`");
        assert_eq!(r["gen_ai.conversation.id"], reply.run_id.to_string());
    }
    assert_eq!(requests[0]["gen_ai.response.finish_reasons"], "tool_use");

    let tools = recorder.spans("loopstack.tool");
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["otel.name"], "execute_tool get_weather");
    assert_eq!(tools[0]["gen_ai.operation.name"], "execute_tool");
    let tool = (tools[0]["gen_ai.tool.name"].as_str(), tools[0]["gen_ai.tool.call.id"].as_str());
    assert_eq!(tool, ("get_weather", "call_0"));
    assert_eq!(tools[0]["outcome"], "ok");
    assert!(!tools[0].contains_key("otel.status_code"), "{:?}", tools[0]);
    assert!(tools[0].contains_key("duration_ms"));

    // The unknown argument was dropped with a warning naming it.
    let events = recorder.events.lock().unwrap();
    let warning = events
        .iter()
        .find(|(level, f)| *level == tracing::Level::WARN && f["message"] == "ignoring unknown tool argument")
        .expect("a warning for the unknown argument");
    assert_eq!((warning.1["tool"].as_str(), warning.1["argument"].as_str()), ("get_weather", "mood"));
}
