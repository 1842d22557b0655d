//! The TLS every loopstack HTTP client speaks: rustls on the ring provider, trusting
//! the Mozilla roots that `webpki-roots` carries (the same on every machine: no system
//! store to differ between a laptop and a container image), offering HTTP/2 and
//! HTTP/1.1 by ALPN.
//!
//! One config, made once and handed to each client as it is built. It is made here
//! rather than left to reqwest's features because reqwest 0.13 dropped its ring
//! flavour of rustls: with the config given, the choice of provider is ours, and a
//! client built anywhere else fails the workspace's lints (`clippy.toml`).

use std::sync::{Arc, OnceLock};

/// The builder every loopstack HTTP client starts from (model providers, the MCP
/// client, the OTLP exporter, Bedrock's credential endpoints): reqwest's, with the TLS
/// described in the module docs. Settings such as timeouts, redirects and headers
/// are the caller's.
///
/// ```
/// let client = loopstack_model::http::client_builder().build().expect("a client");
/// # drop(client);
/// ```
pub fn client_builder() -> reqwest::ClientBuilder {
    // The one place a client builder is made.
    #[allow(clippy::disallowed_methods)]
    let builder = reqwest::Client::builder();
    match config() {
        Some(tls) => builder.tls_backend_preconfigured(tls.clone()),
        // ring speaks TLS 1.2 and 1.3, so this does not happen; if it did, reqwest,
        // built without a provider of its own, would fail the client's build.
        None => builder,
    }
}

fn config() -> Option<&'static rustls::ClientConfig> {
    static CONFIG: OnceLock<Option<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
            let mut tls =
                rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .ok()?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
            // reqwest offers ALPN only on configs it makes itself.
            tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Some(tls)
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_offers_h2_then_http_1_1() {
        let tls = config().expect("a config");
        assert_eq!(tls.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    }

    /// A self-signed certificate for localhost (a leaf: not a CA), valid until 2126:
    /// no public root signed it, so a client that verifies against the webpki roots
    /// refuses it as of an unknown issuer.
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBvzCCAWWgAwIBAgIUNr942MkDQdsNekfTdqWMII/+Cc0wCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNzE4MzM0OVoYDzIxMjYxMTEz
MTgzMzQ5WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAART39Pgu4l3jd/x4X4ufvoUjmpO6wpvLV8AvRDV584/dID0/JTIzd0l
ylWQ3KkRTp5a2bwFRNx03VV0SYvkRRUoo4GSMIGPMB0GA1UdDgQWBBSkWsMYW7uT
wSQtvFPzPQoHEVt+WTAfBgNVHSMEGDAWgBSkWsMYW7uTwSQtvFPzPQoHEVt+WTAa
BgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwDAYDVR0TAQH/BAIwADAOBgNVHQ8B
Af8EBAMCB4AwEwYDVR0lBAwwCgYIKwYBBQUHAwEwCgYIKoZIzj0EAwIDSAAwRQIg
KqUlC772mYTquyD0W5KIrkdCNNnOdQa5zHi78jvh3vECIQDqqi11So/m20r0/TUy
x3K1z8c5ZInIqEpW0YjyStAJSg==
-----END CERTIFICATE-----";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg2JxyBFmF8sopHFAa
ZQur3X10Bsujn2lMMKcf/6jnk2+hRANCAART39Pgu4l3jd/x4X4ufvoUjmpO6wpv
LV8AvRDV584/dID0/JTIzd0lylWQ3KkRTp5a2bwFRNx03VV0SYvkRRUo
-----END PRIVATE KEY-----";

    #[tokio::test]
    async fn a_server_no_public_root_vouches_for_is_refused() {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let cert = CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(KEY.as_bytes()).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        let mut conn = rustls::ServerConnection::new(Arc::new(server)).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let (mut socket, _) = listener.accept().await.unwrap();
            // Drive the handshake by hand until the client gives up on it.
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    return conn.is_handshaking();
                }
                let mut read = &buf[..n];
                while !read.is_empty() {
                    if conn.read_tls(&mut read).is_err() || conn.process_new_packets().is_err() {
                        return conn.is_handshaking();
                    }
                }
                let mut out = Vec::new();
                while conn.wants_write() {
                    conn.write_tls(&mut out).unwrap();
                }
                if socket.write_all(&out).await.is_err() {
                    return conn.is_handshaking();
                }
            }
        });
        // Bounded: a client that let the certificate through would wait for an answer.
        let client = client_builder().timeout(std::time::Duration::from_secs(30)).build().unwrap();
        let error = client.get(format!("https://localhost:{port}/")).send().await.unwrap_err();
        let mut chain = String::new();
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&error);
        while let Some(e) = source {
            chain.push_str(&e.to_string());
            chain.push_str("; ");
            source = e.source();
        }
        assert!(error.is_connect(), "{error}: {chain}");
        assert!(chain.contains("UnknownIssuer"), "{chain}");
        assert!(accept.await.unwrap(), "the handshake never completed");
    }
}
