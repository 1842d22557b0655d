//! The Bedrock provider's credential chain: profile files in a temporary directory,
//! the container credentials endpoint and EC2's IMDSv2 imitated on a local server
//! (each checking the headers its published description requires), the cache's
//! refresh ahead of expiry, and requests signed with the chain's credentials, checked
//! by the Bedrock imitation's own SigV4 computation.
//!
//! No test reads the process environment or the developer's `~/.aws`: the chain is
//! built from explicit variables ([`DefaultCredentialsChain::from_vars`]), and the
//! one test of [`Bedrock::from_env`] runs this binary again in a child process with a
//! cleared environment.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use loopstack_model::bedrock::{Bedrock, Credentials, CredentialsProvider, DefaultCredentialsChain};
use loopstack_model::testing::imitation::bedrock_api::{
    ACCESS_KEY, Auth, REGION, SECRET_KEY, SESSION_TOKEN, check_auth, error_reply,
};
use loopstack_model::testing::{Reply, Request, Server};
use loopstack_model::{ChatModel, ChatRequest, LlmError, Message};
use serde_json::json;

const MODEL: &str = "amazon.nova-pro-v1:0";

/// A fresh directory under the system's temporary one.
fn temp_dir(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "loopstack-bedrock-credentials-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A variable lookup over these pairs only.
fn vars(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
}

fn rfc3339(at: SystemTime) -> String {
    let secs = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// The credentials JSON the container endpoint and IMDS answer with.
fn credentials_json(expiration: SystemTime) -> serde_json::Value {
    json!({
        "Code": "Success",
        "LastUpdated": rfc3339(SystemTime::now()),
        "Type": "AWS-HMAC",
        "AccessKeyId": ACCESS_KEY,
        "SecretAccessKey": SECRET_KEY,
        "Token": SESSION_TOKEN,
        "Expiration": rfc3339(expiration),
    })
}

/// Bedrock's `Converse`, checking the SigV4 signature as Bedrock does.
async fn bedrock() -> Server {
    Server::handle(|req: &Request| {
        if req.method != "POST" || !req.path.ends_with("/converse") {
            return error_reply(404, "UnknownOperationException", "no such operation");
        }
        let token = req.header("x-amz-security-token").is_some();
        if let Err(e) = check_auth(Auth::SigV4 { token }, req) {
            return error_reply(403, "UnrecognizedClientException", &e);
        }
        Reply::json(
            200,
            json!({
                "output": {"message": {"role": "assistant", "content": [{"text": "signed"}]}},
                "stopReason": "end_turn",
                "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4},
                "metrics": {"latencyMs": 5}
            }),
        )
    })
    .await
}

fn request() -> ChatRequest {
    ChatRequest::new(MODEL, vec![Message::user("Hi")])
}

fn config_message(error: &LlmError) -> &str {
    match error {
        LlmError::Config { provider: "bedrock", message } => message,
        other => panic!("expected a Config error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------
// Profile files.

fn profile_files() -> (PathBuf, Vec<(&'static str, String)>) {
    let dir = temp_dir("profiles");
    std::fs::write(
        dir.join("credentials"),
        format!(
            "[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n\n\
             [dev]\naws_access_key_id=AKIDDEV\naws_secret_access_key=devsecret\naws_session_token=devtoken\n\
             [tool]\ncredential_process = /usr/bin/get-credentials\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("config"),
        "[default]\nregion = us-west-2\n# a comment\n[profile dev]\nregion = eu-central-1 ; inline comment\n\
         [profile keys-in-config]\naws_access_key_id = AKIDCFG\naws_secret_access_key = cfgsecret\n",
    )
    .unwrap();
    let pairs = vec![
        ("AWS_SHARED_CREDENTIALS_FILE", dir.join("credentials").display().to_string()),
        ("AWS_CONFIG_FILE", dir.join("config").display().to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ];
    (dir, pairs)
}

#[tokio::test]
async fn the_default_profile_gives_credentials_and_its_config_the_region() {
    let (_dir, pairs) = profile_files();
    let chain = DefaultCredentialsChain::from_vars(vars(pairs)).unwrap();
    assert_eq!(chain.profile_region().unwrap().as_deref(), Some(REGION));
    let credentials = chain.provide().await.unwrap();
    assert_eq!(credentials, Credentials::new(ACCESS_KEY, SECRET_KEY));
}

#[tokio::test]
async fn a_named_profile_is_read_from_both_files() {
    let (_dir, mut pairs) = profile_files();
    pairs.push(("AWS_PROFILE", "dev".to_owned()));
    let chain = DefaultCredentialsChain::from_vars(vars(pairs.clone())).unwrap();
    assert_eq!(chain.profile_region().unwrap().as_deref(), Some("eu-central-1"));
    assert_eq!(chain.provide().await.unwrap(), Credentials::new("AKIDDEV", "devsecret").session_token("devtoken"));

    pairs.push(("AWS_PROFILE", "keys-in-config".to_owned()));
    pairs.retain(|(k, v)| *k != "AWS_PROFILE" || v != "dev");
    let chain = DefaultCredentialsChain::from_vars(vars(pairs)).unwrap();
    assert_eq!(chain.provide().await.unwrap(), Credentials::new("AKIDCFG", "cfgsecret"));
}

#[tokio::test]
async fn a_missing_or_unfollowed_profile_is_an_error_naming_it() {
    let (_dir, mut pairs) = profile_files();
    pairs.push(("AWS_PROFILE", "nonesuch".to_owned()));
    let chain = DefaultCredentialsChain::from_vars(vars(pairs.clone())).unwrap();
    let error = chain.provide().await.unwrap_err();
    assert!(config_message(&error).contains("`nonesuch`"), "{error}");
    assert!(config_message(&chain.profile_region().unwrap_err()).contains("nonesuch"));

    pairs.retain(|(k, _)| *k != "AWS_PROFILE");
    pairs.push(("AWS_PROFILE", "tool".to_owned()));
    let error = DefaultCredentialsChain::from_vars(vars(pairs)).unwrap().provide().await.unwrap_err();
    assert!(config_message(&error).contains("credential_process"), "{error}");
}

#[tokio::test]
async fn the_environment_comes_before_the_profile_and_half_of_it_is_an_error() {
    let (_dir, mut pairs) = profile_files();
    pairs.push(("AWS_ACCESS_KEY_ID", "AKIDENV".to_owned()));
    let error = DefaultCredentialsChain::from_vars(vars(pairs.clone())).unwrap_err();
    assert!(config_message(&error).contains("AWS_SECRET_ACCESS_KEY"));
    pairs.push(("AWS_SECRET_ACCESS_KEY", "envsecret".to_owned()));
    let chain = DefaultCredentialsChain::from_vars(vars(pairs)).unwrap();
    assert_eq!(chain.provide().await.unwrap(), Credentials::new("AKIDENV", "envsecret"));
}

#[tokio::test]
async fn with_no_source_the_error_names_each_one_tried() {
    let dir = temp_dir("empty");
    let chain = DefaultCredentialsChain::from_vars(vars(vec![
        ("HOME", dir.display().to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ]))
    .unwrap();
    let error = chain.provide().await.unwrap_err();
    let message = config_message(&error);
    for source in ["environment", "profile `default`", ".aws", "container endpoint", "instance metadata"] {
        assert!(message.contains(source), "{source} in {message}");
    }
}

// ---------------------------------------------------------------------------------
// The container endpoint and IMDSv2.

#[tokio::test]
async fn the_container_endpoint_is_asked_with_the_token_from_its_file() {
    let expiration = SystemTime::now() + Duration::from_secs(3600);
    let endpoint = Server::handle(move |req: &Request| {
        if req.method != "GET" || req.path != "/v1/credentials" {
            return Reply::json(404, json!({"message": "not found"}));
        }
        if req.header("authorization") != Some("container-token") {
            return Reply::json(401, json!({"message": "bad token"}));
        }
        Reply::json(200, credentials_json(expiration))
    })
    .await;
    let dir = temp_dir("container");
    std::fs::write(dir.join("token"), "container-token\n").unwrap();
    let chain = DefaultCredentialsChain::from_vars(vars(vec![
        ("HOME", dir.display().to_string()),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{}/v1/credentials", endpoint.url())),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", dir.join("token").display().to_string()),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored-when-the-file-is-set".to_owned()),
    ]))
    .unwrap();
    let credentials = chain.provide().await.unwrap();
    assert_eq!(credentials.access_key_id(), ACCESS_KEY);
    let expiry = credentials.expiry().unwrap();
    let off = expiry.duration_since(expiration).unwrap_or_else(|e| e.duration());
    assert!(off < Duration::from_secs(1), "{off:?}");

    // And end to end: a Bedrock request signed with them.
    let bedrock_api = bedrock().await;
    let model = Bedrock::with_credentials_provider(REGION, chain).endpoint_url(bedrock_api.url());
    assert_eq!(model.chat(&request()).await.unwrap().message.text(), "signed");
    assert_eq!(bedrock_api.requests()[0].header("x-amz-security-token"), Some(SESSION_TOKEN));
    assert_eq!(endpoint.requests().len(), 2, "once by hand, once for the call");

    // A refused token is an error naming the endpoint and status, and no secret.
    let chain = DefaultCredentialsChain::from_vars(vars(vec![
        ("HOME", dir.display().to_string()),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{}/v1/credentials", endpoint.url())),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong-token".to_owned()),
    ]))
    .unwrap();
    let error = chain.provide().await.unwrap_err();
    assert!(config_message(&error).contains("HTTP 401") && !error.to_string().contains("wrong-token"), "{error}");

    // Plain http to a host other than loopback or the ECS/EKS agents is refused.
    let chain = DefaultCredentialsChain::from_vars(vars(vec![(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "http://example.com/creds".to_owned(),
    )]))
    .unwrap();
    assert!(config_message(&chain.provide().await.unwrap_err()).contains("must be https"));
}

/// EC2's instance metadata service, IMDSv2 only (a request without a session token
/// is refused with 401, as with `HttpTokens: required`).
async fn imds(role: &'static str, expiration: SystemTime) -> Server {
    Server::handle(move |req: &Request| {
        if req.path == "/latest/api/token" {
            return match (req.method.as_str(), req.header("x-aws-ec2-metadata-token-ttl-seconds")) {
                ("PUT", Some(ttl)) if ttl.parse::<u32>().is_ok_and(|t| (1..=21600).contains(&t)) => {
                    Reply::raw(200, "text/plain", "imds-session-token")
                }
                ("PUT", _) => Reply::raw(400, "text/plain", "missing or invalid ttl"),
                _ => Reply::raw(405, "text/plain", "method not allowed"),
            };
        }
        if req.method != "GET" {
            return Reply::raw(405, "text/plain", "method not allowed");
        }
        if req.header("x-aws-ec2-metadata-token") != Some("imds-session-token") {
            return Reply::raw(401, "text/plain", "unauthorized");
        }
        match req.path.strip_prefix("/latest/meta-data/iam/security-credentials/") {
            Some("") => Reply::raw(200, "text/plain", role),
            Some(name) if name == role => Reply::json(200, credentials_json(expiration)),
            _ => Reply::raw(404, "text/plain", "not found"),
        }
    })
    .await
}

#[tokio::test]
async fn imdsv2_gives_the_instance_roles_credentials() {
    let expiration = SystemTime::now() + Duration::from_secs(6 * 3600);
    let metadata = imds("bedrock-role", expiration).await;
    let dir = temp_dir("imds");
    let chain = DefaultCredentialsChain::from_vars(vars(vec![
        ("HOME", dir.display().to_string()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", format!("{}/", metadata.url())),
    ]))
    .unwrap();
    let bedrock_api = bedrock().await;
    let model = Bedrock::with_credentials_provider(REGION, chain).endpoint_url(bedrock_api.url());
    assert_eq!(model.chat(&request()).await.unwrap().message.text(), "signed");
    // Cached: a second call asks the metadata service nothing.
    model.chat(&request()).await.unwrap();
    let paths: Vec<(String, String)> = metadata.requests().into_iter().map(|r| (r.method, r.path)).collect();
    assert_eq!(
        paths,
        [
            ("PUT", "/latest/api/token"),
            ("GET", "/latest/meta-data/iam/security-credentials/"),
            ("GET", "/latest/meta-data/iam/security-credentials/bedrock-role"),
        ]
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
    );
    assert_eq!(bedrock_api.requests().len(), 2);
}

#[tokio::test]
async fn a_hanging_metadata_service_is_bounded_by_its_timeout() {
    let metadata = Server::start(vec![Reply::stall()]).await;
    let dir = temp_dir("hang");
    let chain = DefaultCredentialsChain::from_vars(vars(vec![
        ("HOME", dir.display().to_string()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", metadata.url()),
    ]))
    .unwrap();
    // The bound here only keeps a broken build from hanging the suite.
    let error = tokio::time::timeout(Duration::from_secs(30), chain.provide()).await.expect("bounded").unwrap_err();
    let message = config_message(&error);
    assert!(message.contains("instance metadata") && message.contains("no answer within 1000 ms"), "{message}");
}

// ---------------------------------------------------------------------------------
// The cache: refreshed ahead of expiry.

/// Gives the test credentials expiring `lifetime` after each fetch (negative: already
/// expired), or errors once the script says so; counts the fetches.
#[derive(Debug, Clone)]
struct Counting {
    fetches: Arc<AtomicUsize>,
    /// Per fetch: `Some(seconds from now)` or `None` for a failure.
    script: Arc<Mutex<Vec<Option<i64>>>>,
}

impl Counting {
    fn new(script: Vec<Option<i64>>) -> Self {
        Self { fetches: Arc::default(), script: Arc::new(Mutex::new(script)) }
    }
}

impl CredentialsProvider for Counting {
    fn provide(&self) -> BoxFuture<'_, Result<Credentials, LlmError>> {
        let n = self.fetches.fetch_add(1, Ordering::SeqCst);
        let step = self.script.lock().unwrap().get(n).copied().flatten();
        Box::pin(async move {
            let lifetime = step.ok_or(LlmError::Config { provider: "bedrock", message: "source down".into() })?;
            let now = SystemTime::now();
            let expiry = if lifetime >= 0 {
                now + Duration::from_secs(lifetime.unsigned_abs())
            } else {
                now - Duration::from_secs(lifetime.unsigned_abs())
            };
            Ok(Credentials::new(ACCESS_KEY, SECRET_KEY).session_token(SESSION_TOKEN).expires_at(expiry))
        })
    }
}

#[tokio::test]
async fn credentials_far_from_expiry_are_cached() {
    let provider = Counting::new(vec![Some(3600)]);
    let bedrock_api = bedrock().await;
    let model = Bedrock::with_credentials_provider(REGION, provider.clone()).endpoint_url(bedrock_api.url());
    for _ in 0..3 {
        model.chat(&request()).await.unwrap();
    }
    let streamed = request();
    let mut events = model.stream(&streamed);
    use futures::StreamExt as _;
    while let Some(event) = events.next().await {
        // The imitation answers only `Converse`: the stream fails after signing.
        assert!(matches!(event, Err(LlmError::InvalidRequest { .. } | LlmError::Server { .. }) | Ok(_)), "{event:?}");
    }
    assert_eq!(provider.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn credentials_within_five_minutes_of_expiry_are_fetched_again() {
    // 2 minutes left: inside the refresh window, so each call fetches anew; the
    // third fetch fails, and the still-valid credentials sign the call anyway.
    let provider = Counting::new(vec![Some(120), Some(120), None]);
    let bedrock_api = bedrock().await;
    let model = Bedrock::with_credentials_provider(REGION, provider.clone()).endpoint_url(bedrock_api.url());
    for _ in 0..3 {
        assert_eq!(model.chat(&request()).await.unwrap().message.text(), "signed");
    }
    assert_eq!(provider.fetches.load(Ordering::SeqCst), 3);
    assert_eq!(bedrock_api.requests().len(), 3);
}

#[tokio::test]
async fn expired_credentials_sign_nothing() {
    let provider = Counting::new(vec![Some(-1), None]);
    let bedrock_api = bedrock().await;
    let model = Bedrock::with_credentials_provider(REGION, provider.clone()).endpoint_url(bedrock_api.url());
    let error = model.chat(&request()).await.unwrap_err();
    assert!(config_message(&error).contains("expired"), "{error}");
    let error = model.chat(&request()).await.unwrap_err();
    assert!(config_message(&error).contains("source down"), "{error}");
    assert!(bedrock_api.requests().is_empty());
}

#[tokio::test]
async fn explicit_credentials_and_api_keys_still_work() {
    let bedrock_api = bedrock().await;
    let model = Bedrock::new(REGION, Credentials::new(ACCESS_KEY, SECRET_KEY)).endpoint_url(bedrock_api.url());
    assert_eq!(model.chat(&request()).await.unwrap().message.text(), "signed");
    assert_eq!(bedrock_api.requests()[0].header("x-amz-security-token"), None);
}

// ---------------------------------------------------------------------------------
// `Bedrock::from_env`, in a child process with a cleared environment.

#[tokio::test]
async fn from_env_uses_the_profile_in_a_clean_environment() {
    let (dir, pairs) = profile_files();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "from_env_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env("LOOPSTACK_BEDROCK_CREDENTIALS_CHILD", "1")
        .env("HOME", &dir)
        .envs(pairs)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("1 passed"), "{stdout}");
}

/// Run by [`from_env_uses_the_profile_in_a_clean_environment`] only.
#[tokio::test]
#[ignore = "run in a child process by from_env_uses_the_profile_in_a_clean_environment"]
async fn from_env_child() {
    assert!(std::env::var_os("LOOPSTACK_BEDROCK_CREDENTIALS_CHILD").is_some(), "run by the parent test only");
    let bedrock_api = bedrock().await;
    let model = Bedrock::from_env().unwrap().endpoint_url(bedrock_api.url());
    assert!(format!("{model:?}").contains(REGION));
    assert_eq!(model.chat(&request()).await.unwrap().message.text(), "signed");
}
