//! OAuth 2.1 for remote MCP servers (feature `mcp-oauth`), on rmcp's implementation:
//! the server's protected-resource and authorization-server metadata are discovered
//! from its `401`, the client is registered (dynamically, unless pre-registered),
//! and a token is got by the authorization code flow with PKCE or by client
//! credentials; it is refreshed when it expires or the server rejects it. Tokens
//! are registered with the runtime's secrets (redacted from what runs record) and
//! kept for the server's later connections in this process.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, ClientCredentialsConfig, CredentialStore,
    InMemoryCredentialStore, OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
    OAuthState, StoredCredentials,
};

use super::McpError;
use super::server::HeaderValue;

/// What [`McpOAuth::authorization_code`]'s `authorize` returns.
pub type AuthorizeFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// How the client gets its token from an MCP server's authorization server
/// (OAuth 2.1), for [`McpServer::oauth`](super::McpServer::oauth).
///
/// ```
/// use loopstack_llm::mcp::{McpOAuth, McpServer};
///
/// // A service account: the client credentials grant.
/// let service = McpServer::http("https://mcp.example.com/mcp")
///     .oauth(McpOAuth::client_credentials_from_env("agent-7", "MCP_CLIENT_SECRET").scopes(["tools:read"]));
/// // On behalf of a person: the authorization code flow with PKCE. `authorize` shows
/// // the person the URL (a page, a terminal) and returns where the authorization
/// // server sent them back: the redirect URI with `code` and `state`.
/// let personal = McpServer::http("https://mcp.example.com/mcp").oauth(McpOAuth::authorization_code(
///     "http://127.0.0.1:8765/callback",
///     |url: String| async move {
///         println!("Open {url} and sign in");
///         Ok::<_, String>(wait_for_the_callback().await)
///     },
/// ));
/// # async fn wait_for_the_callback() -> String { String::new() }
/// ```
#[derive(Clone)]
pub struct McpOAuth {
    flow: Flow,
    scopes: Vec<String>,
    client_name: String,
    /// The tokens got, shared by the server's connections (a clone shares them).
    credentials: InMemoryCredentialStore,
}

#[derive(Clone)]
enum Flow {
    AuthorizationCode {
        redirect_uri: String,
        client_id: Option<String>,
        client_secret: Option<HeaderValue>,
        authorize: Arc<dyn Fn(String) -> AuthorizeFuture + Send + Sync>,
    },
    ClientCredentials {
        client_id: String,
        client_secret: HeaderValue,
    },
}

impl std::fmt::Debug for McpOAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let flow = match &self.flow {
            Flow::AuthorizationCode { redirect_uri, client_id, .. } => {
                format!("authorization_code(redirect_uri: {redirect_uri}, client_id: {client_id:?})")
            }
            Flow::ClientCredentials { client_id, .. } => format!("client_credentials(client_id: {client_id})"),
        };
        f.debug_struct("McpOAuth").field("flow", &flow).field("scopes", &self.scopes).finish_non_exhaustive()
    }
}

impl McpOAuth {
    fn new(flow: Flow) -> Self {
        Self { flow, scopes: Vec::new(), client_name: "loopstack".into(), credentials: InMemoryCredentialStore::new() }
    }

    /// The authorization code flow with PKCE, on behalf of a person: `authorize` is
    /// given the authorization URL to show them and returns the URL the authorization
    /// server redirected them to (`redirect_uri` with `code` and `state`), or why
    /// not. The client registers itself dynamically unless
    /// [`client_id`](Self::client_id) names a pre-registered one.
    pub fn authorization_code<F, Fut>(redirect_uri: impl Into<String>, authorize: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, String>> + Send + 'static,
    {
        Self::new(Flow::AuthorizationCode {
            redirect_uri: redirect_uri.into(),
            client_id: None,
            client_secret: None,
            authorize: Arc::new(move |url| Box::pin(authorize(url))),
        })
    }

    /// The client credentials grant, for a service acting as itself, with `secret`.
    pub fn client_credentials(client_id: impl Into<String>, secret: impl Into<String>) -> Self {
        Self::new(Flow::ClientCredentials {
            client_id: client_id.into(),
            client_secret: HeaderValue::Plain(secret.into()),
        })
    }

    /// The client credentials grant, the secret read from the environment variable
    /// `var` when connecting.
    pub fn client_credentials_from_env(client_id: impl Into<String>, var: impl Into<String>) -> Self {
        Self::new(Flow::ClientCredentials { client_id: client_id.into(), client_secret: HeaderValue::Env(var.into()) })
    }

    /// The scopes to ask for; by default those the server's challenge or metadata
    /// name.
    #[must_use]
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// The client's name in its dynamic registration (default `loopstack`).
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// A client registered with the authorization server beforehand (no dynamic
    /// registration), for the authorization code flow; ignored for client credentials.
    #[must_use]
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        if let Flow::AuthorizationCode { client_id, .. } = &mut self.flow {
            *client_id = Some(id.into());
        }
        self
    }

    /// The pre-registered client's secret (with [`client_id`](Self::client_id)).
    #[must_use]
    pub fn client_secret(mut self, secret: impl Into<String>) -> Self {
        if let Flow::AuthorizationCode { client_secret, .. } = &mut self.flow {
            *client_secret = Some(HeaderValue::Plain(secret.into()));
        }
        self
    }

    /// An authorization manager holding a token for the server at `url`: the one
    /// got before, or a new one.
    pub(super) async fn authorize(
        &self,
        server: &str,
        url: &str,
        read: impl Fn(&HeaderValue) -> Result<String, McpError>,
        secrets: Option<&loopstack_core::secrets::Secrets>,
    ) -> Result<AuthorizationManager, McpError> {
        let failed = |e: AuthError| McpError::Auth { server: server.to_owned(), message: e.to_string() };
        let store = Registered { inner: self.credentials.clone(), secrets: secrets.cloned() };
        let oauth_http = OAuthHttp::new().map_err(|message| McpError::Auth { server: server.to_owned(), message })?;
        let stored = self.credentials.load().await.map_err(failed)?.is_some();
        // What the server says when asked without a token (where its metadata is, the
        // scope it wants), for a new authorization by a person; client credentials
        // discover the metadata themselves.
        let challenge = match &self.flow {
            Flow::AuthorizationCode { .. } if !stored => oauth_http.challenge(url).await,
            _ => None,
        };
        let http: Arc<dyn OAuthHttpClient> = Arc::new(oauth_http);
        let mut manager = AuthorizationManager::new_with_oauth_http_client(url, http).await.map_err(failed)?;
        // Tokens are saved (and registered as secrets) by the manager as it gets them.
        manager.set_credential_store(store);
        if stored {
            // Got before (an earlier connection): refreshed by the manager when due.
            if manager.initialize_from_store().await.map_err(failed)? {
                return Ok(manager);
            }
            return Err(McpError::Auth {
                server: server.to_owned(),
                message: "the stored credentials do not read back".into(),
            });
        }
        let mut state = OAuthState::Unauthorized(manager);
        match &self.flow {
            Flow::ClientCredentials { client_id, client_secret } => {
                let secret = read(client_secret)?;
                let config = ClientCredentialsConfig::ClientSecret {
                    client_id: client_id.clone(),
                    client_secret: secret,
                    scopes: self.scopes.clone(),
                    resource: Some(url.to_owned()),
                };
                state.authenticate_client_credentials(config).await.map_err(failed)?;
            }
            Flow::AuthorizationCode { redirect_uri, client_id, client_secret, authorize } => {
                let mut request = AuthorizationRequest::new(redirect_uri.as_str()).with_client_name(&self.client_name);
                if let Some(challenge) = &challenge {
                    request = request.with_challenge(challenge.as_str());
                }
                request = if self.scopes.is_empty() {
                    request.with_initial_scope_selection()
                } else {
                    request.with_scopes(self.scopes.iter().map(String::as_str))
                };
                if let Some(id) = client_id {
                    request = request.with_preregistered_client(id.as_str());
                }
                if let Some(secret) = client_secret {
                    request = request.with_client_secret(read(secret)?);
                }
                state.start_authorization(request).await.map_err(failed)?;
                let authorization_url = state.get_authorization_url().await.map_err(failed)?;
                let callback = authorize(authorization_url)
                    .await
                    .map_err(|why| McpError::Auth { server: server.to_owned(), message: why })?;
                state.handle_callback_url(&callback).await.map_err(failed)?;
            }
        }
        state.into_authorization_manager().ok_or_else(|| McpError::Auth {
            server: server.to_owned(),
            message: "the authorization did not complete".into(),
        })
    }
}

/// The credential store: the OAuth's own, registering each token with the runtime's
/// secrets as it is saved.
struct Registered {
    inner: InMemoryCredentialStore,
    secrets: Option<loopstack_core::secrets::Secrets>,
}

impl Registered {
    fn register(&self, credentials: &StoredCredentials) {
        let Some(secrets) = &self.secrets else { return };
        // Read through serde: the token types are oauth2's.
        let Ok(value) = serde_json::to_value(&credentials.token_response) else { return };
        for field in ["access_token", "refresh_token"] {
            if let Some(token) = value[field].as_str() {
                secrets.register(token);
            }
        }
    }
}

#[async_trait::async_trait]
impl CredentialStore for Registered {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.inner.load().await
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.register(&credentials);
        self.inner.save(credentials).await
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.inner.clear().await
    }
}

/// How long one OAuth request may take.
const OAUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// The most an OAuth response's body may hold.
const MAX_OAUTH_BODY: usize = 1 << 20;

/// The HTTP client of the OAuth requests: ours (the TLS every loopstack client
/// speaks), where rmcp's own would build reqwest's default TLS. Written by hand
/// because rmcp keeps its reqwest adapter private.
struct OAuthHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
}

impl OAuthHttp {
    fn new() -> Result<Self, String> {
        let build = |redirects: reqwest::redirect::Policy| {
            loopstack_model::http::client_builder()
                .timeout(OAUTH_TIMEOUT)
                .redirect(redirects)
                .build()
                .map_err(|e| format!("no HTTP client: {e}"))
        };
        Ok(Self {
            follow: build(reqwest::redirect::Policy::limited(5))?,
            stop: build(reqwest::redirect::Policy::none())?,
        })
    }
}

impl OAuthHttp {
    /// The `WWW-Authenticate` header of the server's `401` to a request without a
    /// token (a JSON-RPC ping), if it answers so.
    async fn challenge(&self, url: &str) -> Option<String> {
        let ping = r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#;
        let response = self
            .stop
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .body(ping)
            .send()
            .await
            .ok()?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            return None;
        }
        response.headers().get(reqwest::header::WWW_AUTHENTICATE)?.to_str().ok().map(str::to_owned)
    }
}

impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let timeout = request.timeout.unwrap_or(OAUTH_TIMEOUT).min(OAUTH_TIMEOUT);
            let (parts, body) = request.request.into_parts();
            refuse_metadata_hosts(&parts.uri)?;
            let mut response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .timeout(timeout)
                .send()
                .await?;
            let mut answer = http::Response::builder().status(response.status());
            for (name, value) in response.headers() {
                answer = answer.header(name, value);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_OAUTH_BODY {
                    return Err(format!("the OAuth response is larger than {MAX_OAUTH_BODY} bytes").into());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(answer.body(body)?)
        })
    }
}

/// Refuses the cloud instance-metadata endpoints (link-local addresses, their
/// names): a hostile server's metadata must not make the client fetch the host's
/// credentials.
fn refuse_metadata_hosts(uri: &http::Uri) -> Result<(), String> {
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let link_local = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_link_local(),
        Ok(std::net::IpAddr::V6(ip)) => (ip.segments()[0] & 0xffc0) == 0xfe80,
        Err(_) => matches!(host, "metadata" | "metadata.google.internal" | "metadata.azure.internal"),
    };
    if link_local {
        return Err(format!("an OAuth request to `{host}` is refused: an instance-metadata address"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_metadata_addresses_are_refused() {
        for refused in ["http://169.254.169.254/latest", "http://[fe80::1]/x", "http://metadata.google.internal/x"] {
            assert!(refuse_metadata_hosts(&refused.parse().unwrap()).is_err(), "{refused}");
        }
        for allowed in ["https://auth.example.com/token", "http://127.0.0.1:8080/token", "http://localhost/x"] {
            assert!(refuse_metadata_hosts(&allowed.parse().unwrap()).is_ok(), "{allowed}");
        }
    }
}

#[cfg(test)]
mod store_tests {
    use super::*;

    #[tokio::test]
    async fn tokens_are_registered_as_secrets_as_they_are_saved() {
        let secrets = loopstack_core::secrets::Secrets::new();
        let store = Registered { inner: InMemoryCredentialStore::new(), secrets: Some(secrets.clone()) };
        let credentials: StoredCredentials = serde_json::from_value(serde_json::json!({
            "client_id": "c1",
            "token_response": {"access_token": "at-123456789", "token_type": "bearer", "refresh_token": "rt-987654321"},
        }))
        .unwrap();
        store.save(credentials).await.unwrap();
        assert_eq!(secrets.redact("Bearer at-123456789, then rt-987654321"), "Bearer [redacted], then [redacted]");
        assert_eq!(store.load().await.unwrap().unwrap().client_id, "c1");
    }
}
