//! Azure OpenAI ([`Azure`]): the Chat Completions and Responses providers at an
//! Azure resource's endpoint.
//!
//! ```no_run
//! use loopstack_model::openai::Azure;
//! use loopstack_model::{ChatModel, ChatRequest, Message};
//!
//! # async fn run() -> Result<(), loopstack_model::LlmError> {
//! // AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_API_KEY, optional OPENAI_API_VERSION.
//! let azure = Azure::from_env()?;
//! // The model of a request is the name of its deployment.
//! let request = ChatRequest::new("my-gpt-deployment", vec![Message::user("Hello!")]);
//! let reply = azure.responses().chat(&request).await?;
//! println!("{}", reply.message.text());
//! let reply = azure.chat().chat(&request).await?;
//! println!("{}", reply.message.text());
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use reqwest::Url;
use serde_json::{Map, Value};

use super::{OpenAi, Responses};
use crate::RetryPolicy;
use crate::error::LlmError;
use crate::http::{self, ApiKey, Auth, Client};

/// The provider name of the Chat Completions models [`Azure::chat`] builds.
const CHAT_PROVIDER: &str = "azure";
/// The provider name of the Responses models [`Azure::responses`] builds.
const RESPONSES_PROVIDER: &str = "azure-responses";

/// How Azure is told who calls: an API key (`api-key: <key>`) or a Microsoft Entra ID
/// token (`Authorization: Bearer <token>`). `Debug` never shows either.
#[derive(Clone, PartialEq, Eq)]
enum Credential {
    Key(String),
    Token(String),
}

impl Credential {
    fn auth(&self) -> Auth {
        match self {
            Self::Key(_) => Auth { header: "api-key", prefix: "" },
            Self::Token(_) => Auth { header: "authorization", prefix: "Bearer " },
        }
    }

    fn secret(&self) -> &str {
        match self {
            Self::Key(s) | Self::Token(s) => s,
        }
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Key(_) => "ApiKey(<redacted>)",
            Self::Token(_) => "BearerToken(<redacted>)",
        })
    }
}

/// Azure OpenAI: a resource's endpoint (`https://<resource>.openai.azure.com`) and
/// how to call it, from which [`Azure::chat`] builds a Chat Completions model
/// ([`OpenAi`]) and [`Azure::responses`] a Responses model ([`Responses`]).
///
/// | setting | default | setter |
/// |---|---|---|
/// | endpoint | `AZURE_OPENAI_ENDPOINT` in [`Azure::from_env`] | [`Azure::new`], [`Azure::with_token`] |
/// | credential | `AZURE_OPENAI_API_KEY` (sent as `api-key`), else `AZURE_OPENAI_AD_TOKEN` (sent as `Authorization: Bearer`) | [`Azure::new`], [`Azure::with_token`] |
/// | API | the v1 API; with `OPENAI_API_VERSION`, the deployment URLs of that `api-version` | [`Azure::api_version`] |
/// | deployment | the request's [`ChatRequest::model`](crate::ChatRequest::model) | [`Azure::deployment`] |
/// | request timeout, retries | those of the providers | [`Azure::timeout`], [`Azure::retry_policy`] |
///
/// **URLs.** The v1 API (the default) takes OpenAI's paths under `/openai/v1`, with
/// the deployment's name as the request's `model`: `POST
/// {endpoint}/openai/v1/chat/completions` and `{endpoint}/openai/v1/responses`. With an
/// [`api_version`](Azure::api_version) (such as `2024-10-21`), the older URLs are used:
/// `POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`
/// and `{endpoint}/openai/responses?api-version=...` (an `api-version` of `preview` or
/// `latest` is the v1 API's preview, sent as the query of the v1 paths). The endpoint may
/// end in `/`, `/openai` or `/openai/v1`.
///
/// **Provider names.** The models are named `azure` and `azure-responses`, in their
/// errors, spans and [`ChatModel::provider`](crate::ChatModel::provider): Azure's
/// reasoning items are sent back to Azure only, and
/// [`ModelSettings::provider_options`](crate::ModelSettings::provider_options) are read
/// under those names. The Chat Completions model sends the output limit as
/// `max_completion_tokens`, which Azure's reasoning models require.
///
/// The credential never appears in `Debug` output, logs or errors. A Microsoft Entra
/// ID token expires (after about an hour): build the models again with a fresh one.
#[derive(Clone)]
#[must_use = "an Azure endpoint does nothing until a model built from it is called"]
pub struct Azure {
    endpoint: String,
    credential: Credential,
    api_version: Option<String>,
    deployment: Option<String>,
    timeout: Duration,
    retry: RetryPolicy,
}

impl fmt::Debug for Azure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Azure")
            .field("endpoint", &self.endpoint)
            .field("credential", &self.credential)
            .field("api_version", &self.api_version)
            .field("deployment", &self.deployment)
            .field("timeout", &self.timeout)
            .field("retry_policy", &self.retry)
            .finish()
    }
}

impl Azure {
    /// An Azure OpenAI resource at `endpoint` (`https://<resource>.openai.azure.com`),
    /// called with an API key (sent as `api-key: <key>`), through the v1 API.
    pub fn new(endpoint: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self::with_credential(endpoint.into(), Credential::Key(api_key.into()))
    }

    /// An Azure OpenAI resource at `endpoint`, called with a Microsoft Entra ID token
    /// (sent as `Authorization: Bearer <token>`), through the v1 API.
    pub fn with_token(endpoint: impl Into<String>, token: impl Into<String>) -> Self {
        Self::with_credential(endpoint.into(), Credential::Token(token.into()))
    }

    fn with_credential(endpoint: String, credential: Credential) -> Self {
        Self {
            endpoint,
            credential,
            api_version: None,
            deployment: None,
            timeout: http::DEFAULT_TIMEOUT,
            retry: RetryPolicy::new(),
        }
    }

    /// An Azure resource configured from the environment, as Azure's and OpenAI's SDKs
    /// read it: `AZURE_OPENAI_ENDPOINT` (required), `AZURE_OPENAI_API_KEY` or else
    /// `AZURE_OPENAI_AD_TOKEN` (one is required), and `OPENAI_API_VERSION` (optional:
    /// set, the deployment URLs of that version are used; `v1` or unset, the v1 API).
    ///
    /// # Errors
    /// [`LlmError::Config`] when the endpoint or both credentials are missing, or the
    /// endpoint is not an `http` or `https` URL.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let config = |message: &str| LlmError::Config { provider: CHAT_PROVIDER, message: message.to_owned() };
        let endpoint = http::non_empty(lookup, "AZURE_OPENAI_ENDPOINT")
            .ok_or_else(|| config("AZURE_OPENAI_ENDPOINT is not set (https://<resource>.openai.azure.com)"))?;
        let credential =
            match (http::non_empty(lookup, "AZURE_OPENAI_API_KEY"), http::non_empty(lookup, "AZURE_OPENAI_AD_TOKEN")) {
                (Some(key), _) => Credential::Key(key),
                (None, Some(token)) => Credential::Token(token),
                (None, None) => return Err(config("neither AZURE_OPENAI_API_KEY nor AZURE_OPENAI_AD_TOKEN is set")),
            };
        let mut azure = Self::with_credential(endpoint, credential);
        azure.api_version = http::non_empty(lookup, "OPENAI_API_VERSION");
        azure.route().url(CHAT_PROVIDER, &azure.endpoint, &["chat", "completions"], "x")?;
        Ok(azure)
    }

    /// Calls the deployment URLs of this `api-version` (such as `2024-10-21`) instead
    /// of the v1 API; `v1` is the v1 API, `preview` or `latest` its preview.
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.api_version = Some(version.into());
        self
    }

    /// Calls this deployment whatever a request's model says (by default, a request's
    /// [`ChatRequest::model`](crate::ChatRequest::model) names its deployment).
    pub fn deployment(mut self, deployment: impl Into<String>) -> Self {
        self.deployment = Some(deployment.into());
        self
    }

    /// Sets the request timeout of the models built (see [`OpenAi`]'s docs for what it
    /// covers).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets how the models built retry failed requests.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    fn route(&self) -> Route {
        Route { api_version: self.api_version.clone(), deployment: self.deployment.clone() }
    }

    fn client(&self, provider: &'static str, path: &'static str) -> Client {
        let mut client = Client::new(provider, &self.endpoint, path, self.credential.auth());
        client.api_key = Some(ApiKey::new(self.credential.secret()));
        client.transport.timeout = self.timeout;
        client.transport.retry = self.retry;
        client
    }

    /// A Chat Completions model ([`OpenAi`]) of this resource, named `azure`. Its
    /// setters (timeout, retries, [`OpenAi::base_url`] for the endpoint) still apply.
    pub fn chat(&self) -> OpenAi {
        OpenAi::with_client(CHAT_PROVIDER, self.client(CHAT_PROVIDER, super::PATH), Some(self.route()))
    }

    /// A Responses model ([`Responses`]) of this resource, named `azure-responses`.
    /// Its setters (timeout, retries, `store`, [`Responses::base_url`] for the
    /// endpoint) still apply.
    pub fn responses(&self) -> Responses {
        Responses::with_client(RESPONSES_PROVIDER, self.client(RESPONSES_PROVIDER, super::responses::PATH))
            .with_route(Some(self.route()))
    }
}

/// Where a model [`Azure`] built sends its calls: the API (v1, or the deployment URLs
/// of an `api-version`) and the deployment. The endpoint is the model's base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    api_version: Option<String>,
    deployment: Option<String>,
}

impl Route {
    /// Whether the calls go to the v1 paths (with an `api-version` query for its preview).
    fn v1(&self) -> bool {
        matches!(self.api_version.as_deref(), None | Some("v1" | "preview" | "latest"))
    }

    /// The query of the calls: the `api-version`, except `v1`'s.
    fn query(&self) -> Option<&str> {
        self.api_version.as_deref().filter(|v| *v != "v1")
    }

    /// Writes the deployment as the body's `model` when one is set.
    pub(crate) fn set_model(&self, body: &mut Map<String, Value>) {
        if let Some(deployment) = &self.deployment {
            body.insert("model".into(), deployment.clone().into());
        }
    }

    /// The URL of a Chat Completions call for `model`.
    pub(crate) fn chat_url(&self, provider: &'static str, endpoint: &str, model: &str) -> Result<Url, LlmError> {
        self.url(provider, endpoint, &["chat", "completions"], model)
    }

    /// The URL of a Responses call.
    pub(crate) fn responses_url(&self, provider: &'static str, endpoint: &str) -> Result<Url, LlmError> {
        self.url(provider, endpoint, &["responses"], "")
    }

    /// `{endpoint}/openai/v1/{path}` or, with a dated `api-version`,
    /// `{endpoint}/openai/deployments/{deployment}/{path}` for Chat Completions and
    /// `{endpoint}/openai/{path}` for Responses, each with its `api-version` query.
    fn url(&self, provider: &'static str, endpoint: &str, path: &[&str], model: &str) -> Result<Url, LlmError> {
        let config = |message: String| LlmError::Config { provider, message };
        let root = endpoint.trim().trim_end_matches('/');
        let root = root.strip_suffix("/openai/v1").or_else(|| root.strip_suffix("/openai")).unwrap_or(root);
        let mut url = Url::parse(root).map_err(|e| config(format!("invalid Azure endpoint `{endpoint}`: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
            return Err(config(format!("invalid Azure endpoint `{endpoint}`: the scheme must be http or https")));
        }
        let deployment = self.deployment.as_deref().unwrap_or(model);
        {
            let mut segments =
                url.path_segments_mut().map_err(|()| config(format!("invalid Azure endpoint `{endpoint}`")))?;
            segments.pop_if_empty().push("openai");
            if self.v1() {
                segments.push("v1");
            } else if path == ["chat", "completions"] {
                if deployment.is_empty() {
                    return Err(config(
                        "a Chat Completions call to Azure needs a deployment: the request's model".into(),
                    ));
                }
                segments.extend(["deployments", deployment]);
            }
            segments.extend(path);
        }
        url.set_query(None);
        if let Some(version) = self.query() {
            url.query_pairs_mut().append_pair("api-version", version);
        }
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatModel;

    fn route(version: Option<&str>, deployment: Option<&str>) -> Route {
        Route { api_version: version.map(str::to_owned), deployment: deployment.map(str::to_owned) }
    }

    #[test]
    fn urls_of_each_api() {
        let base = "https://res.openai.azure.com";
        let chat = |r: &Route, e: &str| r.chat_url("azure", e, "gpt-4o").unwrap().to_string();
        let responses = |r: &Route, e: &str| r.responses_url("azure", e).unwrap().to_string();
        for endpoint in [base, "https://res.openai.azure.com/", "https://res.openai.azure.com/openai/v1/"] {
            assert_eq!(chat(&route(None, None), endpoint), format!("{base}/openai/v1/chat/completions"));
            assert_eq!(responses(&route(Some("v1"), None), endpoint), format!("{base}/openai/v1/responses"));
        }
        let dated = route(Some("2024-10-21"), None);
        assert_eq!(
            chat(&dated, "https://res.openai.azure.com/openai"),
            format!("{base}/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21")
        );
        assert_eq!(responses(&dated, base), format!("{base}/openai/responses?api-version=2024-10-21"));
        assert_eq!(
            chat(&route(Some("2024-10-21"), Some("my dep")), base),
            format!("{base}/openai/deployments/my%20dep/chat/completions?api-version=2024-10-21")
        );
        assert_eq!(
            responses(&route(Some("preview"), None), base),
            format!("{base}/openai/v1/responses?api-version=preview")
        );
        // A proxy with a path of its own keeps it.
        assert_eq!(
            chat(&route(None, None), "http://proxy:8080/azure"),
            "http://proxy:8080/azure/openai/v1/chat/completions"
        );
        for bad in ["res.openai.azure.com", "ftp://x", "::"] {
            assert!(matches!(route(None, None).chat_url("azure", bad, "m"), Err(LlmError::Config { .. })), "{bad}");
        }
        assert!(matches!(dated.chat_url("azure", base, ""), Err(LlmError::Config { .. })));
    }

    #[test]
    fn env_configuration() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        let err = Azure::from_lookup(&lookup(&[("AZURE_OPENAI_API_KEY", "k")])).unwrap_err();
        assert!(matches!(err, LlmError::Config { ref message, .. } if message.contains("AZURE_OPENAI_ENDPOINT")));
        let err = Azure::from_lookup(&lookup(&[("AZURE_OPENAI_ENDPOINT", "https://r.openai.azure.com")])).unwrap_err();
        assert!(matches!(err, LlmError::Config { ref message, .. } if message.contains("AZURE_OPENAI_API_KEY")));
        let err = Azure::from_lookup(&lookup(&[
            ("AZURE_OPENAI_ENDPOINT", "r.openai.azure.com"),
            ("AZURE_OPENAI_API_KEY", "k"),
        ]))
        .unwrap_err();
        assert!(matches!(err, LlmError::Config { .. }));
        let azure = Azure::from_lookup(&lookup(&[
            ("AZURE_OPENAI_ENDPOINT", "https://r.openai.azure.com"),
            ("AZURE_OPENAI_API_KEY", "secret-key"),
            ("OPENAI_API_VERSION", "2024-10-21"),
        ]))
        .unwrap();
        assert_eq!(
            (azure.credential.clone(), azure.api_version.as_deref()),
            (Credential::Key("secret-key".into()), Some("2024-10-21"))
        );
        assert!(!format!("{azure:?} {:?} {:?}", azure.chat(), azure.responses()).contains("secret"));
        let token = Azure::from_lookup(&lookup(&[
            ("AZURE_OPENAI_ENDPOINT", "https://r.openai.azure.com"),
            ("AZURE_OPENAI_AD_TOKEN", "tok"),
        ]))
        .unwrap();
        assert_eq!((token.credential, token.api_version), (Credential::Token("tok".into()), None));
        assert_eq!(azure.chat().provider(), "azure");
        assert_eq!(azure.responses().provider(), "azure-responses");
    }
}
