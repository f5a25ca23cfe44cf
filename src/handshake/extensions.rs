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
mod tests {
    use super::*;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(SEC_WEBSOCKET_EXTENSIONS, HeaderValue::from_str(l).unwrap());
        }
        h
    }

    fn params(snct: bool, cnct: bool, smwb: u8, cmwb: u8) -> DeflateParams {
        let mut p = DeflateParams::default();
        p.server_no_context_takeover = snct;
        p.client_no_context_takeover = cnct;
        p.server_max_window_bits = smwb;
        p.client_max_window_bits = cmwb;
        p
    }

    #[test]
    fn server_negotiation_table() {
        let d = DeflateConfig::default();
        type Case<'a> = (
            &'a str,
            DeflateConfig,
            &'a [&'a str],
            Option<(&'a str, DeflateParams)>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "bare offer",
                d.clone(),
                &["permessage-deflate"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
            (
                "name is case-insensitive",
                d.clone(),
                &["Permessage-Deflate"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
            (
                "server_no_context_takeover asked",
                d.clone(),
                &["permessage-deflate; server_no_context_takeover"],
                Some((
                    "permessage-deflate; server_no_context_takeover",
                    params(true, false, 15, 15),
                )),
            ),
            (
                "client_no_context_takeover hint is not echoed",
                d.clone(),
                &["permessage-deflate; client_no_context_takeover"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
            (
                "we ask the client to reset",
                d.clone().client_no_context_takeover(true),
                &["permessage-deflate"],
                Some((
                    "permessage-deflate; client_no_context_takeover",
                    params(false, true, 15, 15),
                )),
            ),
            (
                "we reset ours unasked",
                d.clone().server_no_context_takeover(true),
                &["permessage-deflate"],
                Some((
                    "permessage-deflate; server_no_context_takeover",
                    params(true, false, 15, 15),
                )),
            ),
            (
                "server_max_window_bits asked",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=10"],
                Some((
                    "permessage-deflate; server_max_window_bits=10",
                    params(false, false, 10, 15),
                )),
            ),
            (
                "server_max_window_bits=8 asked",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=8"],
                Some((
                    "permessage-deflate; server_max_window_bits=8",
                    params(false, false, 8, 15),
                )),
            ),
            (
                "server_max_window_bits=15 asked is answered",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=15"],
                Some((
                    "permessage-deflate; server_max_window_bits=15",
                    params(false, false, 15, 15),
                )),
            ),
            (
                "our smaller window is stated",
                d.clone().server_max_window_bits(Some(9)),
                &["permessage-deflate; server_max_window_bits=12"],
                Some((
                    "permessage-deflate; server_max_window_bits=9",
                    params(false, false, 9, 15),
                )),
            ),
            (
                "our window unasked",
                d.clone().server_max_window_bits(Some(11)),
                &["permessage-deflate"],
                Some((
                    "permessage-deflate; server_max_window_bits=11",
                    params(false, false, 11, 15),
                )),
            ),
            (
                "quoted value",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=\"10\""],
                Some((
                    "permessage-deflate; server_max_window_bits=10",
                    params(false, false, 10, 15),
                )),
            ),
            (
                "bare client_max_window_bits, no limit of ours",
                d.clone(),
                &["permessage-deflate; client_max_window_bits"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
            (
                "client states its window",
                d.clone(),
                &["permessage-deflate; client_max_window_bits=10"],
                Some((
                    "permessage-deflate; client_max_window_bits=10",
                    params(false, false, 15, 10),
                )),
            ),
            (
                "we limit the client's window",
                d.clone().client_max_window_bits(Some(9)),
                &["permessage-deflate; client_max_window_bits"],
                Some((
                    "permessage-deflate; client_max_window_bits=9",
                    params(false, false, 15, 9),
                )),
            ),
            (
                "smaller of both client limits",
                d.clone().client_max_window_bits(Some(12)),
                &["permessage-deflate; client_max_window_bits=10"],
                Some((
                    "permessage-deflate; client_max_window_bits=10",
                    params(false, false, 15, 10),
                )),
            ),
            (
                "we need a client limit it cannot give",
                d.clone().client_max_window_bits(Some(9)),
                &["permessage-deflate"],
                None,
            ),
            (
                "all four",
                d.clone(),
                &[
                    "permessage-deflate; client_max_window_bits=9; client_no_context_takeover; server_max_window_bits=9; server_no_context_takeover",
                ],
                Some((
                    "permessage-deflate; server_no_context_takeover; server_max_window_bits=9; client_max_window_bits=9",
                    params(true, false, 9, 9),
                )),
            ),
            (
                "autobahn 13.3 offer",
                d.clone(),
                &[
                    "permessage-deflate; client_max_window_bits; client_no_context_takeover; server_max_window_bits=9",
                ],
                Some((
                    "permessage-deflate; server_max_window_bits=9",
                    params(false, false, 9, 15),
                )),
            ),
            ("no offer", d.clone(), &[], None),
            (
                "other extension only",
                d.clone(),
                &["x-webkit-deflate-frame"],
                None,
            ),
            (
                "other extension first",
                d.clone(),
                &["foo; bar=1, permessage-deflate"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
            (
                "unknown parameter skips the offer",
                d.clone(),
                &["permessage-deflate; foo"],
                None,
            ),
            (
                "unknown parameter, then a good offer",
                d.clone(),
                &["permessage-deflate; foo, permessage-deflate; server_no_context_takeover"],
                Some((
                    "permessage-deflate; server_no_context_takeover",
                    params(true, false, 15, 15),
                )),
            ),
            (
                "several offers: first acceptable wins",
                d.clone().client_max_window_bits(Some(10)),
                &[
                    "permessage-deflate; server_max_window_bits=9, permessage-deflate; client_max_window_bits, permessage-deflate",
                ],
                Some((
                    "permessage-deflate; client_max_window_bits=10",
                    params(false, false, 15, 10),
                )),
            ),
            (
                "offers across repeated headers",
                d.clone(),
                &[
                    "permessage-deflate; bogus",
                    "permessage-deflate; server_max_window_bits=12",
                ],
                Some((
                    "permessage-deflate; server_max_window_bits=12",
                    params(false, false, 12, 15),
                )),
            ),
            (
                "duplicate parameter",
                d.clone(),
                &["permessage-deflate; server_no_context_takeover; server_no_context_takeover"],
                None,
            ),
            (
                "duplicate window bits",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=10; server_max_window_bits=10"],
                None,
            ),
            (
                "duplicate in other case",
                d.clone(),
                &["permessage-deflate; client_max_window_bits; CLIENT_MAX_WINDOW_BITS"],
                None,
            ),
            (
                "window bits 7",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=7"],
                None,
            ),
            (
                "window bits 16",
                d.clone(),
                &["permessage-deflate; client_max_window_bits=16"],
                None,
            ),
            (
                "window bits leading zero",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=09"],
                None,
            ),
            (
                "window bits not a number",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=ten"],
                None,
            ),
            (
                "server_max_window_bits needs a value",
                d.clone(),
                &["permessage-deflate; server_max_window_bits"],
                None,
            ),
            (
                "no_context_takeover takes no value",
                d.clone(),
                &["permessage-deflate; server_no_context_takeover=1"],
                None,
            ),
            (
                "client_no_context_takeover takes no value",
                d.clone(),
                &["permessage-deflate; client_no_context_takeover=\"\""],
                None,
            ),
            (
                "empty value",
                d.clone(),
                &["permessage-deflate; server_max_window_bits="],
                None,
            ),
            (
                "unterminated quote",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=\"10"],
                None,
            ),
            (
                "comma inside quotes",
                d.clone(),
                &["permessage-deflate; x=\"a,b\", permessage-deflate"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
            (
                "empty list items",
                d.clone(),
                &[", ,permessage-deflate,"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
            ("empty parameter", d.clone(), &["permessage-deflate;"], None),
            (
                "spaces around =",
                d.clone(),
                &["permessage-deflate ; server_max_window_bits = 10"],
                Some((
                    "permessage-deflate; server_max_window_bits=10",
                    params(false, false, 10, 15),
                )),
            ),
            (
                "shared policy, Chromium's offer",
                d.clone().policy(DeflatePolicy::Shared),
                &["permessage-deflate; client_max_window_bits"],
                Some((
                    "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
                    params(true, true, 15, 15),
                )),
            ),
            (
                "dedicated 4k, Chromium's offer: both windows shrunk",
                d.clone().policy(DeflatePolicy::Dedicated(4096)),
                &["permessage-deflate; client_max_window_bits"],
                Some((
                    "permessage-deflate; server_max_window_bits=11; client_max_window_bits=11",
                    params(false, false, 11, 11),
                )),
            ),
            (
                "dedicated 4k, a client that cannot be limited resets instead",
                d.clone().policy(DeflatePolicy::Dedicated(4096)),
                &["permessage-deflate"],
                Some((
                    "permessage-deflate; client_no_context_takeover; server_max_window_bits=11",
                    params(false, true, 11, 15),
                )),
            ),
            (
                "dedicated 3k takes a smaller window asked for, and the reset hint",
                d.clone().policy(DeflatePolicy::Dedicated(3072)),
                &[
                    "permessage-deflate; server_max_window_bits=9; client_no_context_takeover; client_max_window_bits=12",
                ],
                Some((
                    "permessage-deflate; client_no_context_takeover; server_max_window_bits=9; client_max_window_bits=10",
                    params(false, true, 9, 10),
                )),
            ),
            (
                "dedicated keeps a smaller configured window",
                d.clone()
                    .policy(DeflatePolicy::Dedicated(64 << 10))
                    .server_max_window_bits(Some(10)),
                &["permessage-deflate; client_max_window_bits"],
                Some((
                    "permessage-deflate; server_max_window_bits=10",
                    params(false, false, 10, 15),
                )),
            ),
            (
                "takeover ignores the reset hint, as before",
                d.clone().policy(DeflatePolicy::Takeover),
                &["permessage-deflate; client_no_context_takeover"],
                Some(("permessage-deflate", params(false, false, 15, 15))),
            ),
        ];
        for (what, config, lines, want) in cases {
            let got = negotiate(&config, &headers(lines));
            let got = got.as_ref().map(|(p, v)| (v.to_str().unwrap(), *p));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn client_response_table() {
        let d = DeflateConfig::default();
        type Case<'a> = (
            &'a str,
            DeflateConfig,
            &'a [&'a str],
            Result<Option<DeflateParams>, ()>,
        );
        let cases: Vec<Case<'_>> = vec![
            ("declined", d.clone(), &[], Ok(None)),
            (
                "accepted bare",
                d.clone(),
                &["permessage-deflate"],
                Ok(Some(params(false, false, 15, 15))),
            ),
            (
                "server resets unasked",
                d.clone(),
                &["permessage-deflate; server_no_context_takeover"],
                Ok(Some(params(true, false, 15, 15))),
            ),
            (
                "server asks us to reset",
                d.clone(),
                &["permessage-deflate; client_no_context_takeover"],
                Ok(Some(params(false, true, 15, 15))),
            ),
            (
                "our promise holds without echo",
                d.clone().client_no_context_takeover(true),
                &["permessage-deflate"],
                Ok(Some(params(false, true, 15, 15))),
            ),
            (
                "server limits our window",
                d.clone(),
                &["permessage-deflate; client_max_window_bits=9"],
                Ok(Some(params(false, false, 15, 9))),
            ),
            (
                "server limits our window to 8",
                d.clone(),
                &["permessage-deflate; client_max_window_bits=8"],
                Ok(Some(params(false, false, 15, 8))),
            ),
            (
                "server states its window unasked",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=10"],
                Ok(Some(params(false, false, 10, 15))),
            ),
            (
                "asked window granted",
                d.clone().server_max_window_bits(Some(10)),
                &["permessage-deflate; server_max_window_bits=10"],
                Ok(Some(params(false, false, 10, 15))),
            ),
            (
                "asked window granted smaller",
                d.clone().server_max_window_bits(Some(10)),
                &["permessage-deflate; server_max_window_bits=9"],
                Ok(Some(params(false, false, 9, 15))),
            ),
            (
                "asked window exceeded",
                d.clone().server_max_window_bits(Some(10)),
                &["permessage-deflate; server_max_window_bits=11"],
                Err(()),
            ),
            (
                "asked window ignored",
                d.clone().server_max_window_bits(Some(10)),
                &["permessage-deflate"],
                Err(()),
            ),
            (
                "asked reset ignored",
                d.clone().server_no_context_takeover(true),
                &["permessage-deflate"],
                Err(()),
            ),
            (
                "asked reset granted",
                d.clone().server_no_context_takeover(true),
                &["permessage-deflate; server_no_context_takeover"],
                Ok(Some(params(true, false, 15, 15))),
            ),
            (
                "our window kept when server is silent",
                d.clone().client_max_window_bits(Some(10)),
                &["permessage-deflate"],
                Ok(Some(params(false, false, 15, 10))),
            ),
            (
                "client window above our offer",
                d.clone().client_max_window_bits(Some(10)),
                &["permessage-deflate; client_max_window_bits=12"],
                Err(()),
            ),
            (
                "bare client_max_window_bits in a response",
                d.clone(),
                &["permessage-deflate; client_max_window_bits"],
                Err(()),
            ),
            (
                "unknown parameter",
                d.clone(),
                &["permessage-deflate; foo=1"],
                Err(()),
            ),
            (
                "duplicate parameter",
                d.clone(),
                &["permessage-deflate; server_no_context_takeover; server_no_context_takeover"],
                Err(()),
            ),
            (
                "bad window",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=16"],
                Err(()),
            ),
            (
                "two elements",
                d.clone(),
                &["permessage-deflate, permessage-deflate"],
                Err(()),
            ),
            (
                "two lines",
                d.clone(),
                &["permessage-deflate", "permessage-deflate"],
                Err(()),
            ),
            (
                "other extension",
                d.clone(),
                &["x-webkit-deflate-frame"],
                Err(()),
            ),
            (
                "malformed",
                d.clone(),
                &["permessage-deflate; server_max_window_bits=\"1"],
                Err(()),
            ),
        ];
        for (what, config, lines, want) in cases {
            let got = check_response(&config, &headers(lines)).map_err(|_| ());
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn every_offer_we_make_is_accepted_by_our_server() {
        for snct in [false, true] {
            for cnct in [false, true] {
                for smwb in [None, Some(8), Some(12), Some(15)] {
                    for cmwb in [None, Some(8), Some(11)] {
                        let client = DeflateConfig::default()
                            .server_no_context_takeover(snct)
                            .client_no_context_takeover(cnct)
                            .server_max_window_bits(smwb)
                            .client_max_window_bits(cmwb);
                        let mut req = HeaderMap::new();
                        req.insert(SEC_WEBSOCKET_EXTENSIONS, offer(&client));
                        let server = DeflateConfig::default().client_max_window_bits(Some(13));
                        let (agreed, answer) = negotiate(&server, &req).expect("accepted");
                        let mut resp = HeaderMap::new();
                        resp.insert(SEC_WEBSOCKET_EXTENSIONS, answer);
                        let seen = check_response(&client, &resp).unwrap().unwrap();
                        assert_eq!(
                            seen.server_no_context_takeover,
                            agreed.server_no_context_takeover
                        );
                        assert_eq!(seen.server_max_window_bits, agreed.server_max_window_bits);
                        assert_eq!(seen.client_max_window_bits, agreed.client_max_window_bits);
                        assert!(seen.client_max_window_bits <= cmwb.unwrap_or(15).min(13));
                        assert_eq!(seen.server_max_window_bits, smwb.unwrap_or(15));
                    }
                }
            }
        }
    }

    #[test]
    fn a_client_offers_what_its_policy_asks() {
        let d = DeflateConfig::default;
        let offered = |c: DeflateConfig| offer(&c).to_str().unwrap().to_owned();
        assert_eq!(
            offered(d().policy(DeflatePolicy::Shared)),
            "permessage-deflate; client_max_window_bits; client_no_context_takeover; server_no_context_takeover"
        );
        // Its own window bare: a server may answer any, the compressor
        // keeps to its own.
        assert_eq!(
            offered(d().policy(DeflatePolicy::Dedicated(4096))),
            "permessage-deflate; client_max_window_bits; server_max_window_bits=11"
        );
        // A server that allows the client more than the policy keeps is
        // accepted (Autobahn's 13.4 cases answer 15).
        let mut resp = HeaderMap::new();
        resp.insert(
            SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_static(
                "permessage-deflate; server_max_window_bits=11; client_max_window_bits=15",
            ),
        );
        let seen = check_response(&d().policy(DeflatePolicy::Dedicated(4096)), &resp);
        assert_eq!(seen.unwrap(), Some(params(false, false, 11, 15)));
    }

    #[test]
    fn every_policy_agrees_with_every_policy() {
        let policies = [
            DeflatePolicy::Takeover,
            DeflatePolicy::Shared,
            DeflatePolicy::Dedicated(1024),
            DeflatePolicy::Dedicated(3072),
            DeflatePolicy::Dedicated(16 << 10),
            DeflatePolicy::Dedicated(256 << 10),
        ];
        for ours in policies {
            for theirs in policies {
                let client = DeflateConfig::default().policy(ours);
                let server = DeflateConfig::default().policy(theirs);
                let mut req = HeaderMap::new();
                req.insert(SEC_WEBSOCKET_EXTENSIONS, offer(&client));
                let (agreed, answer) = negotiate(&server, &req).expect("accepted");
                let mut resp = HeaderMap::new();
                resp.insert(SEC_WEBSOCKET_EXTENSIONS, answer);
                let seen = check_response(&client, &resp).unwrap().unwrap();
                // A client's promise to reset holds whether or not the
                // server repeats it.
                let mut promised = agreed;
                promised.client_no_context_takeover |= seen.client_no_context_takeover;
                assert_eq!(seen, promised, "{ours:?} to {theirs:?}");
                // Each side's policy holds whatever the other's, as that
                // side sees the agreement: nothing kept with the shared
                // policy, windows within a dedicated one's.
                for (policy, view, server_side) in [(ours, seen, false), (theirs, agreed, true)] {
                    let (s, c) = (view.server_max_window_bits, view.client_max_window_bits);
                    let (s_reset, c_reset) = (
                        view.server_no_context_takeover,
                        view.client_no_context_takeover,
                    );
                    match policy.windows() {
                        // A client's own window is its compressor's to
                        // keep small (see `deflate::pair`), not the
                        // negotiation's.
                        Some((ws, wc)) if server_side => {
                            assert!(s <= ws || s_reset, "{policy:?} {view:?}");
                            assert!(c <= wc || c_reset, "{policy:?} {view:?}");
                        }
                        Some((ws, _)) => assert!(s <= ws || s_reset, "{policy:?} {view:?}"),
                        None if policy == DeflatePolicy::Shared => {
                            assert!(s_reset && c_reset, "{policy:?} {view:?}");
                        }
                        None => {}
                    }
                }
            }
        }
    }
}
