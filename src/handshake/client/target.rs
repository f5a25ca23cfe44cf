//! Where a client's handshake goes, as its URL says: the scheme (`ws` or
//! `wss`, and with it TLS), the port and the host. These rules are written
//! here once, for both handshakes (the HTTP/1.1 upgrade and RFC 8441's
//! extended CONNECT) and for the code that opens the connection and picks
//! a proxy, so that the port connected to is the one the request names.

use std::fmt;

use http::{Method, Uri};

use crate::handshake::HandshakeError;

/// Whether the URI asks for TLS (`wss://`).
pub(crate) fn is_secure(uri: &Uri) -> bool {
    uri.scheme_str().and_then(ws_scheme_is_secure) == Some(true)
}

/// Whether a WebSocket scheme asks for TLS: `Some(false)` for `ws`,
/// `Some(true)` for `wss` (in any case), `None` for any other scheme.
pub(crate) fn ws_scheme_is_secure(scheme: &str) -> Option<bool> {
    if scheme.eq_ignore_ascii_case("ws") {
        Some(false)
    } else if scheme.eq_ignore_ascii_case("wss") {
        Some(true)
    } else {
        None
    }
}

/// The port a URL implies when it names none, the one place this rule is
/// written: 443 with TLS (`wss`, `https`), 80 without (`ws`, `http`).
pub(crate) fn default_port(secure: bool) -> u16 {
    if secure { 443 } else { 80 }
}

/// `uri` as errors and log events show it: scheme, host, port and path.
///
/// Applications log connect errors, and a credential must never reach a
/// log: the userinfo (`user:password@`), which `Uri`'s `Display` keeps, is
/// left out, and so is the query, where WebSocket URLs often carry a token
/// (a browser cannot set headers on one). Neither is what an error about a
/// URL is about.
pub(crate) fn shown(uri: &Uri) -> Shown<'_> {
    Shown(uri)
}

/// What [`shown`] returns.
pub(crate) struct Shown<'a>(&'a Uri);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let uri = self.0;
        if let Some(scheme) = uri.scheme_str() {
            write!(f, "{scheme}://")?;
        }
        if let Some(authority) = uri.authority() {
            let authority = authority.as_str();
            // Userinfo may hold '@'s of its own (`Uri` does not decode them);
            // the host and port follow the last one.
            let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
            f.write_str(host_port)?;
        }
        f.write_str(uri.path())
    }
}

/// The port the URI's authority names, checked: `None` when it names none
/// or leaves it empty after the colon (`ws://host:/`), which RFC 3986
/// §3.2.3 and §6.2.3 make the same as naming none: the scheme's default.
///
/// [`Uri::port_u16`] cannot be used alone: it is `None` both for no port and
/// for one that is not a number or is over 65535, and it takes a sign
/// (`+80`). A port here is ASCII digits (leading zeros allowed) with a value
/// from 1 to 65535; port 0 names no service and cannot be connected to.
pub(crate) fn explicit_port(uri: &Uri) -> Result<Option<u16>, HandshakeError> {
    let Some(authority) = uri.authority() else {
        return Ok(None);
    };
    let authority = authority.as_str();
    // Userinfo may hold colons; the host and port follow its last '@'.
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let after_host = match host_port.strip_prefix('[') {
        // An IPv6 literal: its colons are inside the brackets.
        Some(literal) => literal.split_once(']').map_or("", |(_, rest)| rest),
        None => host_port.find(':').map_or("", |at| &host_port[at..]),
    };
    // After the host comes nothing or ':' and the port. `Uri` lets other
    // text follow an IPv6 literal (`[::1]x:9001`), and reads a port in it
    // that `port_u16` reports; taking that for no port would connect to
    // the default one instead.
    let Some(digits) = after_host.strip_prefix(':') else {
        return match after_host {
            "" => Ok(None),
            junk => Err(HandshakeError::InvalidUrl(format!(
                "{}: {junk:?} after the host where only a port may follow",
                shown(uri)
            ))),
        };
    };
    if digits.is_empty() {
        return Ok(None);
    }
    // `u16::from_str` alone would take a leading '+'.
    let port = match digits.bytes().all(|b| b.is_ascii_digit()) {
        true => digits.parse::<u16>().ok(),
        false => None,
    };
    match port {
        Some(p) if p != 0 => Ok(Some(p)),
        _ => Err(HandshakeError::InvalidUrl(format!(
            "{}: bad port {digits:?} (a port is a number from 1 to 65535)",
            shown(uri)
        ))),
    }
}

/// The port to connect to for a `ws://` or `wss://` URI: the one it names,
/// else 443 for `wss://` and 80 otherwise. An invalid port is an error,
/// never the default.
pub(crate) fn port_or_default(uri: &Uri) -> Result<u16, HandshakeError> {
    Ok(explicit_port(uri)?.unwrap_or(default_port(is_secure(uri))))
}

/// The handshake a request is checked for. They differ in the URLs they
/// take, and so in the error for one they do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// The HTTP/1.1 upgrade (RFC 6455 §4.1): a `ws://` or `wss://` URL, or
    /// a URI without a scheme (a bare path) for a stream the caller opened,
    /// whose `Host` header the caller then gives.
    Upgrade,
    /// RFC 8441's extended CONNECT: a `ws://` or `wss://` URL only, as the
    /// `:scheme` and `:authority` pseudo-headers come from it.
    ExtendedConnect,
}

/// A handshake request's destination, checked by [`check`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// Whether the URL asks for TLS: `Some(true)` for `wss`, `Some(false)`
    /// for `ws`, `None` for a URI without a scheme.
    pub(crate) secure: Option<bool>,
    /// The host and port as `Host` and `:authority` carry them: without
    /// userinfo, and without the port when it is the scheme's default.
    /// `None` when the URI has no host, which is allowed only without a
    /// scheme.
    pub(crate) authority: Option<String>,
}

/// What both handshakes require of a request's method and URI, in this
/// order: method `GET` ([`HandshakeError::MethodNotAllowed`]), a scheme
/// the handshake takes, a valid port, and a host when there is a scheme
/// (each [`HandshakeError::InvalidUrl`]). The port is checked even when the
/// caller gives its own `Host`: the URL is also what `connect_async`
/// connects to.
pub(crate) fn check(
    request: &http::Request<()>,
    handshake: Handshake,
) -> Result<Target, HandshakeError> {
    if request.method() != Method::GET {
        return Err(HandshakeError::MethodNotAllowed(
            request.method().to_string(),
        ));
    }
    check_uri(request.uri(), handshake)
}

/// [`check`] without the method: the scheme, the port and the host.
pub(crate) fn check_uri(uri: &Uri, handshake: Handshake) -> Result<Target, HandshakeError> {
    let secure = uri.scheme_str().and_then(ws_scheme_is_secure);
    match (uri.scheme_str(), secure, handshake) {
        (_, Some(_), _) | (None, None, Handshake::Upgrade) => {}
        (Some(s), None, Handshake::Upgrade) => {
            return Err(HandshakeError::InvalidUrl(format!(
                "unsupported URL scheme {s:?}: a WebSocket URL is ws:// or wss://"
            )));
        }
        (_, None, Handshake::ExtendedConnect) => {
            return Err(HandshakeError::InvalidUrl(format!(
                "{}: an HTTP/2 WebSocket needs a ws:// or wss:// URL",
                shown(uri)
            )));
        }
    }
    let port = explicit_port(uri)?;
    let authority = match uri.authority() {
        Some(auth) if !auth.host().is_empty() => Some(match port {
            // Userinfo never goes into Host or :authority; a default port
            // is left out (without a scheme there is none).
            Some(p) if Some(p) != secure.map(default_port) => format!("{}:{p}", auth.host()),
            _ => auth.host().to_owned(),
        }),
        _ if secure.is_some() => {
            return Err(HandshakeError::InvalidUrl(format!(
                "{}: no host",
                shown(uri)
            )));
        }
        _ => None,
    };
    Ok(Target { secure, authority })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::client::{IntoClientRequest, Request, prepare_request};

    fn check_uri(method: Method, uri: &str, handshake: Handshake) -> Result<Target, String> {
        let request = Request::builder().method(method).uri(uri).body(()).unwrap();
        check(&request, handshake).map_err(|e| e.to_string())
    }

    #[test]
    fn both_handshakes_check_in_one_order_with_their_own_scheme_error() {
        use Handshake::{ExtendedConnect, Upgrade};
        for handshake in [Upgrade, ExtendedConnect] {
            // The method before the scheme, the scheme before the port.
            let err = check_uri(Method::POST, "ftp://h:0/", handshake).unwrap_err();
            assert!(err.contains("POST"), "{handshake:?}: {err}");
            let err = check_uri(Method::GET, "ws://h:0/", handshake).unwrap_err();
            assert!(err.contains("bad port"), "{handshake:?}: {err}");
        }
        let err = check_uri(Method::GET, "ftp://h:0/", Upgrade).unwrap_err();
        assert!(err.contains("unsupported URL scheme \"ftp\""), "{err}");
        let err = check_uri(Method::GET, "ftp://h:0/", ExtendedConnect).unwrap_err();
        assert!(err.contains("HTTP/2 WebSocket needs a ws://"), "{err}");
        // Only the upgrade takes a URI without a scheme.
        let bare = Target {
            secure: None,
            authority: None,
        };
        assert_eq!(check_uri(Method::GET, "/chat", Upgrade), Ok(bare));
        let err = check_uri(Method::GET, "/chat", ExtendedConnect).unwrap_err();
        assert!(err.contains("HTTP/2 WebSocket needs a ws://"), "{err}");
    }

    #[test]
    fn the_authority_drops_userinfo_and_the_default_port() {
        for (uri, secure, authority) in [
            ("wss://u:p@h:443/", Some(true), Some("h")),
            ("ws://h:443/", Some(false), Some("h:443")),
            ("WS://[::1]:80/", Some(false), Some("[::1]")),
            // Without a scheme there is no default port to leave out.
            ("h:80", None, Some("h:80")),
        ] {
            let target = check_uri(Method::GET, uri, Handshake::Upgrade).unwrap();
            assert_eq!(target.secure, secure, "{uri}");
            assert_eq!(target.authority.as_deref(), authority, "{uri}");
        }
    }

    #[test]
    fn bad_urls_are_refused() {
        assert!(matches!(
            prepare_request("http://h/".into_client_request().unwrap()),
            Err(HandshakeError::InvalidUrl(s)) if s.contains("\"http\"")
        ));
        assert!(matches!(
            "not a url at all".into_client_request(),
            Err(HandshakeError::InvalidUrl(_))
        ));
        // A bare path needs a Host header.
        assert!(matches!(
            prepare_request("/chat".into_client_request().unwrap()),
            Err(HandshakeError::InvalidUrl(_))
        ));
        let req = Request::builder()
            .uri("/chat")
            .header("Host", "unix")
            .body(())
            .unwrap();
        assert_eq!(prepare_request(req).unwrap().headers()["host"], "unix");
        let post = Request::builder()
            .method("POST")
            .uri("ws://h/")
            .body(())
            .unwrap();
        assert!(matches!(
            prepare_request(post),
            Err(HandshakeError::MethodNotAllowed(_))
        ));
    }

    #[test]
    fn invalid_ports_are_refused_not_replaced_by_the_default() {
        for url in [
            "ws://127.0.0.1:99999/",
            "ws://h:65536/",
            "ws://h:abc/",
            "ws://h:-1/",
            "ws://h:+80/",
            "ws://h:0/",
            "wss://h:99999/",
            "ws://[::1]:99999/",
            "ws://user:pw@h:x/",
        ] {
            // As a URL, refused as soon as it becomes a request.
            match url.into_client_request() {
                Err(HandshakeError::InvalidUrl(why)) => {
                    assert!(why.contains("port"), "{url}: {why}")
                }
                other => panic!("{url}: {other:?}"),
            }
            // In a request built by hand, refused by prepare_request.
            let req = Request::builder().uri(url).body(()).unwrap();
            match prepare_request(req) {
                Err(HandshakeError::InvalidUrl(why)) => {
                    assert!(why.contains("port"), "{url}: {why}")
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        // Also when the caller gives its own Host: the URL is what
        // connect_async would connect to.
        let req = Request::builder()
            .uri("ws://h:abc/")
            .header("Host", "h")
            .body(())
            .unwrap();
        assert!(matches!(
            prepare_request(req),
            Err(HandshakeError::InvalidUrl(_))
        ));
    }

    #[test]
    fn errors_never_show_the_urls_userinfo() {
        use crate::handshake::client::prepare_extended_connect;

        let upgrade = |url: &str| {
            let req = Request::builder().uri(url).body(()).unwrap();
            prepare_request(req).unwrap_err()
        };
        let extended = |url: &str| {
            let req = Request::builder().uri(url).body(()).unwrap();
            prepare_extended_connect(req).unwrap_err()
        };
        let errors = [
            // A bad port, from each way in.
            "ws://alice:s3cret@127.0.0.1:99999/"
                .into_client_request()
                .unwrap_err(),
            upgrade("ws://alice:s3cret@127.0.0.1:99999/"),
            extended("wss://alice:s3cret@h:x/"),
            // A scheme extended CONNECT does not take.
            extended("https://alice:s3cret@h/chat"),
        ];
        for err in errors {
            let shown = err.to_string();
            assert!(matches!(err, HandshakeError::InvalidUrl(_)), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(!shown.contains("alice"), "{shown}");
        }
        // What is shown still says which URL it was, without the query,
        // where a token often rides.
        let shown = upgrade("ws://alice:s3cret@127.0.0.1:99999/chat?token=t0k").to_string();
        assert!(shown.contains("ws://127.0.0.1:99999/chat:"), "{shown}");
        assert!(!shown.contains("t0k"), "{shown}");
    }

    #[test]
    fn text_after_an_ipv6_literal_must_be_a_port() {
        // `http::Uri` parses these, and for some reads a port (`[::1]x:9001`
        // gives 9001); connecting to the default port instead would be the
        // replaced port the rules forbid.
        for url in ["ws://[::1]x:9001/", "ws://[::1]x/", "wss://u:p@[::1].:443/"] {
            let uri: Uri = url.parse().unwrap();
            match explicit_port(&uri) {
                Err(HandshakeError::InvalidUrl(why)) => {
                    assert!(why.contains("port"), "{url}: {why}")
                }
                other => panic!("{url}: {other:?}"),
            }
            let req = Request::builder().uri(url).body(()).unwrap();
            assert!(
                matches!(prepare_request(req), Err(HandshakeError::InvalidUrl(_))),
                "{url}"
            );
        }
        assert_eq!(
            "ws://[::1]x:9001/".parse::<Uri>().unwrap().port_u16(),
            Some(9001)
        );
    }

    #[test]
    fn empty_or_zero_padded_ports_are_valid() {
        // RFC 3986 §3.2.3: `port = *DIGIT`, an empty port is the default.
        let cases = [
            ("ws://h:/", "h", 80),
            ("wss://h:/", "h", 443),
            ("ws://h:080/", "h", 80),
            ("ws://h:09001/", "h:9001", 9001),
            ("ws://h:65535/", "h:65535", 65535),
            ("ws://[::1]:/", "[::1]", 80),
        ];
        for (url, host, port) in cases {
            let req = prepare_request(url.into_client_request().unwrap()).unwrap();
            assert_eq!(req.headers()["host"], host, "{url}");
            assert_eq!(port_or_default(req.uri()).unwrap(), port, "{url}");
        }
    }
}
