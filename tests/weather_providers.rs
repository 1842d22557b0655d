//! The weather example on every provider: `--provider` with `--stream`, `--image` and
//! `--fallback`, each against a strict imitation of the provider's API
//! (`loopstack_model::testing::imitation`), reached through the provider's own
//! environment variables (`OPENAI_BASE_URL`, `GEMINI_BASE_URL`,
//! `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, ...). The imitation reads each request as the
//! API would and refuses what it would refuse, so the example passes only when it
//! speaks each wire correctly: it asks for the weather, gets a call of
//! `get_weather`, and answers from its result.
//!
//! Gemini (with Vertex AI) and Bedrock run when the test is built with their features
//! (`cargo test --features gemini,bedrock --test weather_providers`, as `.ci/run` does).

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopstack::llm::{Role, ToolUse};
use loopstack_model::testing::imitation::anthropic::MessagesApi;
use loopstack_model::testing::imitation::azure::{AzureChat, AzureResponses};
use loopstack_model::testing::imitation::openai::ChatCompletions;
use loopstack_model::testing::imitation::openai_responses::Responses;
use loopstack_model::testing::imitation::responses_api::ResponsesApi;
use loopstack_model::testing::{API_KEY, Answer, Failure, Imitation, Part, Reply, Seen, Server, Turn};
use serde_json::json;

mod common;

/// A 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

const ANSWER: &str = "Berlin is mostly sunny today.";

/// How one run of the example goes.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    Stream,
    Image,
    /// The provider is rate limited on every attempt; the scripted fallback answers.
    Fallback,
}

/// What the imitation saw: every request it read, in order.
type Seens = Arc<Mutex<Vec<Seen>>>;

/// A server for `imitation` that calls `get_weather` first and answers once the
/// tool's result comes back, or (`fail`) refuses every request as rate limited.
async fn serve(imitation: impl Imitation, fail: bool) -> (Server, Seens) {
    let seens: Seens = Arc::default();
    let seen_by_server = seens.clone();
    let server = Server::handle(move |request| {
        let seen = match imitation.read(request) {
            Ok(seen) => seen,
            Err(problem) => return Reply::raw(418, "text/plain", format!("imitation refused the request: {problem}")),
        };
        let answered = seen
            .messages
            .last()
            .is_some_and(|m| m.role == Role::User && m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. })));
        let turn = if fail {
            Turn::Fail(Failure::RateLimited { retry_after: Duration::ZERO })
        } else if answered {
            Turn::Answer(Answer::text(ANSWER))
        } else {
            let call = ToolUse::new("call_1", "get_weather", json!({"location": "Berlin"}));
            Turn::Answer(Answer::calls([call]))
        };
        let reply = imitation.reply(&turn, &seen);
        seen_by_server.lock().unwrap().push(seen);
        reply
    })
    .await;
    (server, seens)
}

/// Runs the example for `provider` in `mode` with `env`; its stdout.
fn run_example(provider: &str, model: &str, mode: Mode, env: &[(&str, String)]) -> String {
    let exe = common::example_with("weather", &[]);
    let image = std::env::temp_dir().join(format!("loopstack-weather-{provider}-{}.png", std::process::id()));
    std::fs::write(&image, PNG).unwrap();
    let mut command = Command::new(exe);
    command.args([
        "--provider",
        provider,
        "--model",
        model,
        "--db",
        "memory",
        "--question",
        "How is the weather in Berlin?",
    ]);
    match mode {
        Mode::Plain => {}
        Mode::Stream => {
            command.arg("--stream");
        }
        Mode::Image => {
            command.arg("--image").arg(&image);
        }
        Mode::Fallback => {
            command.args(["--fallback", "scripted:scripted-weather"]);
        }
    }
    // Only what this run sets: no provider variable of the developer's leaks in.
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_API_VERSION",
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_AD_TOKEN",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GEMINI_BASE_URL",
        "GOOGLE_CLOUD_ACCESS_TOKEN",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_VERTEX_BASE_URL",
        "AWS_BEARER_TOKEN_BEDROCK",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ] {
        command.env_remove(var);
    }
    let out = command.envs(env.iter().map(|(k, v)| (*k, v.as_str()))).output().unwrap();
    let _ = std::fs::remove_file(&image);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{provider} ({mode}): the example failed\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr),
        mode = mode.name()
    );
    stdout
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Stream => "--stream",
            Self::Image => "--image",
            Self::Fallback => "--fallback",
        }
    }
}

/// Runs the example on one provider in every mode, against a fresh imitation each time.
async fn every_mode<I: Imitation>(
    provider: &'static str,
    model: &'static str,
    imitation: impl Fn() -> I,
    env: impl Fn(&str) -> Vec<(&'static str, String)>,
) {
    for mode in [Mode::Plain, Mode::Stream, Mode::Image, Mode::Fallback] {
        let (server, seens) = serve(imitation(), mode == Mode::Fallback).await;
        let env = env(&server.url());
        let stdout = tokio::task::spawn_blocking(move || run_example(provider, model, mode, &env)).await.unwrap();
        let seens = seens.lock().unwrap();
        let name = mode.name();
        if mode == Mode::Fallback {
            // Every attempt refused, then the scripted model answered the whole run.
            assert!(!seens.is_empty(), "{provider} ({name}): the provider was never asked");
            assert!(stdout.contains("In Berlin: "), "{provider} ({name}): not the fallback's answer\n{stdout}");
            continue;
        }
        assert!(stdout.contains(ANSWER), "{provider} ({name}): no answer\n{stdout}");
        // Two turns: the call, then the answer from its result.
        assert_eq!(seens.len(), 2, "{provider} ({name}): {} requests", seens.len());
        assert!(seens.iter().all(|s| s.stream == (mode == Mode::Stream)), "{provider} ({name}): streamed?");
        assert!(seens.iter().all(|s| s.tools.iter().any(|t| t == "get_weather")), "{provider} ({name}): tools");
        let images = |seen: &Seen| seen.parts().filter(|p| matches!(p, Part::Image { .. })).count();
        assert_eq!(images(&seens[0]), usize::from(mode == Mode::Image), "{provider} ({name}): images shown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_example_speaks_every_providers_wire() {
    let key = || API_KEY.to_owned();
    every_mode(
        "anthropic",
        "claude-test",
        || MessagesApi,
        |url| vec![("ANTHROPIC_API_KEY", key()), ("ANTHROPIC_BASE_URL", url.to_owned())],
    )
    .await;
    every_mode(
        "openai",
        "gpt-test",
        || ChatCompletions,
        |url| vec![("OPENAI_API_KEY", key()), ("OPENAI_BASE_URL", url.to_owned())],
    )
    .await;
    every_mode("openai-responses", "gpt-test", Responses::openai, |url| {
        vec![("OPENAI_API_KEY", key()), ("OPENAI_BASE_URL", url.to_owned())]
    })
    .await;
    every_mode(
        "azure",
        "my-deployment",
        || AzureChat,
        |url| vec![("AZURE_OPENAI_ENDPOINT", url.to_owned()), ("AZURE_OPENAI_API_KEY", key())],
    )
    .await;
    let azure_responses = || {
        let mut api = ResponsesApi::openai(API_KEY);
        api.path = "/openai/v1/responses".into();
        api.auth = ("api-key", API_KEY.into());
        api.no_header = Some("authorization");
        AzureResponses(Responses::at(api))
    };
    every_mode("azure-responses", "my-deployment", azure_responses, |url| {
        vec![("AZURE_OPENAI_ENDPOINT", url.to_owned()), ("AZURE_OPENAI_API_KEY", key())]
    })
    .await;
    #[cfg(feature = "gemini")]
    every_mode("gemini", "gemini-test", loopstack_model::testing::imitation::gemini::GeminiApi::default, |url| {
        vec![("GEMINI_API_KEY", key()), ("GEMINI_BASE_URL", url.to_owned())]
    })
    .await;
    #[cfg(feature = "gemini")]
    every_mode(
        "vertex",
        "gemini-test",
        || loopstack_model::testing::imitation::gemini::GeminiApi::vertex("my-project", "us-central1"),
        |url| {
            vec![
                ("GOOGLE_CLOUD_ACCESS_TOKEN", key()),
                ("GOOGLE_CLOUD_PROJECT", "my-project".to_owned()),
                ("GOOGLE_CLOUD_LOCATION", "us-central1".to_owned()),
                ("GOOGLE_VERTEX_BASE_URL", url.to_owned()),
            ]
        },
    )
    .await;
    #[cfg(feature = "bedrock")]
    every_mode("bedrock", "bedrock-test", loopstack_model::testing::imitation::bedrock::Converse::default, |url| {
        vec![
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_BEARER_TOKEN_BEDROCK", key()),
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", url.to_owned()),
        ]
    })
    .await;
}
