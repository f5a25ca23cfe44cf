//! Negotiating permessage-deflate ([RFC 7692] §7.1) in
//! `Sec-WebSocket-Extensions`, without I/O.
//!
//! - A client sends [`offer`], then checks the server's answer with
//!   [`check_response`].
//! - A server picks the first acceptable offer with [`negotiate`] and puts
//!   the header it returns in its `101` response; when no offer can be met
//!   it answers without the extension (a polite decline, not an error).
//!
//! ```
//! use wavesock::http::HeaderMap;
//! use wavesock::DeflateConfig;
//! use wavesock::handshake::extensions::{check_response, negotiate, offer};
//!
//! let client = DeflateConfig::default().server_no_context_takeover(true);
//! let server = DeflateConfig::default().server_max_window_bits(Some(10));
//!
//! let mut request = HeaderMap::new();
//! request.insert("sec-websocket-extensions", offer(&client));
//! let (agreed, answer) = negotiate(&server, &request).expect("an offer was acceptable");
//! assert_eq!(agreed.server_max_window_bits, 10);
//! assert!(agreed.server_no_context_takeover);
//!
//! let mut response = HeaderMap::new();
//! response.insert("sec-websocket-extensions", answer);
//! let seen_by_client = check_response(&client, &response)?.expect("accepted");
//! assert_eq!(seen_by_client, agreed);
//! # Ok::<(), wavesock::HandshakeError>(())
//! ```
//!
//! [RFC 7692]: https://www.rfc-editor.org/rfc/rfc7692

use std::borrow::Cow;

use http::HeaderMap;
use http::header::{HeaderValue, SEC_WEBSOCKET_EXTENSIONS};

use crate::handshake::HandshakeError;
use crate::handshake::is_token;
use crate::proto::deflate::{DeflateConfig, DeflateParams, DeflatePolicy};

/// The extension's registered name.
pub const PERMESSAGE_DEFLATE: &str = "permessage-deflate";

const SERVER_NO_CONTEXT_TAKEOVER: &str = "server_no_context_takeover";
const CLIENT_NO_CONTEXT_TAKEOVER: &str = "client_no_context_takeover";
const SERVER_MAX_WINDOW_BITS: &str = "server_max_window_bits";
const CLIENT_MAX_WINDOW_BITS: &str = "client_max_window_bits";

/// One element of an extension list: its name and parameters, values
/// unquoted. `None` when the element does not follow RFC 6455 §9.1.
type Element<'a> = Option<(&'a str, Vec<(&'a str, Option<Cow<'a, str>>)>)>;

/// Splits `s` at `sep` where it is not inside a quoted string.
fn split_unquoted(s: &str, sep: u8) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A parameter value: a token, or a quoted string unescaped.
fn param_value(v: &str) -> Option<Cow<'_, str>> {
    if is_token(v) {
        return Some(Cow::Borrowed(v));
    }
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

fn parse_element(element: &str) -> Element<'_> {
    let mut parts = split_unquoted(element, b';').into_iter().map(str::trim);
    let name = parts.next().filter(|n| is_token(n))?;
    let mut params = Vec::new();
    for p in parts {
        let (key, value) = match p.split_once('=') {
            Some((k, v)) => (k.trim(), Some(param_value(v.trim())?)),
            None => (p, None),
        };
        if !is_token(key) {
            return None;
        }
        params.push((key, value));
    }
    Some((name, params))
}

/// Every element of every `Sec-WebSocket-Extensions` line, in order. Empty
/// list items are skipped; a line that is not text gives one bad element.
fn elements(headers: &HeaderMap) -> impl Iterator<Item = Element<'_>> {
    headers
        .get_all(SEC_WEBSOCKET_EXTENSIONS)
        .into_iter()
        .flat_map(|line| match line.to_str() {
            Ok(s) => split_unquoted(s, b',')
                .into_iter()
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(parse_element)
                .collect::<Vec<_>>(),
            Err(_) => vec![None],
        })
}

/// Window bits as RFC 7692 writes them: 8 to 15, no leading zero.
fn window_bits(v: &str) -> Option<u8> {
    match v.as_bytes() {
        [b'8'] => Some(8),
        [b'9'] => Some(9),
        [b'1', d @ b'0'..=b'5'] => Some(10 + (d - b'0')),
        _ => None,
    }
}

/// The parameters of one permessage-deflate element, each at most once.
#[derive(Debug, Default)]
struct Params {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
    /// `Some(None)`: present without a value.
    client_max_window_bits: Option<Option<u8>>,
}

/// Reads the parameters; `None` for an unknown or repeated parameter or a
/// bad value. Window bits need a value unless `client_bits_bare` allows
/// `client_max_window_bits` without one (in offers).
fn read_params(params: &[(&str, Option<Cow<'_, str>>)], client_bits_bare: bool) -> Option<Params> {
    let mut p = Params::default();
    let mut seen = [false; 4];
    for (key, value) in params {
        let value = value.as_deref();
        let slot = [
            SERVER_NO_CONTEXT_TAKEOVER,
            CLIENT_NO_CONTEXT_TAKEOVER,
            SERVER_MAX_WINDOW_BITS,
            CLIENT_MAX_WINDOW_BITS,
        ]
        .iter()
        .position(|k| k.eq_ignore_ascii_case(key))?;
        if std::mem::replace(&mut seen[slot], true) {
            return None;
        }
        match (slot, value) {
            (0, None) => p.server_no_context_takeover = true,
            (1, None) => p.client_no_context_takeover = true,
            (2, Some(v)) => p.server_max_window_bits = Some(window_bits(v)?),
            (3, Some(v)) => p.client_max_window_bits = Some(Some(window_bits(v)?)),
            (3, None) if client_bits_bare => p.client_max_window_bits = Some(None),
            _ => return None,
        }
    }
    Some(p)
}

/// The `Sec-WebSocket-Extensions` value a client sends for `config`.
///
/// `client_max_window_bits` is always offered (with the configured value,
/// or bare), so the server may ask for a smaller client window.
///
/// ```
/// use wavesock::DeflateConfig;
/// use wavesock::handshake::extensions::offer;
///
/// assert_eq!(offer(&DeflateConfig::default()), "permessage-deflate; client_max_window_bits");
/// let c = DeflateConfig::default().server_no_context_takeover(true).server_max_window_bits(Some(10));
/// assert_eq!(
///     offer(&c),
///     "permessage-deflate; client_max_window_bits; server_max_window_bits=10; server_no_context_takeover"
/// );
/// ```
pub fn offer(config: &DeflateConfig) -> HeaderValue {
    let config = &with_policy(config, None);
    let mut s = String::from(PERMESSAGE_DEFLATE);
    match config.client_max_window_bits {
        Some(b) => s.push_str(&format!("; {CLIENT_MAX_WINDOW_BITS}={b}")),
        None => s.push_str(&format!("; {CLIENT_MAX_WINDOW_BITS}")),
    }
    if config.client_no_context_takeover {
        s.push_str(&format!("; {CLIENT_NO_CONTEXT_TAKEOVER}"));
    }
    if let Some(b) = config.server_max_window_bits {
        s.push_str(&format!("; {SERVER_MAX_WINDOW_BITS}={b}"));
    }
    if config.server_no_context_takeover {
        s.push_str(&format!("; {SERVER_NO_CONTEXT_TAKEOVER}"));
    }
    HeaderValue::from_str(&s).expect("tokens and digits are a valid header value")
}

/// `config` with what its policy asks of the negotiation written into its
/// parameters, for a server answering `offer` or (`None`) a client making
/// its offer: the shared policy resets both contexts; a dedicated one
/// limits the server's window, and a server limits the client's when the
/// client offered `client_max_window_bits`, or else asks it to reset its
/// context, so that its window is never kept. A dedicated client offers
/// `client_max_window_bits` bare: it compresses within its own window
/// whatever the server allows ([`deflate::pair`](crate::proto::deflate::pair)
/// takes the smaller), and a value in the offer would make a server that
/// answers a larger one fail the handshake (RFC 7692 §7.1.2.2). A
/// client's hint that it resets its context anyway is taken by the
/// policies that keep no more than they must.
fn with_policy(config: &DeflateConfig, offer: Option<&Params>) -> DeflateConfig {
    let mut c = config.clone();
    let min = |b: Option<u8>, ours: u8| Some(b.map_or(ours, |b| b.min(ours)));
    if offer.is_some_and(|o| o.client_no_context_takeover)
        && config.policy != DeflatePolicy::Takeover
    {
        c.client_no_context_takeover = true;
    }
    if config.policy == DeflatePolicy::Shared {
        c.server_no_context_takeover = true;
        c.client_no_context_takeover = true;
    } else if let Some((server, client)) = config.policy.windows() {
        c.server_max_window_bits = min(c.server_max_window_bits, server);
        match offer {
            Some(o) if o.client_max_window_bits.is_some() => {
                c.client_max_window_bits = min(c.client_max_window_bits, client);
            }
            Some(_) => c.client_no_context_takeover = true,
            None => {}
        }
    }
    c
}

/// The parameters a server agrees to for one offer, or `None` if it
/// cannot meet it.
fn accept_offer(config: &DeflateConfig, offer: &Params) -> Option<DeflateParams> {
    let config = &with_policy(config, Some(offer));
    let client_max_window_bits = match (config.client_max_window_bits, offer.client_max_window_bits)
    {
        (Some(ours), Some(theirs)) => ours.min(theirs.unwrap_or(15)),
        // We need the client's window bounded and it cannot say it is.
        (Some(_), None) => return None,
        (None, Some(theirs)) => theirs.unwrap_or(15),
        (None, None) => 15,
    };
    let mut params = DeflateParams::default();
    params.server_no_context_takeover =
        config.server_no_context_takeover || offer.server_no_context_takeover;
    params.client_no_context_takeover = config.client_no_context_takeover;
    params.server_max_window_bits = config
        .server_max_window_bits
        .unwrap_or(15)
        .min(offer.server_max_window_bits.unwrap_or(15));
    params.client_max_window_bits = client_max_window_bits;
    Some(params)
}

/// The response value that states `params` to the client.
fn response_value(params: &DeflateParams, offer: &Params) -> HeaderValue {
    let mut s = String::from(PERMESSAGE_DEFLATE);
    if params.server_no_context_takeover {
        s.push_str(&format!("; {SERVER_NO_CONTEXT_TAKEOVER}"));
    }
    if params.client_no_context_takeover {
        s.push_str(&format!("; {CLIENT_NO_CONTEXT_TAKEOVER}"));
    }
    // A requested limit must be answered; a smaller one of ours is stated.
    if offer.server_max_window_bits.is_some() || params.server_max_window_bits < 15 {
        s.push_str(&format!(
            "; {SERVER_MAX_WINDOW_BITS}={}",
            params.server_max_window_bits
        ));
    }
    // Only allowed when the client offered the parameter.
    if offer.client_max_window_bits.is_some() && params.client_max_window_bits < 15 {
        s.push_str(&format!(
            "; {CLIENT_MAX_WINDOW_BITS}={}",
            params.client_max_window_bits
        ));
    }
    HeaderValue::from_str(&s).expect("tokens and digits are a valid header value")
}

/// A server's choice among the client's offers in `request`'s
/// `Sec-WebSocket-Extensions` headers: the first permessage-deflate offer
/// it can meet, in the client's order of preference, with the header value
/// to answer with.
///
/// Offers with unknown, repeated or malformed parameters are skipped, as
/// are offers that cannot meet `config` (see [`DeflateConfig`]); other
/// extensions are ignored. `None` means: answer without the extension.
pub fn negotiate(
    config: &DeflateConfig,
    request: &HeaderMap,
) -> Option<(DeflateParams, HeaderValue)> {
    elements(request)
        .flatten()
        .filter(|(name, _)| name.eq_ignore_ascii_case(PERMESSAGE_DEFLATE))
        .find_map(|(_, params)| {
            let offer = read_params(&params, true)?;
            let agreed = accept_offer(config, &offer)?;
            Some((agreed, response_value(&agreed, &offer)))
        })
}

fn refuse(reason: &'static str) -> HandshakeError {
    HandshakeError::BadHeader {
        name: "Sec-WebSocket-Extensions",
        reason,
    }
}

/// Checks a server's `Sec-WebSocket-Extensions` answer to [`offer`]`(config)`.
///
/// `Ok(None)`: the server declined compression. An answer that is
/// malformed, names another extension or more than one, repeats or adds
/// parameters, or does not grant what was asked (a window limit, the
/// server resetting its context) fails the handshake, as RFC 7692 §7.1
/// requires.
pub fn check_response(
    config: &DeflateConfig,
    response: &HeaderMap,
) -> Result<Option<DeflateParams>, HandshakeError> {
    let config = &with_policy(config, None);
    let mut all = elements(response);
    let Some(first) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(refuse("more than one extension where one was offered"));
    }
    let (name, params) = first.ok_or(refuse("malformed"))?;
    if !name.eq_ignore_ascii_case(PERMESSAGE_DEFLATE) {
        return Err(refuse("the server chose an extension that was not offered"));
    }
    let p = read_params(&params, false).ok_or(refuse(
        "unknown, repeated or malformed permessage-deflate parameter",
    ))?;
    if config.server_no_context_takeover && !p.server_no_context_takeover {
        return Err(refuse(
            "server_no_context_takeover was asked for and not granted",
        ));
    }
    let server_max_window_bits = match (config.server_max_window_bits, p.server_max_window_bits) {
        (Some(asked), Some(got)) if got <= asked => got,
        (Some(_), _) => {
            return Err(refuse(
                "server_max_window_bits was asked for and not granted",
            ));
        }
        (None, got) => got.unwrap_or(15),
    };
    let client_max_window_bits = match (config.client_max_window_bits, p.client_max_window_bits) {
        (Some(ours), Some(Some(got))) if got > ours => {
            return Err(refuse("client_max_window_bits above the value offered"));
        }
        (ours, got) => got.flatten().unwrap_or(15).min(ours.unwrap_or(15)),
    };
    let mut params = DeflateParams::default();
    params.server_no_context_takeover = p.server_no_context_takeover;
    // What we offered is a promise, whether or not the server repeats it.
    params.client_no_context_takeover =
        p.client_no_context_takeover || config.client_no_context_takeover;
    params.server_max_window_bits = server_max_window_bits;
    params.client_max_window_bits = client_max_window_bits;
    Ok(Some(params))
}

#[cfg(test)]
#[path = "extensions_tests.rs"]
mod tests;
