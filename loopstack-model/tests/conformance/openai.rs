//! The OpenAI Chat Completions provider against the strict imitation of the API
//! (`loopstack_model::testing::imitation::openai`), and the suite failing a
//! provider that breaks the contract.

use std::sync::Arc;

use loopstack_model::testing::imitation::openai::{ChatCompletions, chunks, sse};
use loopstack_model::testing::{API_KEY, Capability, ProviderSuite, Reply, Request, Seen, Turn};
use loopstack_model::{ChatModel, OpenAi};

#[tokio::test]
async fn the_openai_chat_completions_provider_conforms() {
    let suite = ProviderSuite::new(ChatCompletions, |setup| {
        let model = OpenAi::new()
            .api_key(&setup.api_key)
            .base_url(&setup.base_url)
            .retry_policy(setup.retry_policy())
            .__sleep_with(setup.sleep());
        Arc::new(model) as Arc<dyn ChatModel>
    })
    .lacks(Capability::Reasoning, "Chat Completions returns no reasoning to send back")
    .lacks(Capability::CacheWriteTokens, "Chat Completions counts no tokens written to the cache");
    suite.run().await.assert_passed();
}

/// The suite fails what breaks the contract, saying why, and shows what it skipped.
#[tokio::test]
async fn the_suite_fails_a_provider_that_breaks_the_contract() {
    /// Streams without the usage chunk, as a server does when the client does not
    /// ask for it: the provider then reports no usage.
    struct ForgetsUsage;

    impl loopstack_model::testing::Imitation for ForgetsUsage {
        fn read(&self, request: &Request) -> Result<Seen, String> {
            ChatCompletions.read(request)
        }
        fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
            match turn {
                Turn::Answer(answer) if seen.stream => Reply::sse(sse(&chunks(answer, None, false))),
                turn => ChatCompletions.reply(turn, seen),
            }
        }
    }

    use loopstack_model::testing::{Case, Outcome};
    let model = |key: &'static str| {
        move |setup: &loopstack_model::testing::Setup| {
            let model = OpenAi::new().api_key(key).base_url(&setup.base_url).retry_policy(setup.retry_policy());
            Arc::new(model) as Arc<dyn ChatModel>
        }
    };
    let report = ProviderSuite::new(ChatCompletions, model("sk-not-the-key"))
        .only(&[Case::Text, Case::ReasoningRoundTrip])
        .lacks(Capability::Reasoning, "no reasoning here")
        .run()
        .await;
    assert!(
        matches!(&report.outcomes[0], (Case::Text, Outcome::Failed(why)) if why.contains("incorrect API key")),
        "{report}"
    );
    assert_eq!(report.outcomes[1], (Case::ReasoningRoundTrip, Outcome::Skipped("no reasoning here".into())));
    assert!(report.to_string().contains("reasoning_round_trip: skipped (no reasoning here)"), "{report}");

    let report = ProviderSuite::new(ForgetsUsage, model(API_KEY)).only(&[Case::Text, Case::Usage]).run().await;
    assert_eq!(report.outcomes[0], (Case::Text, Outcome::Passed), "{report}");
    assert!(matches!(&report.failures()[..], [(Case::Usage, why)] if why.contains("the usage is")), "{report}");
    let failed = std::panic::catch_unwind(|| report.assert_passed()).expect_err("a failed case fails the test");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("1 of 2 conformance cases failed for openai") && message.contains("- usage:"),
        "{message}"
    );
}
