//! The Gemini provider against the strict imitation of the Gemini API
//! (`loopstack_model::testing::imitation::gemini`).

use std::sync::Arc;

use loopstack_model::testing::imitation::gemini::GeminiApi;
use loopstack_model::testing::{Capability, ProviderSuite};
use loopstack_model::{ChatModel, Gemini};

#[tokio::test]
async fn the_gemini_provider_conforms() {
    let suite = ProviderSuite::new(GeminiApi::default(), |setup| {
        let model = Gemini::new(&setup.api_key)
            .base_url(&setup.base_url)
            .retry_policy(setup.retry_policy())
            .__sleep_with(setup.sleep());
        Arc::new(model) as Arc<dyn ChatModel>
    })
    .lacks(Capability::CacheWriteTokens, "Gemini counts no tokens written to the cache");
    suite.run().await.assert_passed();
}
