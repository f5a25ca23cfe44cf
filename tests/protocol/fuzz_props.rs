//! The fuzz targets' properties as property tests, so that `cargo test`
//! runs them without a fuzzer. The properties of the targets themselves are
//! written once, in `fuzz/src/lib.rs` (included below as `props`): here
//! proptest makes their inputs (structured ones, and byte edits of the seed
//! corpus). The stream-level properties below go through the whole stack:
//!
//! - A *stream* of frames, valid and invalid, written in random chunks into a
//!   `WebSocketStream` over an in-memory duplex: it never panics, valid input
//!   comes out as sent, an invalid frame fails the connection with the right
//!   close code (also sent to the peer) after delivering everything before it.
//! - Text split at random fragment and read boundaries: accepted exactly
//!   when `std::str::from_utf8` accepts the whole.
//! - The handshake request parser and checker under random header mutations,
//!   against a model of RFC 6455 §4.2.1.
//!
//! The unit tests next to the codec (`arbitrary_bytes_never_panic`) and the
//! UTF-8 validator (`agrees_with_std_on_random_bytes`) cover those pieces
//! alone; these go through the whole stack.

use std::time::Duration;

use bytes::BytesMut;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::Decoder;
use wavesock::handshake::derive_accept_key;

use crate::props;
use wavesock::handshake::server::{check_request, error_response, parse_request, write_response};
use wavesock::{
    CloseCode, CloseFrame, Config, Error, Message, Role, WebSocketCodec, WebSocketStream,
};

const CASES: u32 = 256;
const MAX_FRAME: usize = 256;
const MAX_MESSAGE: usize = 512;

fn server_config() -> Config {
    Config::default()
        .max_frame_size(MAX_FRAME)
        .max_message_size(MAX_MESSAGE)
}

// ---------------------------------------------------------------- frames

/// Appends one frame as a client sends it: masked with `key`, or not.
fn frame(out: &mut Vec<u8>, b0: u8, payload: &[u8], key: Option<[u8; 4]>) {
    out.push(b0);
    let mask_bit = if key.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => out.push(mask_bit | n as u8),
        n @ 126..=0xFFFF => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match key {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
}

/// A different mask for every frame, so masking is exercised at every offset.
fn key(seed: u32, n: usize) -> [u8; 4] {
    seed.wrapping_mul(2_654_435_761)
        .wrapping_add(n as u32)
        .rotate_left(n as u32 % 32)
        .to_be_bytes()
}

/// What the client sends between message boundaries.
#[derive(Debug, Clone)]
enum Unit {
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    /// A text or binary message cut into fragments at `cuts`, with a ping
    /// between its first two fragments when `ping_inside` is set.
    Data {
        text: bool,
        payload: Vec<u8>,
        cuts: Vec<usize>,
        ping_inside: Option<Vec<u8>>,
    },
}

fn control_payload() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=125)
}

fn unit() -> impl Strategy<Value = Unit> {
    let data = (
        prop_oneof![
            "\\PC{0,100}".prop_map(|s| (true, s.into_bytes())),
            proptest::collection::vec(any::<u8>(), 0..=MAX_MESSAGE).prop_map(|b| (false, b)),
        ],
        proptest::collection::vec(0usize..MAX_MESSAGE, 0..4),
        proptest::option::of(control_payload()),
    )
        .prop_map(|((text, payload), cuts, ping_inside)| Unit::Data {
            text,
            payload,
            cuts,
            ping_inside,
        });
    prop_oneof![
        1 => control_payload().prop_map(Unit::Ping),
        1 => control_payload().prop_map(Unit::Pong),
        4 => data,
    ]
}

/// The fragments of a payload: cut at `cuts`, and never over `MAX_FRAME`.
fn fragments(payload: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (payload.len() + 1)).collect();
    at.push(payload.len());
    at.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for end in at {
        while end - start > MAX_FRAME {
            out.push(payload[start..start + MAX_FRAME].to_vec());
            start += MAX_FRAME;
        }
        if end > start || out.is_empty() {
            out.push(payload[start..end].to_vec());
        }
        start = end;
    }
    out
}

/// Encodes `units`; returns the bytes and the messages the server should
/// deliver, each with the offset where its last byte ends.
fn encode_units(units: &[Unit], seed: u32, wire: &mut Vec<u8>) -> Vec<(Message, usize)> {
    let mut expected = Vec::new();
    let mut n = 0;
    let mut next_key = || {
        n += 1;
        Some(key(seed, n))
    };
    for unit in units {
        match unit {
            Unit::Ping(p) => {
                frame(wire, 0x89, p, next_key());
                expected.push((Message::Ping(p.clone().into()), wire.len()));
            }
            Unit::Pong(p) => {
                frame(wire, 0x8A, p, next_key());
                expected.push((Message::Pong(p.clone().into()), wire.len()));
            }
            Unit::Data {
                text,
                payload,
                cuts,
                ping_inside,
            } => {
                let parts = fragments(payload, cuts);
                let last = parts.len() - 1;
                for (i, part) in parts.iter().enumerate() {
                    let opcode = match (i, text) {
                        (0, true) => 0x1,
                        (0, false) => 0x2,
                        _ => 0x0,
                    };
                    let fin = if i == last { 0x80 } else { 0 };
                    frame(wire, fin | opcode, part, next_key());
                    if let (0, Some(p), true) = (i, ping_inside, last > 0) {
                        frame(wire, 0x89, p, next_key());
                        expected.push((Message::Ping(p.clone().into()), wire.len()));
                    }
                }
                let msg = if *text {
                    Message::text(String::from_utf8(payload.clone()).expect("generated text"))
                } else {
                    Message::binary(payload.clone())
                };
                expected.push((msg, wire.len()));
            }
        }
    }
    expected
}

/// What one run of the server over a byte stream produced.
#[derive(Debug)]
struct Outcome {
    delivered: Vec<Message>,
    error: Option<Error>,
    /// Everything the server wrote back, decoded as a client would.
    replies: Vec<Message>,
}

/// Feeds `wire` to a server-side `WebSocketStream` in chunks of the given
/// sizes (cycled) through a duplex of `capacity` bytes, and reads what it
/// answers, until the server's stream ends.
fn serve(wire: Vec<u8>, chunks: Vec<usize>, capacity: usize) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (client, server) = tokio::io::duplex(capacity);
        let (mut rd, mut wr) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            let mut rest = &wire[..];
            for size in chunks.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let n = (*size).clamp(1, rest.len());
                // The server may stop reading after an error; that is fine.
                if wr.write_all(&rest[..n]).await.is_err() {
                    return;
                }
                rest = &rest[n..];
            }
            let _ = wr.shutdown().await;
        });
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            let _ = rd.read_to_end(&mut out).await;
            out
        });

        let run = async {
            let mut ws =
                WebSocketStream::from_raw_socket(server, Role::Server, server_config()).unwrap();
            let mut delivered = Vec::new();
            let mut error = None;
            while let Some(msg) = futures_util::StreamExt::next(&mut ws).await {
                match msg {
                    Ok(m) => delivered.push(m),
                    Err(e) => {
                        assert!(error.is_none(), "a second error after {error:?}: {e:?}");
                        error = Some(e);
                    }
                }
            }
            (delivered, error)
        };
        let (delivered, error) = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("the server's stream ends once its input does");
        writer.abort();
        let raw = reader.await.unwrap();

        let mut codec = WebSocketCodec::new(Role::Client, &Config::default());
        let mut buf = BytesMut::from(&raw[..]);
        let mut replies = Vec::new();
        while let Some(m) = codec
            .decode(&mut buf)
            .expect("the server writes valid frames")
        {
            replies.push(m);
        }
        // A connection that ended without a close frame (end of input or a
        // transport error) is dropped with whatever it still owed the peer,
        // possibly mid-frame, as a dropped TCP connection would be; every
        // other ending writes out what was queued.
        assert!(
            buf.is_empty() || matches!(error, Some(Error::Io(_))),
            "the server left a frame half-written ({} bytes) and ended with {error:?}",
            buf.len()
        );
        Outcome {
            delivered,
            error,
            replies,
        }
    })
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        Just(vec![1]),
        proptest::collection::vec(1usize..64, 1..16),
        proptest::collection::vec(1usize..2048, 1..4),
    ]
}

/// Every ping delivered is answered with a pong carrying its payload, in order.
fn pongs_answer_pings(out: &Outcome) {
    let pings: Vec<_> = out
        .delivered
        .iter()
        .filter_map(|m| match m {
            Message::Ping(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    let pongs: Vec<_> = out
        .replies
        .iter()
        .filter_map(|m| match m {
            Message::Pong(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(pongs, pings);
}

/// An invalid frame and the close code it must be refused with.
#[derive(Debug, Clone)]
enum Bad {
    ReservedBits(u8),
    ReservedOpcode(u8),
    Unmasked,
    LongControl,
    FragmentedPing,
    ContinuationFirst,
    NewMessageMidFragments,
    CloseOneByte,
    CloseCode(u16),
    CloseReasonNotUtf8,
    TextNotUtf8(usize),
    FrameTooLarge(u64),
    LengthTopBit,
    MessageTooLarge,
}

fn bad() -> impl Strategy<Value = Bad> {
    prop_oneof![
        (1u8..8).prop_map(Bad::ReservedBits),
        prop_oneof![3u8..8, 11u8..16].prop_map(Bad::ReservedOpcode),
        Just(Bad::Unmasked),
        Just(Bad::LongControl),
        Just(Bad::FragmentedPing),
        Just(Bad::ContinuationFirst),
        Just(Bad::NewMessageMidFragments),
        Just(Bad::CloseOneByte),
        prop_oneof![
            0u16..1000,
            Just(1004),
            Just(1005),
            Just(1006),
            1015u16..3000,
            5000u16..
        ]
        .prop_map(Bad::CloseCode),
        Just(Bad::CloseReasonNotUtf8),
        (0usize..100).prop_map(Bad::TextNotUtf8),
        (MAX_FRAME as u64 + 1..1 << 62).prop_map(Bad::FrameTooLarge),
        Just(Bad::LengthTopBit),
        Just(Bad::MessageTooLarge),
    ]
}

impl Bad {
    fn encode(&self, wire: &mut Vec<u8>) -> CloseCode {
        let k = Some([0xA5, 0x5A, 0x0F, 0xF0]);
        match self {
            Bad::ReservedBits(rsv) => frame(wire, 0x82 | rsv << 4, b"x", k),
            Bad::ReservedOpcode(op) => frame(wire, 0x80 | op, b"", k),
            Bad::Unmasked => frame(wire, 0x82, b"plain", None),
            Bad::LongControl => frame(wire, 0x89, &[7; 126], k),
            Bad::FragmentedPing => frame(wire, 0x09, b"", k),
            Bad::ContinuationFirst => frame(wire, 0x80, b"more", k),
            Bad::NewMessageMidFragments => {
                frame(wire, 0x01, b"first half", k);
                frame(wire, 0x82, b"a new message", k);
            }
            Bad::CloseOneByte => frame(wire, 0x88, &[3], k),
            Bad::CloseCode(code) => frame(wire, 0x88, &code.to_be_bytes(), k),
            Bad::CloseReasonNotUtf8 => frame(wire, 0x88, &[0x03, 0xE8, b'o', 0xFF], k),
            Bad::TextNotUtf8(at) => {
                let mut text = "déjà vu ".repeat(12).into_bytes();
                let i = at % text.len();
                text[i] = 0xFF; // never valid anywhere in UTF-8
                frame(wire, 0x81, &text, k);
            }
            Bad::FrameTooLarge(len) => {
                wire.extend_from_slice(&[0x82, 0x80 | 127]);
                wire.extend_from_slice(&len.to_be_bytes());
                wire.extend_from_slice(&[1, 2, 3, 4]);
            }
            Bad::LengthTopBit => {
                wire.extend_from_slice(&[0x82, 0x80 | 127]);
                wire.extend_from_slice(&(1u64 << 63 | 5).to_be_bytes());
            }
            Bad::MessageTooLarge => {
                // Each fragment within max_frame_size, together over max_message_size.
                frame(wire, 0x02, &[1; MAX_FRAME], k);
                frame(wire, 0x00, &[2; MAX_FRAME], k);
                frame(wire, 0x80, &[3], k);
            }
        }
        match self {
            Bad::TextNotUtf8(_) | Bad::CloseReasonNotUtf8 => CloseCode::INVALID_PAYLOAD,
            Bad::FrameTooLarge(_) | Bad::MessageTooLarge => CloseCode::MESSAGE_TOO_BIG,
            _ => CloseCode::PROTOCOL_ERROR,
        }
    }
}

fn close_frame(wire: &mut Vec<u8>) -> Message {
    let mut payload = 1000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"bye");
    frame(wire, 0x88, &payload, Some([9, 8, 7, 6]));
    Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
}

// ------------------------------------------------------------- handshake

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn base_headers() -> Vec<(String, String)> {
    [
        ("Host", "example.com"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", KEY),
        ("Sec-WebSocket-Version", "13"),
        ("Origin", "http://example.com"),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect()
}

/// Changes to a valid request that keep it parseable HTTP.
#[derive(Debug, Clone)]
enum Mutation {
    Drop(usize),
    Duplicate(usize),
    Swap(usize, usize),
    Upper(usize),
    Lower(usize),
    Extra(String, String),
    Value(usize, String),
    Method(&'static str),
    Http10,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let i = 0usize..8;
    prop_oneof![
        i.clone().prop_map(Mutation::Drop),
        i.clone().prop_map(Mutation::Duplicate),
        (i.clone(), i.clone()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        i.clone().prop_map(Mutation::Upper),
        i.clone().prop_map(Mutation::Lower),
        ("X-[A-Za-z0-9-]{1,12}", "[ -~]{0,40}").prop_map(|(n, v)| Mutation::Extra(n, v)),
        (i, "[!-~]([ -~]{0,30}[!-~])?").prop_map(|(i, v)| Mutation::Value(i, v)),
        prop_oneof![Just("POST"), Just("PUT"), Just("HEAD"), Just("get")]
            .prop_map(Mutation::Method),
        Just(Mutation::Http10),
    ]
}

struct RawRequest {
    method: String,
    version: &'static str,
    headers: Vec<(String, String)>,
}

impl RawRequest {
    fn apply(&mut self, m: &Mutation) {
        let len = self.headers.len();
        match m {
            Mutation::Drop(i) if len > 0 => {
                self.headers.remove(i % len);
            }
            Mutation::Duplicate(i) if len > 0 => {
                let h = self.headers[i % len].clone();
                self.headers.push(h);
            }
            Mutation::Swap(a, b) if len > 0 => self.headers.swap(a % len, b % len),
            Mutation::Upper(i) if len > 0 => self.headers[i % len].0.make_ascii_uppercase(),
            Mutation::Lower(i) if len > 0 => self.headers[i % len].0.make_ascii_lowercase(),
            Mutation::Extra(n, v) => self.headers.push((n.clone(), v.clone())),
            Mutation::Value(i, v) if len > 0 => self.headers[i % len].1 = v.clone(),
            Mutation::Method(method) => self.method = method.to_string(),
            Mutation::Http10 => self.version = "HTTP/1.0",
            _ => {}
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{} /chat?room=1 {}\r\n", self.method, self.version);
        for (n, v) in &self.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.into_bytes()
    }

    fn values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn lists(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// RFC 6455 §4.2.1, in the order the checks are made: the accept key,
    /// or the HTTP status the request is refused with.
    fn expected(&self) -> Result<String, u16> {
        if self.method != "GET" {
            return Err(405);
        }
        if self.version != "HTTP/1.1" {
            return Err(400);
        }
        // One Host field, a host and an optional port (RFC 9112 §3.2).
        let one_host = matches!(self.values("Host")[..], [h] if is_host(h));
        if !one_host || !self.lists("Upgrade", "websocket") || !self.lists("Connection", "upgrade")
        {
            return Err(400);
        }
        // One field (RFC 6455 §4.3: a single version), and 13.
        match self.values("Sec-WebSocket-Version")[..] {
            ["13"] => {}
            [_, _, ..] => return Err(400),
            _ => return Err(426),
        }
        match self.values("Sec-WebSocket-Key")[..] {
            [key] if is_key(key) => Ok(derive_accept_key(key.as_bytes())),
            _ => Err(400),
        }
    }
}

/// RFC 3986's `host [ ":" port ]`, the host not empty and the port a TCP
/// port's digits (or none after the colon): what a `Host` field holds.
fn is_host(v: &str) -> bool {
    let in_reg_name = |c: char| c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=".contains(c);
    let port_ok = |p: &str| {
        p.chars().all(|c| c.is_ascii_digit()) && (p.is_empty() || p.parse::<u16>().is_ok())
    };
    if let Some(rest) = v.strip_prefix('[') {
        let Some((literal, after)) = rest.split_once(']') else {
            return false;
        };
        let future = literal
            .strip_prefix(['v', 'V'])
            .and_then(|f| f.split_once('.'))
            .is_some_and(|(ver, tail)| {
                !ver.is_empty()
                    && ver.chars().all(|c| c.is_ascii_hexdigit())
                    && !tail.is_empty()
                    && tail.chars().all(|c| in_reg_name(c) || c == ':')
            });
        let literal_ok = future || literal.parse::<std::net::Ipv6Addr>().is_ok();
        return literal_ok && (after.is_empty() || after.strip_prefix(':').is_some_and(port_ok));
    }
    let (host, port) = v.split_once(':').unwrap_or((v, ""));
    // Percent-escapes: `%` and two hex digits.
    let mut escapes_ok = true;
    let bytes = host.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%' {
            escapes_ok &= bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
        }
    }
    !host.is_empty()
        && escapes_ok
        && host.chars().all(|c| in_reg_name(c) || c == '%')
        && port_ok(port)
}

/// A base64 encoding of 16 bytes: 22 base64 digits and "==".
fn is_key(k: &str) -> bool {
    const DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = k.as_bytes();
    b.len() == 24
        && b[22..] == *b"=="
        && b[..22].iter().all(|c| DIGITS.as_bytes().contains(c))
        // The last digit carries 2 bits of data and 4 zero bits.
        && DIGITS.find(b[21] as char).is_some_and(|v| v % 16 == 0)
}

// ----------------------------------------------------------------- tests

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Valid frames (fragmented, with pings between fragments, masked with
    /// changing keys) in any chunking come out exactly as sent; pings are
    /// answered and the close is echoed.
    #[test]
    fn valid_stream_round_trips_in_any_chunks(
        units in proptest::collection::vec(unit(), 0..8),
        seed in any::<u32>(),
        chunks in chunk_sizes(),
        capacity in prop_oneof![Just(1usize), 2usize..64, Just(64 << 10)],
    ) {
        let mut wire = Vec::new();
        let mut expected: Vec<Message> =
            encode_units(&units, seed, &mut wire).into_iter().map(|(m, _)| m).collect();
        expected.push(close_frame(&mut wire));
        let out = serve(wire, chunks, capacity);
        prop_assert!(out.error.is_none(), "{:?}", out.error);
        prop_assert_eq!(&out.delivered, &expected);
        pongs_answer_pings(&out);
        prop_assert_eq!(out.replies.last(), expected.last(), "the close is echoed");
    }

    /// An invalid frame after valid ones: everything before it is delivered,
    /// then one error with the close code RFC 6455 calls for, which is also
    /// the last frame the server sends.
    #[test]
    fn invalid_frame_fails_with_its_close_code_after_the_valid_prefix(
        units in proptest::collection::vec(unit(), 0..6),
        at in any::<prop::sample::Index>(),
        bad in bad(),
        seed in any::<u32>(),
        chunks in chunk_sizes(),
        capacity in prop_oneof![Just(1usize), 2usize..64, Just(64 << 10)],
    ) {
        let split = at.index(units.len() + 1);
        let mut wire = Vec::new();
        let before: Vec<Message> = encode_units(&units[..split], seed, &mut wire)
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        let code = bad.encode(&mut wire);
        encode_units(&units[split..], seed ^ 1, &mut wire);
        close_frame(&mut wire);

        let out = serve(wire, chunks, capacity);
        prop_assert_eq!(&out.delivered, &before);
        let err = out.error.as_ref().expect("the invalid frame is an error");
        prop_assert_eq!(err.close_code(), Some(code), "{}", err);
        pongs_answer_pings(&out);
        let sent = match out.replies.last() {
            Some(Message::Close(Some(f))) => f.code,
            other => panic!("expected our close frame last, got {other:?}"),
        };
        prop_assert_eq!(sent, code);
    }

    /// Random corruption of a valid stream (flipped bits, cut short, garbage
    /// appended): never a panic or a hang; what was complete before the
    /// damage is delivered intact; any error is either the end of input or
    /// carries a close code, which was sent to the peer.
    #[test]
    fn damaged_stream_never_panics_and_errors_carry_a_close_code(
        units in proptest::collection::vec(unit(), 1..6),
        seed in any::<u32>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        garbage in proptest::collection::vec(any::<u8>(), 0..32),
        chunks in chunk_sizes(),
    ) {
        let mut wire = Vec::new();
        let expected = encode_units(&units, seed, &mut wire);
        close_frame(&mut wire);
        let mut first_damage = wire.len();
        for (i, bit) in &flips {
            let i = i.index(wire.len());
            wire[i] ^= 1 << bit;
            first_damage = first_damage.min(i);
        }
        if let Some(c) = cut {
            let c = c.index(wire.len());
            wire.truncate(c);
            first_damage = first_damage.min(c);
        }
        wire.extend_from_slice(&garbage);

        let out = serve(wire, chunks, 64);
        let intact: Vec<&Message> = expected
            .iter()
            .take_while(|(_, end)| *end <= first_damage)
            .map(|(m, _)| m)
            .collect();
        prop_assert!(out.delivered.len() >= intact.len(), "lost {:?}", &intact[out.delivered.len()..]);
        for (got, want) in out.delivered.iter().zip(&intact) {
            prop_assert_eq!(got, *want);
        }
        if let Some(err) = &out.error {
            match err.close_code() {
                Some(code) => {
                    let sent = match out.replies.last() {
                        Some(Message::Close(Some(f))) => f.code,
                        other => panic!("expected our close frame last, got {other:?}"),
                    };
                    prop_assert_eq!(sent, code);
                }
                None => prop_assert!(
                    matches!(err, Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
                    "{err:?}"
                ),
            }
        }
    }

    /// The `frame_decoder` property (fuzz/src/lib.rs: whole, chunked and
    /// bytewise decoding agree, limits refuse on the header, close codes
    /// match) on valid frames, damaged ones, or noise.
    #[test]
    fn decoder_agrees_with_itself_fed_whole_or_in_chunks(
        wire in prop_oneof![
            (proptest::collection::vec(unit(), 0..5), any::<u32>(),
             proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..3))
                .prop_map(|(units, seed, flips)| {
                    let mut wire = Vec::new();
                    encode_units(&units, seed, &mut wire);
                    for (i, bit) in flips {
                        if !wire.is_empty() {
                            let i = i.index(wire.len());
                            wire[i] ^= 1 << bit;
                        }
                    }
                    wire
                }),
            proptest::collection::vec(any::<u8>(), 0..600),
        ],
        sizes in proptest::collection::vec(1u8..40, 0..8),
        limits in (any::<u8>(), any::<u8>()),
        client in any::<bool>(),
    ) {
        // The fuzz target's input: flags, limits, chunk sizes, the wire.
        let mut input = vec![u8::from(client) | (sizes.len() as u8) << 1, limits.0, limits.1];
        input.extend_from_slice(&sizes);
        input.extend_from_slice(&wire);
        props::frame_decoder(&input);
    }

    /// Text cut into fragments and reads at random points: accepted exactly
    /// when std accepts the whole text; refused with 1007 otherwise.
    #[test]
    fn text_is_accepted_exactly_when_std_accepts_it(
        bytes in prop_oneof![
            "\\PC{0,80}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..120),
            ("\\PC{1,80}", any::<prop::sample::Index>(), any::<u8>()).prop_map(|(s, i, b)| {
                let mut v = s.into_bytes();
                let i = i.index(v.len());
                v[i] = b;
                v
            }),
        ],
        cuts in proptest::collection::vec(0usize..400, 0..5),
        seed in any::<u32>(),
        chunks in chunk_sizes(),
    ) {
        let mut wire = Vec::new();
        let parts = fragments(&bytes, &cuts);
        let last = parts.len() - 1;
        for (i, part) in parts.iter().enumerate() {
            let b0 = if i == 0 { 0x01 } else { 0x00 } | if i == last { 0x80 } else { 0 };
            frame(&mut wire, b0, part, Some(key(seed, i)));
        }
        close_frame(&mut wire);
        let out = serve(wire, chunks, 64);
        match std::str::from_utf8(&bytes) {
            Ok(s) => {
                prop_assert!(out.error.is_none(), "{:?}", out.error);
                prop_assert_eq!(out.delivered.first(), Some(&Message::text(s)));
            }
            Err(_) => {
                prop_assert!(matches!(out.error, Some(Error::InvalidUtf8)), "{:?}", out.error);
                prop_assert!(out.delivered.is_empty());
            }
        }
    }

    /// Structured header mutations: the parser reads the request back, and
    /// the checker accepts or refuses it as the RFC model says, with the
    /// model's status; a refusal's HTTP answer is well-formed.
    #[test]
    fn handshake_checks_follow_the_rfc_under_header_mutations(
        mutations in proptest::collection::vec(mutation(), 0..5),
        trailing in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut raw = RawRequest { method: "GET".into(), version: "HTTP/1.1", headers: base_headers() };
        for m in &mutations {
            raw.apply(m);
        }
        let head = raw.bytes();
        let mut buf = head.clone();
        buf.extend_from_slice(&trailing);

        let (req, len) = parse_request(&buf, 64)
            .expect("well-formed HTTP parses")
            .expect("the head is complete");
        prop_assert_eq!(len, head.len(), "bytes after the head are not consumed");
        for cut in [0, 1, head.len() / 2, head.len() - 1] {
            prop_assert!(matches!(parse_request(&head[..cut], 64), Ok(None)));
        }
        prop_assert_eq!(req.uri().path(), "/chat");
        prop_assert_eq!(req.uri().query(), Some("room=1"));

        match (check_request(&req), raw.expected()) {
            (Ok(accept), Ok(want)) => prop_assert_eq!(accept, want),
            (Err(e), Err(status)) => {
                prop_assert_eq!(e.status().map(|s| s.as_u16()), Some(status), "{}", e);
                let resp = error_response(&e).expect("refusals have a response");
                let mut out = Vec::new();
                write_response(&resp, resp.body(), &mut out);
                let mut headers = [httparse::EMPTY_HEADER; 16];
                let mut parsed = httparse::Response::new(&mut headers);
                let head_len = match parsed.parse(&out) {
                    Ok(httparse::Status::Complete(n)) => n,
                    other => panic!("refusal is not HTTP: {other:?}"),
                };
                prop_assert_eq!(parsed.code, Some(status));
                prop_assert_eq!(out.len() - head_len, resp.body().len());
            }
            (got, want) => panic!("checker said {got:?}, model says {want:?} for {:?}", String::from_utf8_lossy(&head)),
        }
    }

    /// Arbitrary bytes spliced into a valid request: the parser never
    /// panics, never claims a head longer than its input, agrees with
    /// itself on the head alone, and whatever it accepts the checker judges
    /// with an HTTP status or an accept key.
    #[test]
    fn handshake_parser_survives_byte_damage(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        max_headers in 1usize..16,
    ) {
        let mut raw = RawRequest { method: "GET".into(), version: "HTTP/1.1", headers: base_headers() }.bytes();
        for (at, byte, insert) in &edits {
            let i = at.index(raw.len());
            if *insert { raw.insert(i, *byte) } else { raw[i] = *byte }
        }
        if let Some(c) = cut {
            raw.truncate(c.index(raw.len() + 1));
        }
        if let Ok(Some((req, len))) = parse_request(&raw, max_headers) {
            prop_assert!(len <= raw.len());
            let again = parse_request(&raw[..len], max_headers).unwrap().unwrap();
            prop_assert_eq!(again.1, len);
            prop_assert_eq!(again.0.headers(), req.headers());
        }
        // And the `handshake` target's property, on the same bytes.
        raw.insert(0, 0);
        props::handshake(&raw);
    }
}

// ------------------------------------------------------------------ hub

/// The `hub` target's input: limits of `MAX_FRAME` and `MAX_MESSAGE`
/// (flags bits 2-3 = 1), the valid request in front, `wire` cut at `sizes`
/// (at most 15), a pipe of 1 + 16 * `pipe` bytes.
fn hub_input(wire: &[u8], sizes: &[u8], pipe: u8) -> Vec<u8> {
    let sizes = &sizes[..sizes.len().min(15)];
    let mut input = vec![((sizes.len() as u8) << 4) | (1 << 2), pipe];
    input.extend_from_slice(sizes);
    input.extend_from_slice(wire);
    input
}

/// The data messages a hub's handler received.
fn hub_messages(out: &props::HubOutcome) -> Vec<Message> {
    out.seen
        .messages
        .iter()
        .map(|(text, bytes)| {
            if *text {
                Message::text(String::from_utf8(bytes.clone()).unwrap())
            } else {
                Message::binary(bytes.clone())
            }
        })
        .collect()
}

/// The close code of the hub's last frame, which must be a close frame.
fn hub_close_code(out: &props::HubOutcome) -> u16 {
    match out.frames.last() {
        Some((0x88, p)) if p.len() >= 2 => u16::from_be_bytes([p[0], p[1]]),
        other => panic!("expected the hub's close frame last, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES / 2))]

    /// The `hub` property on valid frames in any chunking: every message
    /// reaches the handler as sent and is echoed (checked by the property),
    /// every ping is seen, the close is echoed, and the connection ends
    /// cleanly, its close callback called once.
    #[test]
    fn hub_property_on_valid_streams(
        units in proptest::collection::vec(unit(), 0..8),
        seed in any::<u32>(),
        sizes in proptest::collection::vec(any::<u8>(), 0..16),
        pipe in prop_oneof![Just(0u8), any::<u8>()],
    ) {
        let mut wire = Vec::new();
        let expected = encode_units(&units, seed, &mut wire);
        let pings = expected.iter().filter(|(m, _)| m.is_ping()).count();
        let data: Vec<Message> =
            expected.into_iter().map(|(m, _)| m).filter(|m| m.is_data()).collect();
        close_frame(&mut wire);
        let out = props::hub_run(&hub_input(&wire, &sizes, pipe));
        prop_assert_eq!(&hub_messages(&out), &data);
        prop_assert_eq!(out.seen.pings, pings);
        prop_assert_eq!(
            &out.seen.closed,
            &[props::HubEnd { error: false, code: None, peer_close: true }]
        );
        prop_assert_eq!(hub_close_code(&out), 1000, "the close is echoed");
    }

    /// The `hub` property with an invalid frame after valid ones: what came
    /// before it reaches the handler, and the hub closes with the code
    /// RFC 6455 calls for, the handler told the same.
    #[test]
    fn hub_property_on_an_invalid_frame(
        units in proptest::collection::vec(unit(), 0..6),
        at in any::<prop::sample::Index>(),
        bad in bad(),
        seed in any::<u32>(),
        sizes in proptest::collection::vec(any::<u8>(), 0..16),
        pipe in prop_oneof![Just(0u8), any::<u8>()],
    ) {
        let split = at.index(units.len() + 1);
        let mut wire = Vec::new();
        let before: Vec<Message> = encode_units(&units[..split], seed, &mut wire)
            .into_iter()
            .map(|(m, _)| m)
            .filter(|m| m.is_data())
            .collect();
        let code = bad.encode(&mut wire);
        encode_units(&units[split..], seed ^ 1, &mut wire);
        close_frame(&mut wire);
        let out = props::hub_run(&hub_input(&wire, &sizes, pipe));
        prop_assert_eq!(&hub_messages(&out), &before);
        prop_assert_eq!(out.seen.closed.len(), 1);
        prop_assert_eq!(out.seen.closed[0].code, Some(code.0));
        prop_assert_eq!(hub_close_code(&out), code.0);
    }
}

// --------------------------------------------------- the fuzz properties

/// A seed corpus file of `target`, picked by `pick`.
fn seed_file(target: &str, pick: prop::sample::Index) -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    std::fs::read(pick.get(&files)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Every fuzz target's property on a seed corpus file with random byte
    /// edits (overwrite, insert, delete) and a random cut: a small
    /// mutation fuzzer that runs in `cargo test`.
    #[test]
    fn fuzz_properties_hold_on_edited_seeds(
        target in any::<prop::sample::Index>(),
        pick in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let (name, property) = *target.get(props::TARGETS);
        let mut data = seed_file(name, pick);
        for (at, byte, how) in &edits {
            let i = at.index(data.len() + 1);
            match how {
                0 if i < data.len() => data[i] = *byte,
                1 if i < data.len() => { data.remove(i); }
                _ => data.insert(i, *byte),
            }
        }
        if let Some(c) = cut {
            data.truncate(c.index(data.len() + 1));
        }
        property(&data);
    }

    /// The `utf8` property: valid text (with an optional damaged byte) at
    /// random piece boundaries.
    #[test]
    fn utf8_property_on_text_in_pieces(
        text in "\\PC{0,60}",
        damage in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
        sizes in proptest::collection::vec(any::<u8>(), 0..31),
    ) {
        let mut bytes = text.into_bytes();
        if let (Some((i, b)), false) = (damage, bytes.is_empty()) {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let mut input = vec![sizes.len() as u8];
        input.extend_from_slice(&sizes);
        input.extend_from_slice(&bytes);
        props::utf8(&input);
    }

    /// The `conn` property on random event sequences.
    #[test]
    fn conn_property_on_random_events(
        events in proptest::collection::vec(any::<u8>(), 4..200),
    ) {
        props::conn(&events);
    }

    /// The `driver` property on random event sequences.
    #[test]
    fn driver_property_on_random_events(
        events in proptest::collection::vec(any::<u8>(), 4..300),
    ) {
        props::driver(&events);
    }

    /// The `inbox` property on random messages, reads and budget moves.
    #[test]
    fn inbox_property_on_random_events(
        events in proptest::collection::vec(any::<u8>(), 2..300),
    ) {
        props::inbox(&events);
    }

    /// The `deflate` property, each mode, on random bytes.
    #[test]
    fn deflate_property_on_random_bytes(
        mode in 0u8..4,
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut input = vec![mode];
        input.extend_from_slice(&bytes);
        props::deflate(&input, &|f| { f(); None });
    }
}
