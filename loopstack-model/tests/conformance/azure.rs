//! Azure OpenAI's Chat Completions and Responses models against the imitations of
//! Azure's paths and key header (`loopstack_model::testing::imitation::azure`).

use std::sync::Arc;

use loopstack_model::ChatModel;
use loopstack_model::openai::Azure;
use loopstack_model::testing::imitation::azure::{AzureChat, AzureResponses};
use loopstack_model::testing::imitation::openai_responses::Responses;
use loopstack_model::testing::imitation::responses_api::ResponsesApi;
use loopstack_model::testing::{API_KEY, Capability, ProviderSuite};

#[tokio::test]
async fn the_azure_chat_completions_provider_conforms() {
    let suite = ProviderSuite::new(AzureChat, |setup| {
        let azure = Azure::new(&setup.base_url, &setup.api_key).retry_policy(setup.retry_policy());
        Arc::new(azure.chat().__sleep_with(setup.sleep())) as Arc<dyn ChatModel>
    })
    .lacks(Capability::Reasoning, "Chat Completions returns no reasoning to send back")
    .lacks(Capability::CacheWriteTokens, "Chat Completions counts no tokens written to the cache");
    suite.run().await.assert_passed();
}

#[tokio::test]
async fn the_azure_responses_provider_conforms() {
    let mut api = ResponsesApi::openai(API_KEY);
    api.path = "/openai/v1/responses".into();
    api.auth = ("api-key", API_KEY.into());
    api.no_header = Some("authorization");
    let suite = ProviderSuite::new(AzureResponses(Responses::at(api)), |setup| {
        let azure = Azure::new(&setup.base_url, &setup.api_key).retry_policy(setup.retry_policy());
        Arc::new(azure.responses().__sleep_with(setup.sleep())) as Arc<dyn ChatModel>
    })
    .lacks(Capability::CacheWriteTokens, "the Responses API counts no tokens written to the cache");
    suite.run().await.assert_passed();
}
