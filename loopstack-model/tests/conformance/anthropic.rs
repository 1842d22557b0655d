//! The Anthropic provider against the strict imitation of the Messages API
//! (`loopstack_model::testing::imitation::anthropic`).

use std::sync::Arc;

use loopstack_model::testing::imitation::anthropic::MessagesApi;
use loopstack_model::testing::{Capability, ProviderSuite};
use loopstack_model::{Anthropic, ChatModel};

#[tokio::test]
async fn the_anthropic_provider_conforms() {
    let suite = ProviderSuite::new(MessagesApi, |setup| {
        let model = Anthropic::new(&setup.api_key)
            .base_url(&setup.base_url)
            .retry_policy(setup.retry_policy())
            .__sleep_with(setup.sleep());
        Arc::new(model) as Arc<dyn ChatModel>
    })
    .lacks(Capability::ReasoningTokens, "the Messages API counts thinking within output_tokens, not apart");
    suite.run().await.assert_passed();
}
