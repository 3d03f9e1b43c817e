//! A scratch OAuth 2.0 token endpoint (client-credentials grant) on a loopback port, for the
//! relay's `sasl.oauthbearer.method = "oidc"`: librdkafka asks it for a token with the
//! client id and secret (HTTP basic authentication), and hands the token to the broker.
//!
//! The tokens are unsecured JWTs (`{"alg":"none"}`, an empty signature), which is what a
//! broker's OAUTHBEARER listener accepts without a key set
//! ([`crate::kafka::KafkaBroker::oauth_bootstrap`]): enough to prove the relay fetched a token
//! from the endpoint and the broker took it, without signing keys in the harness.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::process::HarnessError;

/// A running token endpoint; it stops when dropped.
#[derive(Debug)]
pub struct TokenEndpoint {
    /// `http://127.0.0.1:PORT/token`.
    url: String,
    /// Tokens handed out (the request carried the right client credentials).
    issued: Arc<AtomicU64>,
    /// Requests refused (wrong or missing client credentials): 401.
    refused: Arc<AtomicU64>,
    /// The server task, aborted on drop.
    task: tokio::task::JoinHandle<()>,
}

impl TokenEndpoint {
    /// Starts the endpoint; it issues tokens for subject `subject` to the client that
    /// authenticates as `client_id` / `client_secret`, and refuses every other request.
    pub async fn start(
        client_id: &str,
        client_secret: &str,
        subject: &str,
    ) -> Result<TokenEndpoint, HarnessError> {
        let listener =
            TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|source| HarnessError::Io {
                    what: "binding the token endpoint".into(),
                    source,
                })?;
        let port = listener
            .local_addr()
            .map_err(|source| HarnessError::Io {
                what: "the token endpoint's address".into(),
                source,
            })?
            .port();
        let expected = format!(
            "basic {}",
            base64(format!("{client_id}:{client_secret}").as_bytes(), false)
        );
        let issued = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let subject = subject.to_owned();
        let task = {
            let (issued, refused) = (issued.clone(), refused.clone());
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    let (issued, refused) = (issued.clone(), refused.clone());
                    let expected = expected.clone();
                    let subject = subject.clone();
                    tokio::spawn(async move {
                        let Some(request) = read_request(&mut stream).await else {
                            return;
                        };
                        let authorized = request.lines().any(|line| {
                            line.to_ascii_lowercase()
                                .strip_prefix("authorization:")
                                .is_some_and(|value| value.trim() == expected.to_ascii_lowercase())
                        });
                        let (status, body) = if authorized {
                            issued.fetch_add(1, Ordering::SeqCst);
                            let token = unsecured_jwt(&subject);
                            (
                                "200 OK",
                                format!(
                                    r#"{{"access_token":"{token}","token_type":"bearer","expires_in":3600}}"#
                                ),
                            )
                        } else {
                            refused.fetch_add(1, Ordering::SeqCst);
                            (
                                "401 Unauthorized",
                                r#"{"error":"invalid_client"}"#.to_owned(),
                            )
                        };
                        let response = format!(
                            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = stream.write_all(response.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    });
                }
            })
        };
        Ok(TokenEndpoint {
            url: format!("http://127.0.0.1:{port}/token"),
            issued,
            refused,
            task,
        })
    }

    /// The endpoint's URL (`sasl.oauthbearer.token.endpoint.url`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::SeqCst)
    }

    /// Requests refused so far (wrong client credentials).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one HTTP request (head and a `Content-Length` body) as text; `None` when the
/// client went away or sent more than 64 KiB.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 || buffer.len() > 65_536 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&buffer);
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            if buffer.len() >= head_end + 4 + length {
                return Some(text.into_owned());
            }
        }
    }
}

/// An unsecured JWT for `subject`, valid for an hour: `{"alg":"none"}`, the claims, and an
/// empty signature.
fn unsecured_jwt(subject: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let claims = format!(
        r#"{{"sub":"{subject}","iat":{now},"exp":{},"scope":"kafka"}}"#,
        now + 3600
    );
    format!(
        "{}.{}.",
        base64(br#"{"alg":"none"}"#, true),
        base64(claims.as_bytes(), true)
    )
}

/// Base64 (RFC 4648): the URL-safe alphabet without padding when `url_safe`, else the
/// standard one with padding.
fn base64(bytes: &[u8], url_safe: bool) -> String {
    let alphabet: &[u8; 64] = if url_safe {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let value = group.iter().enumerate().fold(0u32, |value, (i, byte)| {
            value | u32::from(*byte) << (16 - 8 * i)
        });
        for i in 0..=group.len() {
            out.push(char::from(alphabet[(value >> (18 - 6 * i) & 63) as usize]));
        }
        if !url_safe {
            out.push_str(&"=".repeat(3 - group.len()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (input, standard) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes(), false), standard);
            assert_eq!(
                base64(input.as_bytes(), true),
                standard.trim_end_matches('=')
            );
        }
        assert_eq!(base64(&[0xfb, 0xff], true), "-_8");
    }

    #[tokio::test]
    async fn issues_tokens_only_to_its_client() {
        let endpoint = TokenEndpoint::start("relay", "s3cret", "relay")
            .await
            .unwrap();
        let port = endpoint.url().trim_start_matches("http://127.0.0.1:");
        let port: u16 = port.trim_end_matches("/token").parse().unwrap();
        for (credentials, status) in [("relay:s3cret", "200"), ("relay:wrong", "401")] {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            let body = "grant_type=client_credentials";
            let request = format!(
                "POST /token HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                base64(credentials.as_bytes(), false),
                body.len()
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            assert!(
                response.starts_with(&format!("HTTP/1.1 {status}")),
                "{response}"
            );
        }
        assert_eq!((endpoint.issued(), endpoint.refused()), (1, 1));
    }
}
