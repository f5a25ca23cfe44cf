//! HTTP `CONNECT` (RFC 9110 §9.3.6), sans-IO: the request to send and the
//! parse of the proxy's answer.

use base64::Engine;
use http::StatusCode;

use super::config::{Credentials, bracket};
use crate::error::{ConnectError, Result};

/// Most header lines accepted in the proxy's answer.
const MAX_HEADERS: usize = 64;

/// The `CONNECT host:port` request, with basic auth when credentials are given.
pub(crate) fn connect_request(host: &str, port: u16, auth: Option<&Credentials>) -> Vec<u8> {
    let target = format!("{}:{port}", bracket(host));
    let mut out = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(c) = auth {
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", c.username, c.password));
        out.push_str(&format!("Proxy-Authorization: Basic {token}\r\n"));
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// Parses the proxy's answer from the start of `buf`: `Ok(None)` while the
/// head is incomplete, the head's length once a 2xx arrived, and
/// [`ConnectError::ProxyStatus`] for any other status.
pub(crate) fn parse_response(buf: &[u8]) -> Result<Option<usize>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(
                ConnectError::ProxyProtocol("too many headers in the proxy's answer").into(),
            );
        }
        Err(_) => {
            return Err(ConnectError::ProxyProtocol("malformed HTTP answer from the proxy").into());
        }
    };
    let status = response
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(ConnectError::ProxyProtocol(
            "bad status code from the proxy",
        ))?;
    if status.is_success() {
        Ok(Some(head_len))
    } else {
        Err(ConnectError::ProxyStatus(status).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn request_names_the_target_and_carries_basic_auth() {
        let creds = Credentials {
            username: "Aladdin".into(),
            password: "open sesame".into(),
        };
        let req = connect_request("example.com", 443, Some(&creds));
        // RFC 7617's example credentials.
        assert_eq!(
            req,
            b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n\r\n"
        );
        let req = connect_request("::1", 80, None);
        assert_eq!(req, b"CONNECT [::1]:80 HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
    }

    #[test]
    fn answers_at_every_split() {
        let ok = b"HTTP/1.1 200 Connection established\r\nVia: test\r\n\r\n";
        for cut in 0..ok.len() {
            assert_eq!(parse_response(&ok[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(parse_response(ok).unwrap(), Some(ok.len()));
        // HTTP/1.0 proxies answer in kind.
        assert!(
            parse_response(b"HTTP/1.0 200 OK\r\n\r\n")
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn refusals_carry_the_status() {
        let r = parse_response(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n");
        assert!(matches!(
            r,
            Err(Error::Connect(ConnectError::ProxyStatus(s))) if s == StatusCode::PROXY_AUTHENTICATION_REQUIRED
        ));
        let r = parse_response(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        assert!(
            matches!(r, Err(Error::Connect(ConnectError::ProxyStatus(s))) if s.as_u16() == 502)
        );
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        for bad in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 abc\r\n\r\n",
            b"\x05\x00",
        ] {
            assert!(
                matches!(
                    parse_response(bad),
                    Err(Error::Connect(ConnectError::ProxyProtocol(_)))
                ),
                "{bad:?}"
            );
        }
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse_response(&many),
            Err(Error::Connect(ConnectError::ProxyProtocol(_)))
        ));
    }
}
