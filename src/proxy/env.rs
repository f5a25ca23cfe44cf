//! Proxy selection from environment variables, as curl and most HTTP
//! clients read them. Pure: the variables come from a lookup function.

use std::net::IpAddr;

use http::Uri;

use crate::handshake::client::target::{is_secure, port_or_default};

/// The first variable among `names` that is set and not blank.
fn first<F: Fn(&str) -> Option<String>>(var: &F, names: &[&str]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| var(n))
        .map(|v| v.trim().to_owned())
        .find(|v| !v.is_empty())
}

/// The proxy URL the environment names for `target`, if any: the scheme's
/// variable (`https_proxy` for `wss://`, `http_proxy` for `ws://`) or
/// `all_proxy`, lowercase first, unless `no_proxy` matches the target.
/// Uppercase `HTTP_PROXY` is skipped when `REQUEST_METHOD` is set.
pub(super) fn select<F: Fn(&str) -> Option<String>>(target: &Uri, var: F) -> Option<String> {
    let secure = is_secure(target);
    // Under CGI (RFC 3875 §4.1.18) each request header `X` reaches the
    // program as `HTTP_X`, so a request's `Proxy:` header sets HTTP_PROXY
    // and would choose the proxy the server connects through ("httpoxy",
    // CVE-2016-5385). REQUEST_METHOD is set for every CGI request. No
    // header can set the other names. reqwest and Go's net/http do not use
    // HTTP_PROXY under CGI either; curl never reads it in upper case.
    let cgi = var("REQUEST_METHOD").is_some();
    let names: &[&str] = match (secure, cgi) {
        (true, _) => &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"],
        (false, false) => &["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"],
        (false, true) => &["http_proxy", "all_proxy", "ALL_PROXY"],
    };
    let url = first(&var, names)?;
    let host = target.host()?;
    // A bad port is refused (InvalidUrl) before any proxy is asked for; here
    // it only means there is no port to match NO_PROXY entries against.
    let port = port_or_default(target).ok()?;
    if let Some(list) = first(&var, &["no_proxy", "NO_PROXY"]) {
        if no_proxy_matches(&list, host, port) {
            return None;
        }
    }
    Some(url)
}

/// Whether `host:port` is exempt under a `NO_PROXY` list.
pub(super) fn no_proxy_matches(list: &str, host: &str, port: u16) -> bool {
    let host = unbracket(host).trim_end_matches('.').to_ascii_lowercase();
    let host_ip = host.parse::<IpAddr>().ok();
    list.split([',', ' ', '\t'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| entry_matches(entry, &host, host_ip, port))
}

fn entry_matches(entry: &str, host: &str, host_ip: Option<IpAddr>, port: u16) -> bool {
    if entry == "*" {
        return true;
    }
    if let Some((net, bits)) = entry.split_once('/') {
        return match (
            host_ip,
            unbracket(net).parse::<IpAddr>(),
            bits.parse::<u8>(),
        ) {
            (Some(ip), Ok(net), Ok(bits)) => in_range(ip, net, bits),
            _ => false,
        };
    }
    let (name, entry_port) = split_port(entry);
    if entry_port.is_some_and(|p| p != port) {
        return false;
    }
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if let Ok(ip) = name.parse::<IpAddr>() {
        return host_ip == Some(ip);
    }
    // "example.com", ".example.com" and "*.example.com" all cover the
    // domain and its subdomains, as in curl.
    let domain = name.trim_start_matches("*.").trim_start_matches('.');
    !domain.is_empty()
        && (host == domain
            || host
                .strip_suffix(domain)
                .is_some_and(|prefix| prefix.ends_with('.')))
}

/// Splits `host:port`, `[v6]:port`, `[v6]`, a bare IPv6 address or a name.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(inner) = entry.strip_prefix('[') {
        return match inner.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':').and_then(|p| p.parse().ok())),
            None => (entry, None),
        };
    }
    match entry.rsplit_once(':') {
        // More than one colon without brackets: an IPv6 address, no port.
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(p) => (host, Some(p)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Whether `ip` lies in `net/bits`.
fn in_range(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::config::Proxy;
    use std::collections::HashMap;

    fn pick(vars: &[(&str, &str)], url: &str) -> Proxy {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Proxy::from_env_vars(&url.parse().unwrap(), |k| env.get(k).cloned())
    }

    #[test]
    fn scheme_picks_the_variable() {
        let vars = [
            ("HTTPS_PROXY", "http://secure:1"),
            ("HTTP_PROXY", "http://plain:2"),
            ("ALL_PROXY", "socks5://all:3"),
        ];
        assert_eq!(pick(&vars, "wss://x/"), Proxy::http("http://secure:1"));
        assert_eq!(pick(&vars, "ws://x/"), Proxy::http("http://plain:2"));
        assert_eq!(pick(&vars[2..], "ws://x/"), Proxy::socks5("socks5://all:3"));
        assert_eq!(
            pick(&vars[2..], "wss://x/"),
            Proxy::socks5("socks5://all:3")
        );
        assert!(pick(&[], "wss://x/").is_none());
    }

    #[test]
    fn lower_case_wins_and_blank_is_unset() {
        let vars = [("https_proxy", "low:1"), ("HTTPS_PROXY", "up:2")];
        assert_eq!(pick(&vars, "wss://x/"), Proxy::http("low:1"));
        let vars = [("https_proxy", "  "), ("HTTPS_PROXY", "up:2")];
        assert_eq!(pick(&vars, "wss://x/"), Proxy::http("up:2"));
        let vars = [("all_proxy", ""), ("ALL_PROXY", "")];
        assert!(pick(&vars, "ws://x/").is_none());
    }

    #[test]
    fn upper_case_http_proxy_is_ignored_under_cgi() {
        // Under CGI a request's `Proxy:` header becomes HTTP_PROXY
        // ("httpoxy"): a client could pick the server's proxy.
        let attacker = ("HTTP_PROXY", "http://attacker:8080");
        let cgi = ("REQUEST_METHOD", "GET");
        assert!(pick(&[attacker, cgi], "ws://x/").is_none());
        // What a header cannot set is still followed.
        let fallback = ("ALL_PROXY", "http://all:3");
        assert_eq!(
            pick(&[attacker, cgi, fallback], "ws://x/"),
            Proxy::http("http://all:3")
        );
        let lower = ("http_proxy", "http://mine:1");
        assert_eq!(
            pick(&[attacker, cgi, lower], "ws://x/"),
            Proxy::http("http://mine:1")
        );
        let secure = ("HTTPS_PROXY", "http://secure:2");
        assert_eq!(
            pick(&[cgi, secure], "wss://x/"),
            Proxy::http("http://secure:2")
        );
        // Outside CGI, HTTP_PROXY is followed as before.
        assert_eq!(
            pick(&[attacker], "ws://x/"),
            Proxy::http("http://attacker:8080")
        );
    }

    #[test]
    fn no_proxy_exempts_matching_hosts() {
        let p = "http://proxy:3128";
        let base = [
            ("ALL_PROXY", p),
            (
                "no_proxy",
                "localhost, .internal,example.org:8443 10.0.0.0/8,[::1],fe80::/10",
            ),
        ];
        let proxied = Proxy::http(p);
        for (url, direct) in [
            ("ws://localhost/", true),
            ("ws://LOCALHOST./", true),
            ("ws://a.localhost/", true),
            ("ws://notlocalhost/", false),
            ("ws://db.internal/", true),
            ("ws://internal/", true),
            ("ws://internal.com/", false),
            ("wss://example.org:8443/", true),
            ("wss://example.org/", false),
            ("ws://10.20.30.40/", true),
            ("ws://11.0.0.1/", false),
            ("ws://[::1]:9000/", true),
            ("ws://[fe80::1]/", true),
            ("ws://[2001:db8::1]/", false),
            ("ws://example.com/", false),
        ] {
            let got = pick(&base, url);
            if direct {
                assert!(got.is_none(), "{url}: {got:?}");
            } else {
                assert_eq!(got, proxied, "{url}");
            }
        }
        assert!(pick(&[("ALL_PROXY", p), ("NO_PROXY", "*")], "ws://anything/").is_none());
        // Lower case wins for NO_PROXY too.
        let vars = [
            ("ALL_PROXY", p),
            ("no_proxy", "a.test"),
            ("NO_PROXY", "b.test"),
        ];
        assert_eq!(pick(&vars, "ws://b.test/"), proxied);
    }

    #[test]
    fn odd_entries_do_not_panic_or_match() {
        for list in [
            ".",
            "*.",
            "/",
            "10.0.0.0/99",
            "10.0.0.0/x",
            "[",
            "[::1",
            ":",
            "a:b:c",
        ] {
            assert!(!no_proxy_matches(list, "example.com", 80), "{list}");
        }
        assert!(no_proxy_matches("0.0.0.0/0", "1.2.3.4", 80));
        assert!(no_proxy_matches("::/0", "::2", 80));
    }

    #[test]
    fn invalid_env_proxy_is_reported_not_ignored() {
        let got = pick(&[("HTTPS_PROXY", "ftp://nope")], "wss://x/");
        assert!(got.validate().is_err());
    }
}
