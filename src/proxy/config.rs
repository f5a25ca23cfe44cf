//! The [`Proxy`] value that a [`Config`](crate::Config) carries: which
//! proxy to use, parsed from its URL, or the environment's choice. Plain
//! data with no I/O, so that the configuration does not depend on the
//! runtime; the tunnel through a proxy is opened in `tunnel.rs`.

use std::fmt;
use std::net::IpAddr;

use http::Uri;

use super::env;
use crate::error::{Error, Result};
use crate::handshake::client::target::default_port;

/// Which proxy a client connects through.
///
/// Built from a URL ([`Proxy::http`], [`Proxy::socks5`], [`Proxy::from_url`]),
/// taken from the environment at connect time ([`Proxy::from_env`]), or none
/// ([`Proxy::none`], the default). Building never fails: a bad URL is kept
/// as an invalid proxy and reported by [`Config::validate`] (and so by every
/// connect call) as [`Error::InvalidConfig`].
///
/// Credentials in the URL (`http://user:pass@host:port`, percent-encoded)
/// are sent as HTTP basic auth or as a SOCKS5 username/password (RFC 1929).
/// `Debug` output hides the password.
///
/// ```
/// use wavesock::proxy::Proxy;
///
/// assert!(Proxy::http("http://proxy.corp:3128").validate().is_ok());
/// assert!(Proxy::socks5("socks5h://user:pw@127.0.0.1:1080").validate().is_ok());
/// assert!(Proxy::from_url("ftp://proxy").validate().is_err());
/// let p = Proxy::http("http://proxy:3128").credentials("me", "s3cret");
/// assert!(!format!("{p:?}").contains("s3cret"));
/// ```
///
/// [`Config::validate`]: crate::Config::validate
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Proxy(Kind);

#[derive(Clone, PartialEq, Eq, Default)]
enum Kind {
    #[default]
    Direct,
    FromEnv,
    Server(Server),
    Invalid(&'static str),
}

/// A proxy to tunnel through.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Server {
    pub(crate) protocol: Protocol,
    /// Without brackets for IPv6.
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) auth: Option<Credentials>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http,
    Socks5,
}

#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) username: String,
    pub(crate) password: String,
}

impl Proxy {
    /// No proxy: connect to the server directly. The default.
    pub fn none() -> Proxy {
        Proxy(Kind::Direct)
    }

    /// Choose at connect time from the environment, for each URL:
    /// `https_proxy` / `HTTPS_PROXY` for `wss://`, `http_proxy` /
    /// `HTTP_PROXY` for `ws://`, then `all_proxy` / `ALL_PROXY`; none when
    /// the host matches `no_proxy` / `NO_PROXY`. Under CGI (`REQUEST_METHOD`
    /// set) uppercase `HTTP_PROXY` is ignored, as a request's `Proxy:`
    /// header sets it. See [`Proxy::from_env_vars`] for the rules.
    pub fn from_env() -> Proxy {
        Proxy(Kind::FromEnv)
    }

    /// An HTTP proxy asked to `CONNECT`: `http://[user:pass@]host[:port]`
    /// (port 80 by default; the scheme may be left out).
    pub fn http(url: &str) -> Proxy {
        match parse_url(url) {
            Ok(s) if s.protocol == Protocol::Http => Proxy(Kind::Server(s)),
            Ok(_) => Proxy(Kind::Invalid("Proxy::http takes an http:// URL")),
            Err(reason) => Proxy(Kind::Invalid(reason)),
        }
    }

    /// A SOCKS5 proxy: `socks5://[user:pass@]host[:port]` (port 1080 by
    /// default; `socks5h://` is the same, and the scheme may be left out).
    /// The proxy always resolves the server's host name.
    pub fn socks5(url: &str) -> Proxy {
        let url = match url.split_once("://") {
            Some(_) => url.to_owned(),
            None => format!("socks5://{url}"),
        };
        match parse_url(&url) {
            Ok(s) if s.protocol == Protocol::Socks5 => Proxy(Kind::Server(s)),
            Ok(_) => Proxy(Kind::Invalid("Proxy::socks5 takes a socks5:// URL")),
            Err(reason) => Proxy(Kind::Invalid(reason)),
        }
    }

    /// A proxy whose kind the URL's scheme says: `http://` (also the
    /// default without a scheme), `socks5://` or `socks5h://`.
    pub fn from_url(url: &str) -> Proxy {
        match parse_url(url) {
            Ok(s) => Proxy(Kind::Server(s)),
            Err(reason) => Proxy(Kind::Invalid(reason)),
        }
    }

    /// Sets the username and password to give the proxy, in place of any in
    /// its URL. Only for a proxy built from a URL.
    pub fn credentials(self, username: &str, password: &str) -> Proxy {
        match self.0 {
            Kind::Server(mut s) => {
                s.auth = Some(Credentials {
                    username: username.to_owned(),
                    password: password.to_owned(),
                });
                Proxy(Kind::Server(s))
            }
            Kind::Invalid(r) => Proxy(Kind::Invalid(r)),
            _ => Proxy(Kind::Invalid("credentials need a proxy given by its URL")),
        }
    }

    /// Whether this is [`Proxy::none`].
    pub fn is_none(&self) -> bool {
        self.0 == Kind::Direct
    }

    /// Checks that the proxy can be used: its URL parsed, and credentials
    /// fit the protocol (SOCKS5 allows 1 to 255 bytes for each).
    pub fn validate(&self) -> Result<()> {
        match &self.0 {
            Kind::Invalid(reason) => Err(Error::InvalidConfig(reason)),
            Kind::Server(s) => s.validate(),
            Kind::Direct | Kind::FromEnv => Ok(()),
        }
    }

    /// The proxy the environment picks for a connection to `target` (a
    /// `ws://` or `wss://` URL), looking variables up with `var`. This is
    /// what [`Proxy::from_env`] does at connect time with the process
    /// environment; it is a pure function so that it can be tested, or fed
    /// from somewhere else.
    ///
    /// - `wss://` uses `https_proxy`, then `HTTPS_PROXY`; `ws://` uses
    ///   `http_proxy`, then `HTTP_PROXY`; both fall back to `all_proxy`, then
    ///   `ALL_PROXY`. Empty values count as unset. A value without a scheme
    ///   is an HTTP proxy; `socks5://` and `socks5h://` are SOCKS5.
    /// - When `REQUEST_METHOD` is set, as it is for a CGI program, uppercase
    ///   `HTTP_PROXY` is ignored: CGI passes each request header `X` as
    ///   `HTTP_X`, so a request carrying `Proxy: http://attacker` would set
    ///   it ("httpoxy", CVE-2016-5385). reqwest and Go's net/http do the
    ///   same; curl never reads `HTTP_PROXY` in upper case. Use
    ///   `http_proxy` or `all_proxy` there.
    /// - `no_proxy` (else `NO_PROXY`) is a list separated by commas or
    ///   spaces: `*` matches every host; `example.com` and `.example.com`
    ///   match that domain and its subdomains; `host:port` matches only that
    ///   port; IP addresses match exactly and `10.0.0.0/8`-style ranges match
    ///   the addresses they hold. Names and addresses are compared as
    ///   written: a name is not resolved to match an address.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use wavesock::proxy::Proxy;
    ///
    /// let env = HashMap::from([
    ///     ("HTTPS_PROXY", "http://proxy.corp:3128"),
    ///     ("NO_PROXY", "localhost,.internal"),
    /// ]);
    /// let var = |name: &str| env.get(name).map(|v| v.to_string());
    /// let target = "wss://api.example.com/".parse().unwrap();
    /// assert_eq!(Proxy::from_env_vars(&target, var), Proxy::http("http://proxy.corp:3128"));
    /// let target = "wss://db.internal/".parse().unwrap();
    /// assert!(Proxy::from_env_vars(&target, var).is_none());
    /// ```
    pub fn from_env_vars<F>(target: &Uri, var: F) -> Proxy
    where
        F: Fn(&str) -> Option<String>,
    {
        env::select(target, var).map_or_else(Proxy::none, |url| Proxy::from_url(&url))
    }

    /// The proxy to tunnel through for `target`, with `FromEnv` resolved.
    pub(crate) fn server_for(&self, target: &Uri) -> Result<Option<Server>> {
        let resolved;
        let proxy = match self.0 {
            Kind::FromEnv => {
                resolved = Proxy::from_env_vars(target, |name| std::env::var(name).ok());
                &resolved
            }
            _ => self,
        };
        proxy.validate()?;
        match &proxy.0 {
            Kind::Server(s) => Ok(Some(s.clone())),
            _ => Ok(None),
        }
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Direct => f.write_str("Proxy::none()"),
            Kind::FromEnv => f.write_str("Proxy::from_env()"),
            Kind::Invalid(reason) => write!(f, "Proxy(invalid: {reason})"),
            Kind::Server(s) => {
                let scheme = match s.protocol {
                    Protocol::Http => "http",
                    Protocol::Socks5 => "socks5",
                };
                // The password never shows.
                let user = match &s.auth {
                    Some(c) => format!("{}:***@", c.username),
                    None => String::new(),
                };
                write!(f, "Proxy({scheme}://{user}{}:{})", bracket(&s.host), s.port)
            }
        }
    }
}

impl Server {
    fn validate(&self) -> Result<()> {
        if let (Protocol::Socks5, Some(c)) = (self.protocol, &self.auth) {
            let fits = |s: &str| (1..=255).contains(&s.len());
            if !fits(&c.username) || !fits(&c.password) {
                return Err(Error::InvalidConfig(
                    "SOCKS5 usernames and passwords are 1 to 255 bytes",
                ));
            }
        }
        if let (Protocol::Http, Some(c)) = (self.protocol, &self.auth) {
            // Basic auth cannot carry a colon in the username.
            if c.username.contains(':') {
                return Err(Error::InvalidConfig(
                    "an HTTP proxy username cannot contain ':'",
                ));
            }
        }
        Ok(())
    }
}

/// `host` as it goes before `:port`: IPv6 addresses in brackets.
pub(crate) fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Parses `[scheme://][user[:pass]@]host[:port][/]`.
fn parse_url(url: &str) -> std::result::Result<Server, &'static str> {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let (protocol, default_port) = match scheme.to_ascii_lowercase().as_str() {
        "http" => (Protocol::Http, default_port(false)),
        "socks5" | "socks5h" => (Protocol::Socks5, 1080),
        "https" => return Err("https:// proxies (TLS to the proxy) are not supported"),
        _ => return Err("proxy URL scheme must be http, socks5 or socks5h"),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '?', '#']) {
        return Err("a proxy URL has no path, query or fragment");
    }
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let auth = match userinfo {
        Some(u) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let username = percent_decode(user).ok_or("bad percent-encoding in the proxy URL")?;
            let password = percent_decode(pass).ok_or("bad percent-encoding in the proxy URL")?;
            if username.is_empty() {
                return Err("proxy URL has credentials without a username");
            }
            Some(Credentials { username, password })
        }
        None => None,
    };
    let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
        let (host, after) = inner
            .split_once(']')
            .ok_or("unclosed '[' in the proxy URL")?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("bad IPv6 address in the proxy URL");
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or("junk after ']' in the proxy URL")?,
            ),
        };
        (host, port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err("bad port in the proxy URL"),
        },
    };
    let host_ok = !host.is_empty()
        && (host.parse::<IpAddr>().is_ok()
            || host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')));
    if !host_ok {
        return Err("bad host in the proxy URL");
    }
    Ok(Server {
        protocol,
        host: host.to_owned(),
        port,
        auth,
    })
}

/// Decodes `%XX` escapes; `None` for a broken escape or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(p: &Proxy) -> &Server {
        match &p.0 {
            Kind::Server(s) => s,
            other => panic!("not a server: {:?}", Proxy(other.clone())),
        }
    }

    #[test]
    fn urls_parse_with_defaults_and_credentials() {
        let p = Proxy::http("http://proxy.corp:3128");
        let s = server(&p);
        assert_eq!(
            (s.protocol, s.host.as_str(), s.port),
            (Protocol::Http, "proxy.corp", 3128)
        );
        assert!(s.auth.is_none());

        let p = Proxy::from_url("proxy.corp");
        assert_eq!(server(&p).port, 80);

        let p = Proxy::from_url("socks5h://us%40er:p%3Ass@[::1]/");
        let s = server(&p);
        assert_eq!(
            (s.protocol, s.host.as_str(), s.port),
            (Protocol::Socks5, "::1", 1080)
        );
        let c = s.auth.as_ref().unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("us@er", "p:ss")
        );

        let p = Proxy::socks5("127.0.0.1:9050");
        assert_eq!(server(&p).port, 9050);
        assert_eq!(server(&p).protocol, Protocol::Socks5);
    }

    #[test]
    fn bad_urls_are_invalid_not_panics() {
        for url in [
            "",
            "http://",
            "http://host:0",
            "http://host:99999",
            "http://host:port",
            "http://host/path",
            "http://a b",
            "http://[::1",
            "http://[nope]:80",
            "http://::1:80",
            "http://:pw@host",
            "http://u%zz@host",
            "https://proxy:443",
            "socks4://proxy",
        ] {
            assert!(
                matches!(
                    Proxy::from_url(url).validate(),
                    Err(Error::InvalidConfig(_))
                ),
                "{url}"
            );
        }
        assert!(Proxy::http("socks5://h").validate().is_err());
        assert!(Proxy::socks5("http://h").validate().is_err());
        assert!(Proxy::from_env().credentials("a", "b").validate().is_err());
    }

    #[test]
    fn socks_credentials_must_fit_rfc_1929() {
        assert!(Proxy::socks5("h").credentials("u", "").validate().is_err());
        let long = "x".repeat(256);
        assert!(
            Proxy::socks5("h")
                .credentials(&long, "p")
                .validate()
                .is_err()
        );
        assert!(Proxy::socks5("h").credentials("u", "p").validate().is_ok());
        // HTTP basic auth allows an empty password.
        assert!(Proxy::http("h").credentials("u", "").validate().is_ok());
        assert!(Proxy::http("h").credentials("a:b", "p").validate().is_err());
    }

    #[test]
    fn debug_hides_the_password() {
        let p = Proxy::from_url("http://alice:hunter2@[::1]:8080");
        let shown = format!("{p:?}");
        assert_eq!(shown, "Proxy(http://alice:***@[::1]:8080)");
    }
}
