//! The OpenAI Responses provider against the strict imitation of the API
//! (`loopstack_model::testing::imitation::openai_responses`).

use std::sync::Arc;

use loopstack_model::testing::imitation::openai_responses::Responses;
use loopstack_model::testing::{Capability, ProviderSuite};
use loopstack_model::{ChatModel, OpenAiResponses};

#[tokio::test]
async fn the_openai_responses_provider_conforms() {
    let suite = ProviderSuite::new(Responses::openai(), |setup| {
        let model = OpenAiResponses::new(&setup.api_key)
            .base_url(&setup.base_url)
            .retry_policy(setup.retry_policy())
            .__sleep_with(setup.sleep());
        Arc::new(model) as Arc<dyn ChatModel>
    })
    .lacks(Capability::CacheWriteTokens, "the Responses API counts no tokens written to the cache");
    suite.run().await.assert_passed();
}
