//! The one server handshake every wavesock server drives: the Stream's
//! accept functions, the hub, and the hyper and axum upgrades. Each only
//! moves the request in and the response out; what the request must hold,
//! what the response must say and which extensions run are decided here,
//! without I/O (rustls' `Acceptor` is the model).

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode, Version};

use crate::handshake::HandshakeError;
use crate::handshake::extensions::negotiate;
use crate::handshake::host::is_valid_host;
use crate::handshake::{derive_accept_key, is_valid_key};
use crate::proto::deflate::{DeflateConfig, DeflateParams};

/// A response head without a body (`handshake::server::Response`).
type Response = http::Response<()>;

/// A WebSocket request that passed its checks, and the response it is
/// owed.
///
/// 1. [`http1`](Accepting::http1) or [`new`](Accepting::new) checks the
///    request head (RFC 6455 §4.2.1, or RFC 8441's extended CONNECT).
/// 2. [`negotiate`](Accepting::negotiate) picks the extensions under the
///    server's settings.
/// 3. [`required`](Accepting::required) is the response to show a callback,
///    which may add headers or refuse;
///    [`respond`](Accepting::respond) makes what the callback returned the
///    response the handshake needs (its status, version, accept key and
///    extensions win).
/// 4. [`into_deflate`](Accepting::into_deflate) is what the connection
///    runs with once the response is sent.
///
/// A request that fails its checks gets
/// [`error_response`](crate::handshake::server::error_response)'s answer.
///
/// ```
/// use wavesock::DeflateConfig;
/// use wavesock::handshake::server::Accepting;
/// use wavesock::http::{Request, StatusCode};
///
/// let req = Request::get("/chat")
///     .header("host", "example.com")
///     .header("upgrade", "websocket")
///     .header("connection", "Upgrade")
///     .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
///     .header("sec-websocket-version", "13")
///     .header("sec-websocket-extensions", "permessage-deflate")
///     .body(())
///     .unwrap();
/// let mut accepting = Accepting::http1(&req)?;
/// accepting.negotiate(req.headers(), None); // this server does not compress
///
/// let mut response = accepting.required().clone();
/// response.headers_mut().insert("x-room", "chat".parse().unwrap());
/// *response.status_mut() = StatusCode::OK; // not the callback's to change
/// accepting.respond(&mut response);
/// assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
/// assert_eq!(response.headers()["sec-websocket-accept"], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
/// assert_eq!(response.headers()["x-room"], "chat");
/// assert!(!response.headers().contains_key("sec-websocket-extensions"));
/// assert!(accepting.into_deflate().is_none());
/// # let _ = DeflateConfig::default();
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Accepting {
    /// `101` with the accept key, or HTTP/2's `200`.
    required: Response,
    /// The `Sec-WebSocket-Extensions` value to answer with.
    extensions: Option<HeaderValue>,
    deflate: Option<(DeflateParams, DeflateConfig)>,
}

impl Accepting {
    /// Checks an HTTP/1.1 upgrade request (RFC 6455 §4.2.1): `GET`,
    /// HTTP/1.1 or later, `Host`, `Upgrade: websocket`, `Connection:
    /// Upgrade`, `Sec-WebSocket-Version: 13` and one valid key. `Host` is
    /// one field holding a host and an optional port (RFC 9112 §3.2). What a
    /// server that reads HTTP/1.1 itself accepts.
    pub fn http1<B>(req: &http::Request<B>) -> Result<Self, HandshakeError> {
        Ok(Accepting::owing(accept_response(&check_request(req)?)))
    }

    /// Checks `req` as the WebSocket handshake of its HTTP version: an
    /// extended CONNECT (RFC 8441; `protocol` is its `:protocol`
    /// pseudo-header, which HTTP libraries keep outside the header map)
    /// when it is a `CONNECT` or HTTP/2 or later, else as
    /// [`http1`](Accepting::http1). What a server on an HTTP library that
    /// speaks both accepts. An extended CONNECT is HTTP/2's (RFC 8441):
    /// over HTTP/1.1, `CONNECT` is refused as any method but `GET` is.
    pub fn new<B>(req: &http::Request<B>, protocol: Option<&str>) -> Result<Self, HandshakeError> {
        // Extended CONNECT exists only from HTTP/2 on: a CONNECT over
        // HTTP/1.1 is refused as any method but GET is (405).
        if req.version() >= Version::HTTP_2 {
            check_extended_connect(req, protocol)?;
            Ok(Accepting::owing(extended_connect_response()))
        } else {
            Accepting::http1(req)
        }
    }

    fn owing(required: Response) -> Self {
        Accepting {
            required,
            extensions: None,
            deflate: None,
        }
    }

    /// Picks the extensions to run among the offers in `request`'s headers:
    /// permessage-deflate under `deflate`, the server's settings, if it
    /// compresses at all (the client's first offer it can meet). Called
    /// again, it chooses afresh.
    pub fn negotiate(&mut self, request: &HeaderMap, deflate: Option<&DeflateConfig>) {
        let agreed = deflate.and_then(|d| negotiate(d, request).map(|(p, value)| (p, d, value)));
        (self.deflate, self.extensions) = match agreed {
            Some((params, config, value)) => (Some((params, config.clone())), Some(value)),
            None => (None, None),
        };
    }

    /// The response the handshake requires, before a callback sees it:
    /// `101 Switching Protocols` with the accept key, or `200` on HTTP/2.
    pub fn required(&self) -> &Response {
        &self.required
    }

    /// Whether the request was an extended CONNECT (the WebSocket runs on
    /// an HTTP/2 stream).
    pub fn is_extended_connect(&self) -> bool {
        self.required.version() >= Version::HTTP_2
    }

    /// Makes `response` (a callback's, or a copy of
    /// [`required`](Accepting::required)) the one the handshake needs: the
    /// required status, version and headers win over the callback's, and
    /// `Sec-WebSocket-Extensions` names exactly what was negotiated (a
    /// client told of an extension the connection does not run would send
    /// frames the server refuses).
    pub fn respond(&self, response: &mut Response) {
        *response.status_mut() = self.required.status();
        *response.version_mut() = self.required.version();
        if self.is_extended_connect() {
            // HTTP/2 has no accept key, and forbids connection-specific
            // headers (RFC 9113 §8.2.2): a callback's are not sent.
            let h = response.headers_mut();
            for name in [
                header::SEC_WEBSOCKET_ACCEPT,
                header::UPGRADE,
                header::CONNECTION,
            ] {
                h.remove(name);
            }
        }
        for (name, value) in self.required.headers() {
            response.headers_mut().insert(name, value.clone());
        }
        match &self.extensions {
            Some(value) => response
                .headers_mut()
                .insert(header::SEC_WEBSOCKET_EXTENSIONS, value.clone()),
            None => response
                .headers_mut()
                .remove(header::SEC_WEBSOCKET_EXTENSIONS),
        };
    }

    /// permessage-deflate's parameters and settings, if it was agreed on.
    pub fn into_deflate(self) -> Option<(DeflateParams, DeflateConfig)> {
        self.deflate
    }
}

/// Checks a request against RFC 6455 §4.2.1 and returns the
/// `Sec-WebSocket-Accept` value to answer with.
///
/// Generic over the body so that servers doing the upgrade themselves (hyper,
/// axum) can check their own requests with it.
pub fn check_request<B>(req: &http::Request<B>) -> Result<String, HandshakeError> {
    if req.method() != Method::GET {
        return Err(HandshakeError::MethodNotAllowed(req.method().to_string()));
    }
    if req.version() < Version::HTTP_11 {
        return Err(HandshakeError::Malformed(
            "HTTP/1.1 or later is required".into(),
        ));
    }
    let h = req.headers();
    check_host(h)?;
    crate::handshake::check_upgrade_headers(h)?;
    check_version(h)?;
    let mut keys = h.get_all(header::SEC_WEBSOCKET_KEY).iter();
    match (keys.next(), keys.next()) {
        (Some(key), None) if is_valid_key(key.as_bytes()) => Ok(derive_accept_key(key.as_bytes())),
        _ => Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Key",
            reason: "must be one base64-encoded 16-byte value",
        }),
    }
}

/// Checks an HTTP/2 extended CONNECT request against RFC 8441 §4–5 (the
/// WebSocket over one HTTP/2 stream). `protocol` is the request's
/// `:protocol` pseudo-header, which HTTP libraries keep outside the header
/// map (hyper: `hyper::ext::Protocol` in the request's extensions).
///
/// Method `CONNECT`, `:protocol` `websocket`, an `:authority` and a `:path`,
/// and `Sec-WebSocket-Version: 13`. There is no `Sec-WebSocket-Key` to
/// answer: the stream is the upgrade.
///
/// ```
/// use wavesock::HandshakeError;
/// use wavesock::handshake::server::check_extended_connect;
///
/// let req = wavesock::http::Request::connect("https://example.com/chat")
///     .version(wavesock::http::Version::HTTP_2)
///     .header("sec-websocket-version", "13")
///     .body(())
///     .unwrap();
/// assert!(check_extended_connect(&req, Some("websocket")).is_ok());
/// assert!(matches!(
///     check_extended_connect(&req, Some("webtransport")),
///     Err(HandshakeError::BadHeader { name: ":protocol", .. })
/// ));
/// ```
pub fn check_extended_connect<B>(
    req: &http::Request<B>,
    protocol: Option<&str>,
) -> Result<(), HandshakeError> {
    if req.method() != Method::CONNECT {
        return Err(HandshakeError::MethodNotAllowed(req.method().to_string()));
    }
    match protocol {
        Some(p) if p.eq_ignore_ascii_case("websocket") => {}
        Some(_) => {
            return Err(HandshakeError::BadHeader {
                name: ":protocol",
                reason: "must be websocket",
            });
        }
        None => {
            return Err(HandshakeError::BadHeader {
                name: ":protocol",
                reason: "missing: a CONNECT without it is a tunnel, not a WebSocket",
            });
        }
    }
    if req.uri().authority().is_none() {
        return Err(HandshakeError::BadHeader {
            name: ":authority",
            reason: "missing",
        });
    }
    if req
        .uri()
        .path_and_query()
        .is_none_or(|p| p.as_str().is_empty())
    {
        return Err(HandshakeError::BadHeader {
            name: ":path",
            reason: "missing",
        });
    }
    check_version(req.headers())
}

/// One `Host` field, a valid `uri-host [ ":" port ]` (RFC 9112 §3.2: a
/// server answers 400 to a request without one, with more than one, or
/// with an invalid one). Two fields leave the request's authority to
/// whichever one a proxy or the application reads; an invalid one is not
/// an authority at all.
fn check_host(h: &HeaderMap) -> Result<(), HandshakeError> {
    let mut hosts = h.get_all(header::HOST).iter();
    let reason = match (hosts.next(), hosts.next()) {
        (Some(host), None) if is_valid_host(host.as_bytes()) => return Ok(()),
        (None, _) => "missing",
        (Some(_), Some(_)) => "must be one field",
        (Some(_), None) => "must be a host and an optional port",
    };
    Err(HandshakeError::BadHeader {
        name: "Host",
        reason,
    })
}

/// `Sec-WebSocket-Version: 13`, once. Another version, or none, is owed
/// `426` naming 13 (RFC 6455 §4.2.2); two fields are a malformed request,
/// as two keys are: read as the first alone, `13` and `8` would pass.
fn check_version(h: &HeaderMap) -> Result<(), HandshakeError> {
    let mut versions = h.get_all(header::SEC_WEBSOCKET_VERSION).iter();
    match (versions.next(), versions.next()) {
        (Some(v), None) if v.as_bytes() == b"13" => Ok(()),
        (_, Some(_)) => Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Version",
            reason: "must be one field",
        }),
        _ => Err(HandshakeError::UnsupportedVersion),
    }
}

/// The `200 OK` that accepts an extended CONNECT request (RFC 8441 §5): no
/// `Upgrade`, `Connection` or `Sec-WebSocket-Accept`, which HTTP/2 has no
/// use for.
pub fn extended_connect_response() -> Response {
    let mut resp = Response::new(());
    *resp.version_mut() = Version::HTTP_2;
    resp
}

/// The 101 response for an accepted request.
pub fn accept_response(accept_key: &str) -> Response {
    let mut resp = Response::new(());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(accept_key).expect("base64 is a valid header value"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn upgrade(extra: &[(&str, &str)]) -> http::Request<()> {
        let mut b = http::Request::get("/chat")
            .header("host", "example.com")
            .header("upgrade", "websocket")
            .header("connection", "Upgrade")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header("sec-websocket-version", "13");
        for (n, v) in extra {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap()
    }

    fn connect(protocol_version: &str) -> http::Request<()> {
        http::Request::connect("https://example.com/chat")
            .version(Version::HTTP_2)
            .header("sec-websocket-version", protocol_version)
            .body(())
            .unwrap()
    }

    fn with_hosts(hosts: &[&str]) -> http::Request<()> {
        let mut req = upgrade(&[]);
        req.headers_mut().remove("host");
        for h in hosts {
            let value = HeaderValue::from_bytes(h.as_bytes()).unwrap();
            req.headers_mut().append(header::HOST, value);
        }
        req
    }

    #[test]
    fn the_host_field_is_one_valid_host_and_port() {
        for hosts in [&["example.com"][..], &["[::1]:80"], &["10.0.0.1:9001"]] {
            assert!(Accepting::http1(&with_hosts(hosts)).is_ok(), "{hosts:?}");
        }
        for (hosts, why) in [
            (&[][..], "missing"),
            (&["example.com", "example.com"], "must be one field"),
            (&["example.com", "evil.example"], "must be one field"),
            (&[""], "must be a host and an optional port"),
            (&["a b"], "must be a host and an optional port"),
            (&["example.com:http"], "must be a host and an optional port"),
        ] {
            let err = Accepting::http1(&with_hosts(hosts)).unwrap_err();
            assert!(
                matches!(err, HandshakeError::BadHeader { name: "Host", reason } if reason == why),
                "{hosts:?}: {err:?}"
            );
            assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST), "{hosts:?}");
        }
    }

    #[test]
    fn an_upgrade_is_owed_101_with_its_accept_key() {
        let a = Accepting::http1(&upgrade(&[])).unwrap();
        assert_eq!(a.required().status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            a.required().headers()["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(!a.is_extended_connect());
    }

    #[test]
    fn http1_refuses_what_new_reads_as_extended_connect() {
        let req = connect("13");
        assert!(matches!(
            Accepting::http1(&req),
            Err(HandshakeError::MethodNotAllowed(_))
        ));
        let a = Accepting::new(&req, Some("websocket")).unwrap();
        assert!(a.is_extended_connect());
        assert_eq!(a.required().status(), StatusCode::OK);
        assert_eq!(a.required().version(), Version::HTTP_2);
        assert!(matches!(
            Accepting::new(&connect("8"), Some("websocket")),
            Err(HandshakeError::UnsupportedVersion)
        ));
        assert!(matches!(
            Accepting::new(&req, None),
            Err(HandshakeError::BadHeader {
                name: ":protocol",
                ..
            })
        ));
        // An HTTP/1.1 GET goes to the RFC 6455 checks under `new` too.
        assert!(
            !Accepting::new(&upgrade(&[]), None)
                .unwrap()
                .is_extended_connect()
        );
    }

    #[test]
    fn a_callbacks_headers_stay_and_the_handshakes_win() {
        let a = Accepting::http1(&upgrade(&[])).unwrap();
        let mut r = Response::new(());
        *r.status_mut() = StatusCode::OK;
        r.headers_mut()
            .insert("sec-websocket-accept", "forged".parse().unwrap());
        r.headers_mut()
            .insert("sec-websocket-extensions", "x-made-up".parse().unwrap());
        r.headers_mut().insert("x-room", "chat".parse().unwrap());
        a.respond(&mut r);
        assert_eq!(r.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            r.headers()["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(r.headers()["upgrade"], "websocket");
        assert_eq!(r.headers()["x-room"], "chat");
        assert!(!r.headers().contains_key("sec-websocket-extensions"));
    }

    #[test]
    fn a_connect_over_http1_is_a_method_not_allowed() {
        let mut req = connect("13");
        *req.version_mut() = Version::HTTP_11;
        assert!(matches!(
            Accepting::new(&req, Some("websocket")),
            Err(HandshakeError::MethodNotAllowed(m)) if m == "CONNECT"
        ));
    }

    #[test]
    fn one_version_field_and_only_13() {
        let two = upgrade(&[("sec-websocket-version", "8")]);
        assert!(matches!(
            Accepting::http1(&two),
            Err(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Version",
                ..
            })
        ));
        let mut eight = upgrade(&[]);
        eight
            .headers_mut()
            .insert("sec-websocket-version", "8".parse().unwrap());
        assert!(matches!(
            Accepting::http1(&eight),
            Err(HandshakeError::UnsupportedVersion)
        ));
        eight.headers_mut().remove("sec-websocket-version");
        assert!(matches!(
            Accepting::http1(&eight),
            Err(HandshakeError::UnsupportedVersion)
        ));
        let mut h2 = connect("13");
        h2.headers_mut()
            .append("sec-websocket-version", "13".parse().unwrap());
        assert!(matches!(
            Accepting::new(&h2, Some("websocket")),
            Err(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Version",
                ..
            })
        ));
    }

    #[test]
    fn http2_sends_no_accept_key_nor_connection_headers_of_a_callback() {
        let a = Accepting::new(&connect("13"), Some("websocket")).unwrap();
        let mut r = a.required().clone();
        for (n, v) in [
            ("sec-websocket-accept", "forged"),
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("x-room", "chat"),
        ] {
            r.headers_mut().insert(n, v.parse().unwrap());
        }
        a.respond(&mut r);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.version(), Version::HTTP_2);
        let names: Vec<_> = r.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-room"]);
    }

    #[test]
    fn deflate_is_agreed_only_when_offered_and_configured() {
        let offered = upgrade(&[("sec-websocket-extensions", "permessage-deflate")]);
        let config = DeflateConfig::default();

        let mut a = Accepting::http1(&offered).unwrap();
        a.negotiate(offered.headers(), None);
        assert!(a.clone().into_deflate().is_none());

        let plain = upgrade(&[]);
        a.negotiate(plain.headers(), Some(&config));
        assert!(a.clone().into_deflate().is_none());

        a.negotiate(offered.headers(), Some(&config));
        let mut r = a.required().clone();
        a.respond(&mut r);
        assert_eq!(
            r.headers()["sec-websocket-extensions"]
                .to_str()
                .unwrap()
                .split(';')
                .next(),
            Some("permessage-deflate")
        );
        assert!(a.clone().into_deflate().is_some());

        // Chosen afresh: nothing offered now, nothing agreed.
        a.negotiate(plain.headers(), Some(&config));
        let mut r = a.required().clone();
        a.respond(&mut r);
        assert!(!r.headers().contains_key("sec-websocket-extensions"));
        assert!(a.into_deflate().is_none());
    }
}
