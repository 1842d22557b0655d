//! Where the AWS credentials of a signed Bedrock request come from: the default
//! credential chain of the AWS SDKs, written here on the `reqwest` client the crate
//! already has.
//!
//! Why not `aws-config`: with its minimal features (`rustls`, `rt-tokio`) it adds 22
//! crates to the build (among them `aws-sdk-sts`, a second HTTP client stack and
//! `aws-lc-sys`, a C library compiled by a build script) for the four sources a
//! Bedrock call needs, each a few dozen lines: environment variables, the shared
//! profile files, the container endpoint and the EC2 instance metadata service.
//!
//! The sources, in the SDKs' order (the first that has credentials wins):
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
//! 2. the profile `AWS_PROFILE` (else `default`) of the shared credentials file
//!    (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`) and config file
//!    (`AWS_CONFIG_FILE`, else `~/.aws/config`, where it is `[profile name]`): its
//!    `aws_access_key_id`, `aws_secret_access_key` and `aws_session_token`, the
//!    credentials file's winning over the config file's;
//! 3. the container credentials endpoint (ECS, EKS Pod Identity):
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` on `http://169.254.170.2`, else
//!    `AWS_CONTAINER_CREDENTIALS_FULL_URI` (https, or http to a loopback or the ECS/EKS
//!    addresses), with the `Authorization` header from
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` or `AWS_CONTAINER_AUTHORIZATION_TOKEN`;
//! 4. the EC2 instance metadata service, IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`,
//!    else `http://169.254.169.254`; off when `AWS_EC2_METADATA_DISABLED` is `true`):
//!    a session token (`PUT /latest/api/token`), the instance role's name, then its
//!    credentials.
//!
//! A named profile that does not exist, or one that gets its credentials in a way this
//! chain does not follow (`credential_process`, `role_arn`, `sso_*`,
//! `web_identity_token_file`), stops the chain with an error saying so, rather than
//! falling through to another identity.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use reqwest::header::AUTHORIZATION;
use serde::Deserialize;

use super::{Credentials, PROVIDER};
use crate::error::LlmError;
use crate::http::non_empty;

/// Credentials are refreshed this long before they expire.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);
/// The bound on each request to the instance metadata service (the SDKs wait about
/// one second: off EC2 nothing answers).
pub const IMDS_TIMEOUT: Duration = Duration::from_secs(1);
/// The bound on the request to the container credentials endpoint.
pub const CONTAINER_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest profile file, credentials answer or token file read.
const MAX_BYTES: usize = 1 << 20;

const ECS_HOST: &str = "http://169.254.170.2";
const IMDS_ENDPOINT: &str = "http://169.254.169.254";
const IMDS_ENDPOINT_V6: &str = "http://[fd00:ec2::254]";
const IMDS_TOKEN_TTL: &str = "21600";

fn config(message: impl Into<String>) -> LlmError {
    LlmError::Config { provider: PROVIDER, message: message.into() }
}

/// A source of AWS credentials, asked again when the ones it gave come near their
/// [`Credentials::expiry`]. The model caches what it returns.
pub trait CredentialsProvider: Send + Sync + fmt::Debug {
    /// Fetches credentials.
    ///
    /// # Errors
    /// [`LlmError::Config`] (or another [`LlmError`]) when there are none.
    fn provide(&self) -> BoxFuture<'_, Result<Credentials, LlmError>>;
}

/// The default credential chain of the AWS SDKs (see the [module docs](self)),
/// configured from environment variables when built; each resolution tries the
/// sources in order.
#[derive(Clone)]
pub struct DefaultCredentialsChain {
    env: Option<Credentials>,
    profile: ProfileFiles,
    container: Option<Result<Container, String>>,
    imds: Option<String>,
    client: Result<reqwest::Client, Arc<str>>,
}

impl fmt::Debug for DefaultCredentialsChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DefaultCredentialsChain")
            .field("env", &self.env)
            .field("profile", &self.profile.name)
            .field("container", &self.container.as_ref().map(|c| c.as_ref().map(|c| &c.url)))
            .field("imds", &self.imds)
            .finish()
    }
}

impl DefaultCredentialsChain {
    /// The chain configured from the process environment.
    ///
    /// # Errors
    /// [`LlmError::Config`] when `AWS_ACCESS_KEY_ID` or `AWS_SECRET_ACCESS_KEY` is set
    /// without the other.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// The chain configured from `vars` (a variable's value, or `None`) in place of the
    /// process environment: `HOME` (or `USERPROFILE`) too is read from it.
    ///
    /// # Errors
    /// As [`DefaultCredentialsChain::from_env`].
    pub fn from_vars(vars: impl Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let lookup: &dyn Fn(&str) -> Option<String> = &vars;
        let env = match (non_empty(lookup, "AWS_ACCESS_KEY_ID"), non_empty(lookup, "AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) => {
                let mut credentials = Credentials::new(id, secret);
                credentials.session_token = non_empty(lookup, "AWS_SESSION_TOKEN");
                Some(credentials)
            }
            (None, None) => None,
            (Some(_), None) => return Err(config("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not")),
            (None, Some(_)) => return Err(config("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not")),
        };
        let container = container(lookup);
        let imds = if non_empty(lookup, "AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            None
        } else if let Some(endpoint) = non_empty(lookup, "AWS_EC2_METADATA_SERVICE_ENDPOINT") {
            Some(endpoint.trim_end_matches('/').to_owned())
        } else if non_empty(lookup, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE")
            .is_some_and(|m| m.eq_ignore_ascii_case("ipv6"))
        {
            Some(IMDS_ENDPOINT_V6.to_owned())
        } else {
            Some(IMDS_ENDPOINT.to_owned())
        };
        // No proxy (the metadata addresses are link-local) and no redirects.
        let client = crate::http::client_builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Arc::from(format!("cannot build the HTTP client: {e}")));
        Ok(Self { env, profile: ProfileFiles::from_vars(lookup), container, imds, client })
    }

    /// The region of the selected profile (`region` in its config file section), if
    /// the files name one.
    ///
    /// # Errors
    /// [`LlmError::Config`] when a file cannot be read or `AWS_PROFILE` names a profile
    /// neither file has.
    pub fn profile_region(&self) -> Result<Option<String>, LlmError> {
        Ok(self.profile.load()?.and_then(|p| p.get("region").map(str::to_owned)))
    }

    async fn resolve(&self) -> Result<Credentials, LlmError> {
        let mut tried = Vec::new();
        match &self.env {
            Some(credentials) => return Ok(credentials.clone()),
            None => tried.push("environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set".to_owned()),
        }
        match self.profile.credentials()? {
            Some(credentials) => return Ok(credentials),
            None => tried.push(format!("profile `{}`: {}", self.profile.name, self.profile.describe())),
        }
        let client = self.client.as_ref().map_err(|e| config(e.to_string()))?;
        match &self.container {
            None => tried.push(
                "container endpoint: neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor \
                 AWS_CONTAINER_CREDENTIALS_FULL_URI is set"
                    .to_owned(),
            ),
            // The container was configured: its failure is the answer.
            Some(Err(e)) => return Err(config(format!("container credentials endpoint: {e}"))),
            Some(Ok(container)) => {
                return container
                    .fetch(client)
                    .await
                    .map_err(|e| config(format!("container credentials endpoint {}: {e}", container.url)));
            }
        }
        match &self.imds {
            None => tried.push("instance metadata: AWS_EC2_METADATA_DISABLED is true".to_owned()),
            Some(endpoint) => match imds(client, endpoint).await {
                Ok(credentials) => return Ok(credentials),
                Err(e) => tried.push(format!("instance metadata at {endpoint}: {e}")),
            },
        }
        Err(config(format!(
            "no AWS credentials found (or set a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK); tried {}",
            tried.join("; ")
        )))
    }
}

impl CredentialsProvider for DefaultCredentialsChain {
    fn provide(&self) -> BoxFuture<'_, Result<Credentials, LlmError>> {
        Box::pin(self.resolve())
    }
}

/// The same credentials every time (the model's given [`Credentials`]).
#[derive(Debug)]
pub(crate) struct Static(pub(crate) Credentials);

impl CredentialsProvider for Static {
    fn provide(&self) -> BoxFuture<'_, Result<Credentials, LlmError>> {
        let credentials = self.0.clone();
        Box::pin(async move { Ok(credentials) })
    }
}

// ---------------------------------------------------------------------------------
// The cache.

/// A provider's credentials, kept until [`REFRESH_BEFORE_EXPIRY`] before they expire.
/// Refreshes are single-flight; signing reads the current value without waiting.
pub(crate) struct Cache {
    provider: Arc<dyn CredentialsProvider>,
    current: Mutex<Option<Credentials>>,
    refreshing: tokio::sync::Mutex<()>,
    now: fn() -> SystemTime,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.current.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(credentials) => credentials.fmt(f),
            None => self.provider.fmt(f),
        }
    }
}

impl Cache {
    pub(crate) fn new(provider: Arc<dyn CredentialsProvider>) -> Self {
        Self { provider, current: Mutex::new(None), refreshing: tokio::sync::Mutex::new(()), now: SystemTime::now }
    }

    /// A cache already holding `credentials`, which never expire.
    pub(crate) fn fixed(credentials: Credentials) -> Self {
        let cache = Self::new(Arc::new(Static(credentials.clone())));
        *cache.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(credentials);
        cache
    }

    fn current(&self) -> Option<Credentials> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn fresh(&self) -> bool {
        self.current().is_some_and(|c| match c.expiry {
            None => true,
            Some(expiry) => expiry.checked_sub(REFRESH_BEFORE_EXPIRY).is_some_and(|at| (self.now)() < at),
        })
    }

    /// Fetches new credentials unless the cached ones are fresh. A failed refresh
    /// keeps credentials that have not expired yet (and is logged).
    pub(crate) async fn refresh(&self) -> Result<(), LlmError> {
        if self.fresh() {
            return Ok(());
        }
        let _one_at_a_time = self.refreshing.lock().await;
        if self.fresh() {
            return Ok(());
        }
        match self.provider.provide().await {
            Ok(credentials) => {
                *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(credentials);
                Ok(())
            }
            Err(error) if self.signing().is_ok() => {
                tracing::warn!(provider = PROVIDER, %error, "cannot refresh the AWS credentials; using the current ones until they expire");
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// The credentials to sign with now.
    pub(crate) fn signing(&self) -> Result<Credentials, LlmError> {
        let Some(credentials) = self.current() else {
            return Err(config("no AWS credentials resolved yet"));
        };
        match credentials.expiry {
            Some(expiry) if (self.now)() >= expiry => Err(config(format!(
                "the AWS credentials (access key {}) expired {} s after the epoch and could not be refreshed",
                credentials.access_key_id,
                expiry.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
            ))),
            _ => Ok(credentials),
        }
    }
}

// ---------------------------------------------------------------------------------
// The profile files.

#[derive(Clone, Debug)]
struct ProfileFiles {
    name: String,
    /// Whether `AWS_PROFILE` chose the profile (a missing one is then an error).
    named: bool,
    credentials: Option<PathBuf>,
    config: Option<PathBuf>,
}

/// A profile's settings, the credentials file's first.
struct Profile(Vec<(String, String)>);

impl Profile {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }
}

impl ProfileFiles {
    fn from_vars(lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let home = non_empty(lookup, "HOME").or_else(|| non_empty(lookup, "USERPROFILE"));
        let path = |var: &str, default: &str| match non_empty(lookup, var) {
            Some(path) => match (path.strip_prefix("~/").or_else(|| path.strip_prefix("~\\")), &home) {
                (Some(rest), Some(home)) => Some(PathBuf::from(home).join(rest)),
                _ => Some(PathBuf::from(path)),
            },
            None => home.as_ref().map(|home| PathBuf::from(home).join(".aws").join(default)),
        };
        let name = non_empty(lookup, "AWS_PROFILE");
        Self {
            named: name.is_some(),
            name: name.unwrap_or_else(|| "default".to_owned()),
            credentials: path("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
            config: path("AWS_CONFIG_FILE", "config"),
        }
    }

    fn describe(&self) -> String {
        let files: Vec<String> =
            [&self.credentials, &self.config].into_iter().flatten().map(|p| p.display().to_string()).collect();
        format!("no aws_access_key_id and aws_secret_access_key in {}", files.join(" or "))
    }

    /// The profile, `None` when neither file has it (and it was not asked for by name).
    fn load(&self) -> Result<Option<Profile>, LlmError> {
        let mut settings = Vec::new();
        let mut found = false;
        for (path, config_file) in [(&self.credentials, false), (&self.config, true)] {
            let Some(path) = path else { continue };
            let text = match std::fs::metadata(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Ok(meta) if meta.len() > MAX_BYTES as u64 => {
                    return Err(config(format!("{} is larger than 1 MiB", path.display())));
                }
                _ => {
                    std::fs::read_to_string(path).map_err(|e| config(format!("cannot read {}: {e}", path.display())))?
                }
            };
            if let Some(section) = parse_section(&text, &self.name, config_file) {
                found = true;
                settings.extend(section);
            }
        }
        if !found && self.named {
            let files: Vec<String> =
                [&self.credentials, &self.config].into_iter().flatten().map(|p| p.display().to_string()).collect();
            return Err(config(format!("the profile `{}` (AWS_PROFILE) is not in {}", self.name, files.join(" or "))));
        }
        Ok(found.then_some(Profile(settings)))
    }

    fn credentials(&self) -> Result<Option<Credentials>, LlmError> {
        let Some(profile) = self.load()? else { return Ok(None) };
        if let (Some(id), Some(secret)) = (profile.get("aws_access_key_id"), profile.get("aws_secret_access_key")) {
            let mut credentials = Credentials::new(id, secret);
            credentials.session_token = profile.get("aws_session_token").map(str::to_owned);
            return Ok(Some(credentials));
        }
        let unsupported = ["credential_process", "role_arn", "sso_session", "sso_start_url", "web_identity_token_file"];
        if let Some(key) = unsupported.iter().find(|k| profile.get(k).is_some()) {
            return Err(config(format!(
                "the profile `{}` gets its credentials through `{key}`, which this provider does not follow: \
                 resolve them with the AWS CLI or SDK (e.g. `aws configure export-credentials`) and pass them \
                 as environment variables or `Credentials`",
                self.name
            )));
        }
        Ok(None)
    }
}

/// The settings of profile `name` in an INI profile file: `[name]` in the
/// credentials file, `[profile name]` (or `[default]`) in the config file. Comments
/// start with `#` or `;` (inline after whitespace); indented lines under a key with
/// no value are its sub-settings, skipped.
fn parse_section(text: &str, name: &str, config_file: bool) -> Option<Vec<(String, String)>> {
    let mut found = None;
    let mut inside = false;
    for line in text.lines() {
        let indented = line.starts_with([' ', '\t']);
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.split(']').next().unwrap_or_default().trim();
            let section = if config_file {
                match header.strip_prefix("profile") {
                    Some(rest) if rest.starts_with([' ', '\t']) => Some(rest.trim()),
                    _ if header == "default" => Some("default"),
                    _ => None,
                }
            } else {
                Some(header)
            };
            inside = section == Some(name);
            if inside {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if !inside || indented {
            continue;
        }
        if let (Some((key, value)), Some(settings)) = (line.split_once('='), found.as_mut()) {
            let value = strip_comment(value.trim());
            settings.push((key.trim().to_ascii_lowercase(), value.to_owned()));
        }
    }
    found
}

fn strip_comment(value: &str) -> &str {
    let cut = value.char_indices().find(|&(i, c)| matches!(c, '#' | ';') && value[..i].ends_with([' ', '\t']));
    cut.map_or(value, |(i, _)| value[..i].trim_end())
}

// ---------------------------------------------------------------------------------
// The container endpoint and the instance metadata service.

#[derive(Clone, Debug)]
struct Container {
    url: String,
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (read on each fetch: it rotates), else
    /// the token itself.
    token_file: Option<PathBuf>,
    token: Option<String>,
}

fn container(lookup: &dyn Fn(&str) -> Option<String>) -> Option<Result<Container, String>> {
    let url = if let Some(relative) = non_empty(lookup, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        format!("{ECS_HOST}{relative}")
    } else {
        let full = non_empty(lookup, "AWS_CONTAINER_CREDENTIALS_FULL_URI")?;
        if let Err(e) = check_full_uri(&full) {
            return Some(Err(e));
        }
        full
    };
    Some(Ok(Container {
        url,
        token_file: non_empty(lookup, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").map(PathBuf::from),
        token: non_empty(lookup, "AWS_CONTAINER_AUTHORIZATION_TOKEN"),
    }))
}

/// As the SDKs allow: https anywhere, http only to a loopback address or the ECS and
/// EKS Pod Identity agents.
fn check_full_uri(full: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(full).map_err(|e| format!("AWS_CONTAINER_CREDENTIALS_FULL_URI `{full}`: {e}"))?;
    let host = url.host_str().unwrap_or_default();
    let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().ok();
    let allowed = match (url.scheme(), ip) {
        ("https", _) => !host.is_empty(),
        ("http", None) => host.eq_ignore_ascii_case("localhost"),
        ("http", Some(std::net::IpAddr::V4(ip))) => {
            ip.is_loopback() || ip.octets() == [169, 254, 170, 2] || ip.octets() == [169, 254, 170, 23]
        }
        ("http", Some(std::net::IpAddr::V6(ip))) => {
            ip.is_loopback() || ip.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23]
        }
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI `{full}` must be https, or http to a loopback address, \
             169.254.170.2, 169.254.170.23 or [fd00:ec2::23]"
        ))
    }
}

impl Container {
    async fn fetch(&self, client: &reqwest::Client) -> Result<Credentials, String> {
        let token = match &self.token_file {
            Some(path) => Some(
                read_small(path)
                    .map_err(|e| format!("cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {}: {e}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
            None => self.token.clone(),
        };
        let mut request = client.get(&self.url);
        if let Some(token) = token {
            let mut value = reqwest::header::HeaderValue::from_str(&token)
                .map_err(|_| "the authorization token is not a valid header value".to_owned())?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        let body = bounded(request, CONTAINER_TIMEOUT).await?;
        parse_credentials(&body)
    }
}

fn read_small(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?.take(MAX_BYTES as u64).read_to_string(&mut text)?;
    Ok(text)
}

/// Sends `request` and reads its successful body, all within `timeout`.
async fn bounded(request: reqwest::RequestBuilder, timeout: Duration) -> Result<Vec<u8>, String> {
    let exchange = async {
        let response = request.send().await.map_err(|e| format!("cannot connect: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("cannot read the answer: {e}"))? {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err("the answer is larger than 1 MiB".to_owned());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", timeout.as_millis())))
}

/// The credentials JSON of the container endpoint and the metadata service.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Answer {
    code: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    token: Option<String>,
    expiration: Option<String>,
}

fn parse_credentials(body: &[u8]) -> Result<Credentials, String> {
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| format!("the answer is not the credentials JSON: {e}"))?;
    if let Some(code) = answer.code.filter(|c| c != "Success") {
        return Err(format!("the answer's Code is `{code}`"));
    }
    let (Some(id), Some(secret)) = (answer.access_key_id, answer.secret_access_key) else {
        return Err("the answer lacks AccessKeyId or SecretAccessKey".to_owned());
    };
    let mut credentials = Credentials::new(id, secret);
    credentials.session_token = answer.token;
    if let Some(expiration) = answer.expiration {
        credentials.expiry =
            Some(parse_rfc3339(&expiration).ok_or_else(|| format!("the Expiration `{expiration}` is not RFC 3339"))?);
    }
    Ok(credentials)
}

/// IMDSv2: a session token, the role's name, its credentials; each request bounded
/// by [`IMDS_TIMEOUT`].
async fn imds(client: &reqwest::Client, endpoint: &str) -> Result<Credentials, String> {
    let token = bounded(
        client
            .put(format!("{endpoint}/latest/api/token"))
            .header("x-aws-ec2-metadata-token-ttl-seconds", IMDS_TOKEN_TTL),
        IMDS_TIMEOUT,
    )
    .await
    .map_err(|e| format!("no session token (not on EC2?): {e}"))?;
    let token = String::from_utf8(token).map_err(|_| "the session token is not text".to_owned())?;
    let get = |path: String| {
        client
            .get(format!("{endpoint}/latest/meta-data/iam/security-credentials/{path}"))
            .header("x-aws-ec2-metadata-token", token.trim())
    };
    let roles = bounded(get(String::new()), IMDS_TIMEOUT).await.map_err(|e| format!("no instance role: {e}"))?;
    let roles = String::from_utf8_lossy(&roles);
    let role = roles.lines().map(str::trim).find(|r| !r.is_empty()).ok_or("the instance has no role")?;
    if !role.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b)) {
        return Err("the role name has characters a role name cannot have".to_owned());
    }
    let body = bounded(get(role.to_owned()), IMDS_TIMEOUT).await.map_err(|e| format!("role `{role}`: {e}"))?;
    parse_credentials(&body).map_err(|e| format!("role `{role}`: {e}"))
}

/// `2026-12-07T15:01:47Z` (fractional seconds and a `+hh:mm` offset allowed).
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (y, m, d, hh, mm, ss) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let (sign, hm) = match rest.as_bytes().first()? {
                b'+' => (1, &rest[1..]),
                b'-' => (-1, &rest[1..]),
                _ => return None,
            };
            let (h, m) = hm.split_once(':')?;
            if h.len() != 2 || m.len() != 2 {
                return None;
            }
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let seconds = (era * 146_097 + doe - 719_468) * 86_400 + hh * 3600 + mm * 60 + ss - offset;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        let at = |s| parse_rfc3339(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs());
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(at("2015-08-30T12:36:00Z"), Some(1_440_938_160));
        assert_eq!(at("2015-08-30T12:36:00.123Z"), Some(1_440_938_160));
        assert_eq!(at("2015-08-30T14:36:00+02:00"), Some(1_440_938_160));
        for bad in [
            "",
            "2015-08-30",
            "2015-13-30T12:36:00Z",
            "2015-08-30T12:36:00",
            "2015-08-30T12:36:00.Z",
            "+015-08-30T12:36:00Z",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }

    #[test]
    fn ini_sections_comments_and_sub_settings() {
        let text = "# comment\n[default]\naws_access_key_id = A ; inline\ns3 =\n  max = 1\n\
                    [profile dev]\nregion = eu-west-1\n[dev]\nx = 1\n[profile  spaced ]\nregion=us-east-2#not a comment\n";
        let section = parse_section(text, "default", false).unwrap();
        assert_eq!(section, vec![("aws_access_key_id".into(), "A".into()), ("s3".into(), String::new())]);
        assert_eq!(parse_section(text, "dev", true).unwrap(), vec![("region".into(), "eu-west-1".into())]);
        assert_eq!(parse_section(text, "dev", false).unwrap(), vec![("x".into(), "1".into())]);
        assert_eq!(
            parse_section(text, "spaced", true).unwrap(),
            vec![("region".into(), "us-east-2#not a comment".into())]
        );
        assert!(parse_section(text, "missing", true).is_none());
        assert!(parse_section("[default]\n", "default", true).is_some());
    }

    #[test]
    fn full_uris_allowed_as_the_sdks_allow() {
        for ok in [
            "https://creds.example/x",
            "http://127.0.0.1:8080/c",
            "http://localhost/c",
            "http://169.254.170.23/v1/credentials",
            "http://[::1]/c",
            "http://[fd00:ec2::23]/c",
        ] {
            assert!(check_full_uri(ok).is_ok(), "{ok}");
        }
        for bad in ["http://example.com/c", "/credentials", "ftp://127.0.0.1/c", "http://10.0.0.1/c"] {
            assert!(check_full_uri(bad).is_err(), "{bad}");
        }
        let relative =
            container(&|n| (n == "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").then(|| "/v2/credentials/x".to_owned()));
        assert_eq!(relative.unwrap().unwrap().url, "http://169.254.170.2/v2/credentials/x");
    }

    #[test]
    fn credentials_answers() {
        let ok = parse_credentials(br#"{"Code":"Success","AccessKeyId":"A","SecretAccessKey":"S","Token":"T","Expiration":"2030-01-01T00:00:00Z"}"#).unwrap();
        assert_eq!(ok.access_key_id(), "A");
        assert_eq!(ok.session_token.as_deref(), Some("T"));
        assert!(ok.expiry().is_some());
        assert!(parse_credentials(br#"{"Code":"Failure"}"#).is_err());
        assert!(parse_credentials(br#"{"AccessKeyId":"A"}"#).is_err());
        assert!(parse_credentials(br#"{"AccessKeyId":"A","SecretAccessKey":"S","Expiration":"soon"}"#).is_err());
        assert!(parse_credentials(b"<html>").is_err());
    }
}
