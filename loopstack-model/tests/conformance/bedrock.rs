//! The Bedrock provider (API-key mode) against the strict imitation of Converse
//! and ConverseStream (`loopstack_model::testing::imitation::bedrock`).

use std::sync::Arc;

use loopstack_model::ChatModel;
use loopstack_model::bedrock::Bedrock;
use loopstack_model::testing::imitation::bedrock::Converse;
use loopstack_model::testing::{Capability, ProviderSuite};

#[tokio::test]
async fn the_bedrock_provider_conforms() {
    let suite = ProviderSuite::new(Converse::default(), |setup| {
        let model = Bedrock::with_api_key("us-west-2", &setup.api_key)
            .endpoint_url(&setup.base_url)
            .retry_policy(setup.retry_policy())
            .__sleep_with(setup.sleep());
        Arc::new(model) as Arc<dyn ChatModel>
    })
    .lacks(Capability::ReasoningTokens, "Converse counts no reasoning tokens apart")
    .lacks(Capability::RetryAfter, "Bedrock's ThrottlingException says no wait")
    .lacks(
        Capability::Reasoning,
        "Bedrock asks each model family for reasoning its own way (Claude's `thinking` field), and the suite's \
         model is of none; Claude's reasoning round trip is tested in tests/bedrock.rs",
    );
    suite.run().await.assert_passed();
}
