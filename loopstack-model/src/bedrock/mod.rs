//! The AWS Bedrock Converse provider: `Converse` and, streamed, `ConverseStream`,
//! signed with AWS Signature Version 4 (or sent with a Bedrock API key).
//!
//! ```no_run
//! use loopstack_model::bedrock::{Bedrock, Credentials};
//! use loopstack_model::{ChatModel, ChatRequest, Message, ReasoningEffort};
//!
//! # async fn run() -> Result<(), loopstack_model::LlmError> {
//! // AWS_REGION, and AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN)
//! // or a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK.
//! let bedrock = Bedrock::from_env()?;
//! // Or by hand:
//! let bedrock = Bedrock::new("us-east-1", Credentials::new("AKIA...", "secret").session_token("token"));
//!
//! let request = ChatRequest::new("us.anthropic.claude-sonnet-4-5-20250929-v1:0", vec![Message::user("Hello!")])
//!     .system("Be brief.")
//!     .reasoning_effort(ReasoningEffort::Low);
//! let response = bedrock.chat(&request).await?;
//! println!("{}", response.message.text());
//! # Ok(()) }
//! ```
//!
//! A guardrail, or any other field of the Converse request the common settings do not
//! cover, goes through the provider options under `bedrock`, merged into the top level
//! of the request body:
//!
//! ```
//! use loopstack_model::{ChatRequest, Message};
//! use serde_json::json;
//!
//! let request = ChatRequest::new("amazon.nova-pro-v1:0", vec![Message::user("Hi")]).provider_options(
//!     "bedrock",
//!     json!({"guardrailConfig": {"guardrailIdentifier": "gr-1", "guardrailVersion": "1", "trace": "enabled"}}),
//! );
//! # let _ = request;
//! ```

// Split by concern: `request` encodes a `ChatRequest`, `reply` decodes a response
// body, `event_stream` reads the binary framing of a streamed response and `stream`
// its events.

pub mod credentials;
mod event_stream;
mod reply;
mod request;
mod stream;

pub use credentials::{CredentialsProvider, DefaultCredentialsChain};
pub use event_stream::EVENT_STREAM_MAX_MESSAGE_BYTES;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::Url;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tracing::Instrument as _;

use self::credentials::Cache;
use crate::error::LlmError;
use crate::http::{self, ApiKey, Call, Signer, SleepHook, Transport, malformed};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent};

const PROVIDER: &str = "bedrock";

/// The name requests are signed for (the service is `bedrock-runtime`, its signing
/// name `bedrock`).
const SIGNING_NAME: &str = "bedrock";

/// AWS credentials: an access key, its secret, and the session token and expiry of
/// temporary credentials. Neither the secret nor the token appears in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    expiry: Option<SystemTime>,
}

impl Credentials {
    /// Long-term credentials: an access key id and its secret access key.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
            expiry: None,
        }
    }

    /// Sets when temporary credentials expire: a [`CredentialsProvider`]'s are asked for
    /// again [`REFRESH_BEFORE_EXPIRY`](credentials::REFRESH_BEFORE_EXPIRY) before, and
    /// expired ones sign nothing.
    #[must_use]
    pub fn expires_at(mut self, expiry: SystemTime) -> Self {
        self.expiry = Some(expiry);
        self
    }

    /// When the credentials expire (`None`: they do not).
    pub fn expiry(&self) -> Option<SystemTime> {
        self.expiry
    }

    /// Adds the session token of temporary credentials (sent as `x-amz-security-token`).
    #[must_use]
    pub fn session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(token.into());
        self
    }

    /// The access key id.
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("session_token", &self.session_token.as_ref().map(|_| "<redacted>"))
            .field("expiry", &self.expiry)
            .finish()
    }
}

/// How requests are authorized.
#[derive(Clone, Debug)]
enum Auth {
    /// Signed with SigV4 on each attempt (the signer is the transport's).
    SigV4(Arc<SigV4>),
    /// A Bedrock API key, `Authorization: Bearer <key>`.
    ApiKey(ApiKey),
}

/// AWS Bedrock's Converse API (`POST {endpoint}/model/{modelId}/converse`, streamed
/// `/converse-stream`).
///
/// The model of each call is [`ChatRequest::model`]: a model id
/// (`anthropic.claude-3-5-haiku-20241022-v1:0`), an inference profile
/// (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`) or an ARN; it is percent-encoded
/// into the path. One HTTP client is built with the model and reused by every call
/// (clones share it).
///
/// | setting | default | setter |
/// |---|---|---|
/// | region | `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the profile's `region`, in [`Bedrock::from_env`] | [`Bedrock::region`] |
/// | credentials | the [default chain](credentials): environment, profile files, container endpoint, EC2 instance metadata | [`Bedrock::credentials`], [`Bedrock::credentials_provider`] |
/// | Bedrock API key (instead of credentials) | `AWS_BEARER_TOKEN_BEDROCK` | [`Bedrock::api_key`] |
/// | endpoint | `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else `AWS_ENDPOINT_URL`, else `https://bedrock-runtime.{region}.amazonaws.com` | [`Bedrock::endpoint_url`] |
/// | request timeout | 10 minutes | [`Bedrock::timeout`] |
/// | retries | [`RetryPolicy::default`](crate::RetryPolicy::default): 3, backoff 0.5 s doubling up to 8 s | [`Bedrock::retry_policy`] |
/// | room for the answer after a thinking budget, when a request has no `max_tokens` | 4096 | [`Bedrock::default_max_tokens`] |
///
/// Each attempt is signed anew (SigV4 signs its time): the headers `host`,
/// `content-type`, `accept` and `x-amz-date` (and `x-amz-security-token` with a session
/// token) and the body's SHA-256, for the service `bedrock` in the region.
/// The credentials are asked for before each call and after each retry delay, and
/// cached: a provider's temporary credentials are fetched again
/// [`REFRESH_BEFORE_EXPIRY`](credentials::REFRESH_BEFORE_EXPIRY) before they expire,
/// one fetch at a time; expired credentials fail the call with [`LlmError::Config`].
/// [`Bedrock::from_env`] uses the [default chain](credentials) of the AWS SDKs
/// (environment variables, the shared profile files, the ECS/EKS container endpoint,
/// EC2's IMDSv2); SSO, `credential_process` and assumed roles are not followed
/// (resolve those with the AWS SDK and pass them as [`Credentials`] or your own
/// [`CredentialsProvider`]).
///
/// How requests map: the system prompt is a `system` text block, the tools `toolSpec`s,
/// [`ToolResult`](crate::ToolResult)s `toolResult` blocks (status `error` or
/// `success`; an empty result is sent as `(no output)`, since the API refuses blank
/// text), images `image` blocks of base64 bytes (Bedrock fetches no URLs: an image at
/// a URL is shown to the model as a line of text saying so). Reasoning comes back as
/// [`ContentBlock::Reasoning`](crate::ContentBlock::Reasoning) with provider `"bedrock"`
/// and data `{"signature": ..}` (or `{"redacted": ..}` for redacted reasoning), and is
/// sent back unchanged; other providers' reasoning and blocks are left out. On
/// Anthropic models (an id with `anthropic.` or `claude`),
/// [`ModelSettings::thinking_budget`](crate::ModelSettings::thinking_budget) becomes
/// `additionalModelRequestFields.thinking`; other models' reasoning settings go through
/// the provider options. Prompt-cache breakpoints
/// ([`PromptCache`](crate::PromptCache)) become `cachePoint` blocks: by default
/// ([`PromptCache::Auto`](crate::PromptCache::Auto)) only on models known to cache
/// (Anthropic's: tools, system and messages; Amazon Nova: system and messages), as set
/// by hand ([`PromptCache::At`](crate::PromptCache::At)) on any. Usage counts cache
/// reads and writes apart ([`Usage`](crate::Usage)); the stop reasons
/// `guardrail_intervened` and `content_filtered` are
/// [`StopReason::Other`](crate::StopReason::Other). A response names no model and has
/// no id: [`ChatResponse::model`] is the model asked for, [`ChatResponse::id`] `None`.
///
/// Errors: an HTTP error is typed by its status (`ValidationException` 400 and
/// `ModelErrorException` 424 [`LlmError::InvalidRequest`], `AccessDeniedException` 403
/// [`LlmError::Authentication`], `ThrottlingException` and `ModelNotReadyException` 429
/// [`LlmError::RateLimited`], `ModelTimeoutException` 408, `InternalServerException`
/// 500 and `ServiceUnavailableException` 503 [`LlmError::Server`]), its message led by
/// the type from `x-amzn-errortype`, and retried as the HTTP providers retry. An
/// exception inside a stream is the same kind. The timeout is a deadline for each
/// whole attempt, a stream's included; a stream's messages may be
/// [`EVENT_STREAM_MAX_MESSAGE_BYTES`] large and must pass both their CRC32 checks
/// (else [`LlmError::MalformedResponse`]), as must a stream cut off inside a message or
/// before `messageStop`.
///
/// The secret key, session token and API key never appear in `Debug` output, logs or
/// errors.
#[derive(Clone)]
#[must_use = "a model does nothing until it is called"]
pub struct Bedrock {
    transport: Transport,
    region: String,
    auth: Auth,
    /// The retry delay set by [`Bedrock::__sleep_with`] (the transport's own wraps it
    /// with a refresh of the credentials).
    sleep: Option<SleepHook>,
    endpoint_url: Option<String>,
    default_max_tokens: u32,
}

impl fmt::Debug for Bedrock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth: &dyn fmt::Debug = match &self.auth {
            Auth::SigV4(signer) => &signer.cache,
            Auth::ApiKey(key) => key,
        };
        f.debug_struct("Bedrock")
            .field("region", &self.region)
            .field("auth", auth)
            .field("endpoint_url", &self.endpoint_url)
            .field("timeout", &self.transport.timeout)
            .field("retry_policy", &self.transport.retry)
            .field("default_max_tokens", &self.default_max_tokens)
            .finish()
    }
}

impl Bedrock {
    /// The request timeout when none is set: 10 minutes.
    pub const DEFAULT_TIMEOUT: Duration = http::DEFAULT_TIMEOUT;
    /// The room for an answer after the thinking budget when a request that thinks has
    /// no `max_tokens`: `maxTokens` is the budget plus this.
    pub const DEFAULT_MAX_TOKENS: u32 = 4096;

    /// A model in `region` (such as `us-east-1`) signing its requests with `credentials`.
    pub fn new(region: impl Into<String>, credentials: Credentials) -> Self {
        Self {
            transport: Transport::new(),
            region: region.into(),
            auth: Auth::ApiKey(ApiKey::new("")),
            sleep: None,
            endpoint_url: None,
            default_max_tokens: Self::DEFAULT_MAX_TOKENS,
        }
        .credentials(credentials)
    }

    /// A model in `region` signing its requests with the credentials `provider` gives
    /// (cached, and asked again before they expire).
    pub fn with_credentials_provider(region: impl Into<String>, provider: impl CredentialsProvider + 'static) -> Self {
        Self::new(region, Credentials::new("", "")).credentials_provider(provider)
    }

    /// A model in `region` sending a Bedrock API key (`Authorization: Bearer <key>`)
    /// instead of signing.
    pub fn with_api_key(region: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self::new(region, Credentials::new("", "")).api_key(api_key)
    }

    /// A model configured from the environment, as the AWS SDKs read it: the region
    /// from `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the `region` of the profile
    /// (`AWS_PROFILE`, else `default`) in the shared config file; a Bedrock API key
    /// from `AWS_BEARER_TOKEN_BEDROCK`, else credentials from the
    /// [default chain](credentials) (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
    /// `AWS_SESSION_TOKEN`, the profile files, the container endpoint, EC2's instance
    /// metadata), resolved on the first call; the endpoint from
    /// `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else `AWS_ENDPOINT_URL` (neither when
    /// `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is `true`).
    ///
    /// # Errors
    /// [`LlmError::Config`] when the region is missing, only one of
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` is set, a profile file cannot be
    /// read or `AWS_PROFILE` names no profile (when the region comes from it), or the
    /// endpoint URL is invalid. Finding no credentials fails the first call with
    /// [`LlmError::Config`], naming each source tried and why it had none.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let config = |message: &str| LlmError::Config { provider: PROVIDER, message: message.to_owned() };
        let api_key = http::non_empty(lookup, "AWS_BEARER_TOKEN_BEDROCK");
        let chain = DefaultCredentialsChain::from_vars(lookup);
        let chain = match (chain, &api_key) {
            (Ok(chain), _) => Some(chain),
            (Err(_), Some(_)) => None,
            (Err(error), None) => return Err(error),
        };
        let region = match http::non_empty(lookup, "AWS_REGION")
            .or_else(|| http::non_empty(lookup, "AWS_DEFAULT_REGION"))
        {
            Some(region) => region,
            None => {
                chain.as_ref().map(DefaultCredentialsChain::profile_region).transpose()?.flatten().ok_or_else(|| {
                    config("no region: neither AWS_REGION nor AWS_DEFAULT_REGION is set, nor the profile's `region`")
                })?
            }
        };
        let mut model = match (api_key, chain) {
            (Some(key), _) => Self::with_api_key(region, key),
            (None, Some(chain)) => Self::with_credentials_provider(region, chain),
            (None, None) => unreachable!("a chain that failed to build returned its error"),
        };
        let ignore = http::non_empty(lookup, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !ignore
            && let Some(endpoint) = http::non_empty(lookup, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
                .or_else(|| http::non_empty(lookup, "AWS_ENDPOINT_URL"))
        {
            model.endpoint_url = Some(endpoint);
            model.url("m", false)?;
        }
        Ok(model)
    }

    /// Sets the region (`us-east-1`, ...), which the requests are signed for and, unless
    /// an endpoint is set, sent to.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = region.into();
        if let Auth::SigV4(signer) = &self.auth {
            let cache = signer.cache.clone();
            self = self.sign_with(cache);
        }
        self
    }

    /// Sets the credentials requests are signed with (in place of an API key or a
    /// provider).
    pub fn credentials(self, credentials: Credentials) -> Self {
        self.sign_with(Arc::new(Cache::fixed(credentials)))
    }

    /// Sets where the credentials requests are signed with come from (in place of an
    /// API key or fixed credentials): asked on the first call, then again
    /// [`REFRESH_BEFORE_EXPIRY`](credentials::REFRESH_BEFORE_EXPIRY) before the ones
    /// it gave expire.
    pub fn credentials_provider(self, provider: impl CredentialsProvider + 'static) -> Self {
        self.sign_with(Arc::new(Cache::new(Arc::new(provider))))
    }

    fn sign_with(mut self, cache: Arc<Cache>) -> Self {
        let signer = Arc::new(SigV4 { cache, region: self.region.clone() });
        self.transport.signer = Some(signer.clone());
        self.auth = Auth::SigV4(signer);
        self.set_sleep()
    }

    /// The transport's retry delay: the one set by the test hook (else a Tokio sleep),
    /// then a refresh of the credentials, so each attempt signs with fresh ones.
    fn set_sleep(mut self) -> Self {
        let cache = match &self.auth {
            Auth::SigV4(signer) => signer.cache.clone(),
            Auth::ApiKey(_) => {
                self.transport.sleep = self.sleep.clone();
                return self;
            }
        };
        let sleep = self.sleep.clone();
        self.transport.sleep = Some(http::sleep_hook(move |delay| {
            let (cache, sleep) = (cache.clone(), sleep.clone());
            async move {
                match sleep {
                    Some(hook) => hook(delay).await,
                    None => tokio::time::sleep(delay).await,
                }
                // A failure shows when the attempt is signed (with credentials expired).
                let _ = cache.refresh().await;
            }
        }));
        self
    }

    /// Sets a Bedrock API key, sent as `Authorization: Bearer <key>` in place of a
    /// signature.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.transport.signer = None;
        self.auth = Auth::ApiKey(ApiKey::new(api_key));
        self.set_sleep()
    }

    /// Fetches the credentials if they are not cached or will soon expire.
    async fn refresh_credentials(&self) -> Result<(), LlmError> {
        match &self.auth {
            Auth::SigV4(signer) => signer.cache.refresh().await,
            Auth::ApiKey(_) => Ok(()),
        }
    }

    /// Sets the endpoint, such as a VPC endpoint's, a proxy's or a local imitation's
    /// (`http://localhost:8080`); the path `/model/{modelId}/converse` is appended. An
    /// invalid URL fails the calls with [`LlmError::Config`].
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Sets the request timeout (see the type's docs for what it covers).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.transport.timeout = timeout;
        self
    }

    /// Sets how failed requests are retried.
    pub fn retry_policy(mut self, policy: crate::RetryPolicy) -> Self {
        self.transport.retry = policy;
        self
    }

    /// Sets the room for an answer after the thinking budget when a request that
    /// thinks has no `max_tokens`.
    pub fn default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    /// Test hook: `sleep` is awaited instead of each retry delay, and receives it.
    #[doc(hidden)]
    pub fn __sleep_with<F, Fut>(mut self, sleep: F) -> Self
    where
        F: Fn(Duration) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.sleep = Some(http::sleep_hook(sleep));
        self.set_sleep()
    }

    /// The URL of a call of `model`.
    fn url(&self, model: &str, stream: bool) -> Result<Url, LlmError> {
        let config = |message: String| LlmError::Config { provider: PROVIDER, message };
        let region = self.region.as_str();
        if region.is_empty() || !region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return Err(config(format!("invalid region `{region}`: lower-case letters, digits and `-` only")));
        }
        let base = match &self.endpoint_url {
            Some(url) => url.trim().trim_end_matches('/').to_owned(),
            None if region.starts_with("cn-") => format!("https://bedrock-runtime.{region}.amazonaws.com.cn"),
            None => format!("https://bedrock-runtime.{region}.amazonaws.com"),
        };
        let operation = if stream { "converse-stream" } else { "converse" };
        let url = Url::parse(&format!("{base}/model/{}/{operation}", encode_label(model)))
            .map_err(|e| config(format!("invalid endpoint URL `{base}`: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(config(format!("invalid endpoint URL `{base}`: the scheme must be http or https")));
        }
        Ok(url)
    }

    fn call<'a>(&self, request: &'a ChatRequest, stream: bool) -> Result<Call<'a>, LlmError> {
        let url = self.url(&request.model, stream)?;
        let body = request::encode_request(request, self.default_max_tokens)?;
        let body = serde_json::to_vec(&body).map_err(|e| malformed(PROVIDER, &request.model, e.to_string()))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = if stream { "application/vnd.amazon.eventstream" } else { "application/json" };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        if let Auth::ApiKey(key) = &self.auth {
            headers.insert(AUTHORIZATION, key.header(PROVIDER, "Bearer ")?);
        }
        Ok(Call { provider: PROVIDER, model: &request.model, url, headers, body: body.into() })
    }
}

/// A URI label as the AWS SDKs encode it: every byte but `A-Z a-z 0-9 - _ . ~`
/// percent-encoded (`:` of a model version, `/` of an ARN).
fn encode_label(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for byte in label.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Signs each attempt with SigV4 for `bedrock` in the region, with the cached
/// credentials (refreshed before the call and after each retry delay).
#[derive(Debug)]
struct SigV4 {
    cache: Arc<Cache>,
    region: String,
}

impl Signer for SigV4 {
    fn sign(&self, call: &Call<'_>) -> Result<HeaderMap, LlmError> {
        let fail =
            |what: &str| LlmError::Config { provider: PROVIDER, message: format!("cannot sign the request: {what}") };
        let Credentials { access_key_id, secret_access_key, session_token, expiry } = &self.cache.signing()?;
        let identity = aws_credential_types::Credentials::new(
            access_key_id.as_str(),
            secret_access_key.as_str(),
            session_token.clone(),
            *expiry,
            "loopstack",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SIGNING_NAME)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| fail(&e.to_string()))?
            .into();
        let headers = call.headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new("POST", call.url.as_str(), headers, SignableBody::Bytes(&call.body))
            .map_err(|e| fail(&e.to_string()))?;
        let (instructions, _signature) = sign(signable, &params).map_err(|e| fail(&e.to_string()))?.into_parts();
        let (signed, _params) = instructions.into_parts();
        let mut out = HeaderMap::new();
        for header in signed {
            let name = HeaderName::from_bytes(header.name().as_bytes()).map_err(|_| fail("an invalid header name"))?;
            // The error names no value: the access key id or token may be in it.
            let mut value = HeaderValue::from_str(header.value())
                .map_err(|_| fail("the credentials contain characters not allowed in an HTTP header"))?;
            value.set_sensitive(header.sensitive() || name == AUTHORIZATION || name == "x-amz-security-token");
            out.insert(name, value);
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl ChatModel for Bedrock {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    /// `false`: a request's [`ChatRequest::response_schema`] is not sent.
    fn structured_output(&self) -> bool {
        false
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = http::request_span(PROVIDER, &request.model, false);
        let started = Instant::now();
        let result = async {
            let call = self.call(request, false)?;
            self.refresh_credentials().await?;
            self.transport.post_json(&call, |body| reply::decode_response(body, &request.model)).await
        }
        .instrument(span.clone())
        .await;
        http::record_outcome(&span, started, result.as_ref().map(|r| &r.usage));
        result
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let span = http::request_span(PROVIDER, &request.model, true);
        let call = match self.call(request, true) {
            Ok(call) => call,
            Err(error) => return futures::stream::once(async { Err(error) }).boxed(),
        };
        let mut events = Some(stream::read(&self.transport, call, stream::Decoder::new(&request.model), span));
        futures::stream::once(self.refresh_credentials())
            .flat_map(move |ready| match (ready, events.take()) {
                (Ok(()), Some(events)) => events,
                (Err(error), _) => futures::stream::once(async { Err(error) }).boxed(),
                (Ok(()), None) => futures::stream::empty().boxed(),
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn env_configuration() {
        let err =
            Bedrock::from_lookup(&lookup(&[("AWS_ACCESS_KEY_ID", "A"), ("AWS_SECRET_ACCESS_KEY", "S")])).unwrap_err();
        assert!(matches!(err, LlmError::Config { provider: "bedrock", ref message } if message.contains("AWS_REGION")));
        let err =
            Bedrock::from_lookup(&lookup(&[("AWS_REGION", "us-east-1"), ("AWS_ACCESS_KEY_ID", "A")])).unwrap_err();
        assert!(matches!(err, LlmError::Config { ref message, .. } if message.contains("AWS_SECRET_ACCESS_KEY")));

        let model = Bedrock::from_lookup(&lookup(&[
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "very-secret"),
            ("AWS_SESSION_TOKEN", "session-secret"),
        ]))
        .unwrap();
        assert_eq!(model.region, "eu-west-1");
        let Auth::SigV4(signer) = &model.auth else { panic!("signed") };
        let chain = format!("{:?}", signer.cache);
        assert!(chain.contains("DefaultCredentialsChain") && chain.contains("AKIDEXAMPLE"), "{chain}");
        assert!(model.transport.signer.is_some());
        assert_eq!(
            model.url("anthropic.claude-3-5-haiku-20241022-v1:0", false).unwrap().as_str(),
            "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse"
        );
        let debug = format!("{model:?}");
        assert!(debug.contains("AKIDEXAMPLE") && !debug.contains("very-secret"), "{debug}");
        assert!(!debug.contains("session-secret"), "{debug}");

        let model = Bedrock::from_lookup(&lookup(&[
            ("AWS_REGION", "us-west-2"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-secret"),
            ("AWS_ACCESS_KEY_ID", "A"),
            ("AWS_SECRET_ACCESS_KEY", "S"),
            ("AWS_ENDPOINT_URL", "http://localhost:1"),
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://localhost:2/"),
        ]))
        .unwrap();
        assert_eq!(model.region, "us-west-2");
        assert!(matches!(model.auth, Auth::ApiKey(_)) && model.transport.signer.is_none());
        assert_eq!(model.url("m", true).unwrap().as_str(), "http://localhost:2/model/m/converse-stream");
        assert!(!format!("{model:?}").contains("api-key-secret"));

        let model = Bedrock::from_lookup(&lookup(&[
            ("AWS_REGION", "us-west-2"),
            ("AWS_BEARER_TOKEN_BEDROCK", "k"),
            ("AWS_ENDPOINT_URL", "http://localhost:1"),
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
        ]))
        .unwrap();
        assert_eq!(model.endpoint_url, None);
        let err = Bedrock::from_lookup(&lookup(&[
            ("AWS_REGION", "us-west-2"),
            ("AWS_BEARER_TOKEN_BEDROCK", "k"),
            ("AWS_ENDPOINT_URL", "::bad"),
        ]))
        .unwrap_err();
        assert!(matches!(err, LlmError::Config { .. }));
    }

    #[test]
    fn urls_encode_the_model_and_check_the_region_and_endpoint() {
        let model = Bedrock::new("cn-north-1", Credentials::new("a", "b"));
        let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude x";
        assert_eq!(
            model.url(arn, false).unwrap().as_str(),
            "https://bedrock-runtime.cn-north-1.amazonaws.com.cn/model/\
             arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude%20x/converse"
        );
        let bad = model.clone().region("us-east-1/../x");
        assert!(matches!(bad.url("m", false), Err(LlmError::Config { ref message, .. }) if message.contains("region")));
        let ftp = model.clone().endpoint_url("ftp://x");
        assert!(matches!(ftp.url("m", false), Err(LlmError::Config { .. })));
        // A new region re-signs for it.
        let moved = model.region("eu-central-1");
        let Auth::SigV4(signer) = &moved.auth else { panic!("signed") };
        assert_eq!(signer.region, "eu-central-1");
    }

    #[test]
    fn signing_adds_the_authorization_date_and_token() {
        let model = Bedrock::new("us-east-1", Credentials::new("AKID", "secret").session_token("tok"));
        let request = ChatRequest::new("m", vec![crate::Message::user("Hi")]);
        let call = model.call(&request, false).unwrap();
        let Auth::SigV4(signer) = &model.auth else { panic!("signed") };
        let headers = signer.sign(&call).unwrap();
        let auth = headers[AUTHORIZATION].to_str().unwrap();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"), "{auth}");
        assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
        assert!(auth.contains("SignedHeaders=accept;content-type;host;x-amz-date;x-amz-security-token"), "{auth}");
        assert!(headers[AUTHORIZATION].is_sensitive() && headers["x-amz-security-token"].is_sensitive());
        assert_eq!(headers["x-amz-security-token"], "tok");
        assert_eq!(headers["x-amz-date"].len(), 16);
        let bad = Bedrock::new("us-east-1", Credentials::new("AK\nID", "secret"));
        let Auth::SigV4(signer) = &bad.auth else { panic!("signed") };
        let err = signer.sign(&call).unwrap_err();
        assert!(matches!(err, LlmError::Config { .. }) && !err.to_string().contains("AK\nID"));
    }
}
