//! The fuzzing properties of wavesock, written once.
//!
//! Each `pub fn` takes the fuzzer's bytes and panics when a property fails.
//! The cargo-fuzz targets in `fuzz_targets/` call them; the root crate's
//! `tests/protocol/fuzz_props.rs` (proptest inputs) and `tests/protocol/fuzz_regressions.rs`
//! (every file under `fuzz/regressions/<target>/`) include this file with
//! `#[path]`, so a crash the fuzzer finds is replayed by `cargo test` on the
//! same function.
//!
//! Only the public API is used: the sans-IO core (`wavesock::proto`), the
//! handshake functions, the codec, and the hub (`wavesock::hub`) over an
//! in-memory pipe.

// Included as a module by the root crate's tests, where not every target
// is used by every test binary.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use wavesock::handshake::server::{
    accept_response, check_request, error_response, parse_request, write_response,
};
use wavesock::handshake::{client, derive_accept_key};
use wavesock::proto::conn::{Connection, Outgoing, Phase, State, Timers};
use wavesock::proto::decoder::MessageDecoder;
use wavesock::proto::header::FrameHeader;
use wavesock::proto::utf8::Utf8Validator;
use wavesock::proto::{Error, Limits};
use wavesock::{CloseCode, CloseFrame, Message, OpCode, ProtocolError, Role};

/// A target's property: panics on an input that breaks it.
pub type Property = fn(&[u8]);

/// The targets, by the name of their corpus and regression folders.
pub const TARGETS: &[(&str, Property)] = &[
    ("frame_decoder", frame_decoder),
    ("utf8", utf8),
    ("handshake", handshake),
    ("deflate", deflate_no_probe),
    ("conn", conn),
    ("hub", hub),
    ("driver", driver),
    ("inbox", inbox),
    ("receive", receive),
    ("receive_in", receive_in),
];

/// Takes bytes off the front of the input; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(n.min(self.0.len()));
        self.0 = tail;
        head
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `data` cut into pieces whose sizes come from `sizes` (cycled; 0 counts
/// as 1); the last piece takes what is left.
fn pieces<'a>(data: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    for &s in sizes.iter().cycle().take(data.len()) {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(usize::from(s).clamp(1, rest.len()));
        out.push(piece);
        rest = tail;
    }
    if !rest.is_empty() || out.is_empty() {
        out.push(rest);
    }
    out
}

// ------------------------------------------------------------ frame decoder

/// What a decoder made of a byte stream: its messages, the error that ended
/// it, and how many bytes were waiting in the buffer when the error came.
#[derive(Debug, PartialEq)]
struct Decoded {
    messages: Vec<Message>,
    error: Option<Error>,
}

fn decode_pieces(role: Role, limits: Limits, pieces: &[&[u8]]) -> (Decoded, usize) {
    let mut decoder = MessageDecoder::new(role, limits);
    let mut buf = BytesMut::new();
    let mut messages = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(msg)) => messages.push(msg),
                Ok(None) => break,
                Err(e) => {
                    let error = Some(e);
                    return (Decoded { messages, error }, buf.len());
                }
            }
        }
    }
    let error = None;
    (Decoded { messages, error }, buf.len())
}

/// Frame header parsing on the front of `data`: never claims more bytes
/// than it was given, a prefix of a complete header is incomplete, and the
/// header encodes back (shortest length form) to one that parses the same.
fn frame_header(data: &[u8]) {
    let Ok(Some((header, len))) = FrameHeader::parse(data) else {
        return;
    };
    assert!(len <= data.len() && len <= 14);
    for cut in 0..len {
        assert!(!matches!(FrameHeader::parse(&data[..cut]), Ok(Some(_))));
    }
    let mut out = [0u8; 14];
    let n = header.encode(&mut out);
    let (again, used) = FrameHeader::parse(&out[..n]).unwrap().unwrap();
    assert_eq!(again, header);
    assert_eq!(used, n);
    assert!(n <= len);
}

/// The message decoder, either role, with limits taken from the input:
///
/// - fed whole, in input-chosen chunks, and one byte at a time, it gives the
///   same messages and the same error, and so does `WebSocketCodec` with
///   the same limits;
/// - every message it hands out is within the limits (control payloads at
///   most 125 bytes);
/// - a frame or message over a limit is refused on its header: fed a byte
///   at a time, the error comes while the buffer holds at most a header
///   (14 bytes), none of the payload;
/// - the error's close code matches its class: 1002 protocol, 1007 UTF-8,
///   1009 size, and no other kind of error comes out of a decoder.
pub fn frame_decoder(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.byte();
    let role = if flags & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let max_frame = 1 + usize::from(input.byte()) * 4;
    let max_message = 1 + usize::from(input.byte()) * 8;
    let limits = Limits::default()
        .max_frame_size(max_frame)
        .max_message_size(max_message);
    let sizes = input.take(usize::from(flags >> 1) & 0x0f);
    let wire = input.0;
    frame_header(wire);

    let (whole, _) = decode_pieces(role, limits.clone(), &[wire]);
    let (chunked, _) = decode_pieces(role, limits.clone(), &pieces(wire, sizes));
    assert_eq!(whole, chunked, "whole vs chunks {sizes:?}");
    let bytes: Vec<&[u8]> = wire.chunks(1).collect();
    let (bytewise, buffered) = decode_pieces(role, limits, &bytes);
    assert_eq!(whole, bytewise, "whole vs a byte at a time");

    // The tokio-util codec over the same core agrees, close codes and all.
    let config = wavesock::Config::default()
        .max_frame_size(max_frame)
        .max_message_size(max_message);
    let mut codec = wavesock::WebSocketCodec::new(role, &config);
    let mut buf = BytesMut::from(wire);
    let mut by_codec = Vec::new();
    let codec_error = loop {
        match tokio_util::codec::Decoder::decode(&mut codec, &mut buf) {
            Ok(Some(msg)) => by_codec.push(msg),
            Ok(None) => break None,
            Err(e) => break Some(e.close_code()),
        }
    };
    assert_eq!(by_codec, whole.messages, "the codec");
    assert_eq!(codec_error, whole.error.as_ref().map(Error::close_code));

    for msg in &whole.messages {
        match msg {
            Message::Text(_) | Message::Binary(_) => assert!(msg.len() <= max_message),
            Message::Ping(p) | Message::Pong(p) => assert!(p.len() <= 125),
            Message::Close(_) => {}
            Message::Frame(_) => panic!("pieces come only when streaming"),
        }
    }
    let Some(err) = &whole.error else {
        return;
    };
    let code = err.close_code();
    match err {
        Error::Protocol(_) => assert_eq!(code, Some(CloseCode::PROTOCOL_ERROR)),
        Error::InvalidUtf8 => assert_eq!(code, Some(CloseCode::INVALID_PAYLOAD)),
        Error::FrameTooLarge { size, max } => {
            assert_eq!(code, Some(CloseCode::MESSAGE_TOO_BIG));
            assert_eq!(*max, max_frame);
            assert!(*size > *max as u64);
            assert!(
                buffered <= 14,
                "refused after {buffered} bytes were buffered"
            );
        }
        Error::MessageTooLarge { size, max } => {
            assert_eq!(code, Some(CloseCode::MESSAGE_TOO_BIG));
            assert_eq!(*max, max_message);
            assert!(*size > *max as u64);
            assert!(
                buffered <= 14,
                "refused after {buffered} bytes were buffered"
            );
        }
        other => panic!("a decoder returned {other:?}"),
    }
}

// ------------------------------------------------------------------- UTF-8

/// The incremental validator, fed input-chosen pieces, against std: after
/// each piece it has failed exactly when std says the text so far cannot
/// be the start of valid UTF-8, `is_incomplete` says whether it ends
/// inside a code point, and `finish` accepts exactly the valid texts.
pub fn utf8(data: &[u8]) {
    let mut input = Input(data);
    let n = usize::from(input.byte() & 0x1f);
    let sizes = input.take(n);
    let text = input.0;
    let mut v = Utf8Validator::new();
    let mut fed = 0;
    for piece in pieces(text, sizes) {
        let ok = v.feed(piece).is_ok();
        fed += piece.len();
        let std = std::str::from_utf8(&text[..fed]);
        let prefix_ok = std
            .as_ref()
            .map_or_else(|e| e.error_len().is_none(), |_| true);
        assert_eq!(ok, prefix_ok, "after {fed} bytes");
        if !ok {
            return;
        }
        assert_eq!(v.is_incomplete(), std.is_err(), "after {fed} bytes");
    }
    assert_eq!(v.finish().is_ok(), std::str::from_utf8(text).is_ok());
    assert!(!v.is_incomplete());
}

// --------------------------------------------------------------- handshake

/// The key of RFC 6455 §1.3's example, used by the client-side target.
pub const CLIENT_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// First byte even: the input is a request the server parses and checks.
/// Odd: a response the client checks against a fixed request.
pub fn handshake(data: &[u8]) {
    match data.split_first() {
        Some((b, rest)) if b & 1 == 0 => handshake_request(rest),
        Some((_, rest)) => handshake_response(rest),
        None => {}
    }
}

/// The server's parser and checker: no panic; the head is no longer than
/// the input and parses the same on its own; a refused request gets a 4xx
/// status and a 4xx response; an accepted one round-trips: the 101 the
/// server writes parses on the client side and passes its check against
/// the same request.
fn handshake_request(data: &[u8]) {
    let Ok(Some((req, len))) = parse_request(data, 32) else {
        return;
    };
    assert!(len <= data.len());
    let (again, len_again) = parse_request(&data[..len], 32).unwrap().unwrap();
    assert_eq!(len_again, len);
    assert_eq!(again.headers(), req.headers());
    match check_request(&req) {
        Ok(accept) => {
            let key = req.headers().get("sec-websocket-key").unwrap();
            assert_eq!(accept, derive_accept_key(key.as_bytes()));
            let resp = accept_response(&accept);
            let mut out = Vec::new();
            write_response(&resp, &[], &mut out);
            // Frames may follow the head in the same read.
            let n = out.len();
            out.extend_from_slice(&data[len..]);
            let (parsed, head) = client::parse_response(&out, 32).unwrap().unwrap();
            assert_eq!(head, n);
            assert_eq!(parsed.status(), 101);
            // Without extensions or subprotocols asked, none are chosen.
            let mut asked = client::Request::new(());
            asked.headers_mut().insert("sec-websocket-key", key.clone());
            assert_eq!(client::check_response(&asked, &parsed).unwrap(), None);
        }
        Err(e) => {
            let status = e.status().expect("refusals have a status");
            assert!(status.is_client_error(), "{status} for {e}");
            let resp = error_response(&e).unwrap();
            assert_eq!(resp.status(), status);
            let mut out = Vec::new();
            write_response(&resp, resp.body(), &mut out);
            assert!(out.starts_with(b"HTTP/1.1 4"));
        }
    }
}

/// The client's response parser and checker, against a request with
/// [`CLIENT_KEY`] offering the subprotocols `chat` and `v2`: no panic; an
/// accepted response is a 101 with the one right accept key and, if a
/// subprotocol was chosen, one of those offered.
fn handshake_response(data: &[u8]) {
    let Ok(Some((resp, len))) = client::parse_response(data, 32) else {
        return;
    };
    assert!(len <= data.len());
    let mut req = client::Request::new(());
    let h = req.headers_mut();
    h.insert("sec-websocket-key", CLIENT_KEY.parse().unwrap());
    h.insert("sec-websocket-protocol", "chat, v2".parse().unwrap());
    if let Ok(chosen) = client::check_response(&req, &resp) {
        assert_eq!(resp.status(), 101);
        let accepts: Vec<_> = resp
            .headers()
            .get_all("sec-websocket-accept")
            .iter()
            .collect();
        assert_eq!(accepts.len(), 1);
        assert_eq!(
            accepts[0],
            derive_accept_key(CLIENT_KEY.as_bytes()).as_str()
        );
        if let Some(p) = chosen {
            assert!(p == "chat" || p == "v2", "chose {p:?}");
        }
    }
}

// ----------------------------------------------------------------- deflate

/// Peak heap growth while a closure runs, where the target can measure it
/// (a counting global allocator); `None` elsewhere.
pub type Probe<'a> = &'a dyn Fn(&mut dyn FnMut()) -> Option<usize>;

fn deflate_no_probe(data: &[u8]) {
    deflate(data, &|f| {
        f();
        None
    });
}

/// permessage-deflate, the first byte picking the property (needs the
/// `deflate` feature for the last two; negotiation is always there):
///
/// - 0: negotiation on arbitrary `Sec-WebSocket-Extensions` headers never
///   panics, and what either side agrees to has window bits in 8..=15;
/// - 1: configurations from the input, each with a `DeflatePolicy`: what
///   the server answers to the client's offer, the client accepts with the
///   same parameters, and the server's policy holds in them (both resets
///   when shared, windows within a dedicated one's);
/// - 2: arbitrary bytes as a compressed message under a small message
///   limit: the decoder's heap grows by at most the limit plus the
///   inflater's fixed slack, and a message it hands out is within it;
/// - 3: messages cut from the input, compressed and inflated again, come
///   out as they went in, whatever the negotiated windows and context rule
///   and whichever policy each side keeps its memory under.
pub fn deflate(data: &[u8], probe: Probe<'_>) {
    let mut input = Input(data);
    match input.byte() % 4 {
        0 => deflate_headers(input.0),
        1 => deflate_agreement(input.0),
        2 => deflate_imp::inflate_bound(input.0, probe),
        _ => deflate_imp::round_trip(input.0),
    }
}

fn window_bits(b: u8) -> Option<u8> {
    match b % 10 {
        0 | 9 => None,
        n => Some(7 + n),
    }
}

/// A policy from the high bits of `b`: every kind, dedicated at sizes from
/// 1 KiB to 256 KiB.
fn policy(b: u8) -> wavesock::DeflatePolicy {
    match (b >> 2) % 4 {
        0 => wavesock::DeflatePolicy::Takeover,
        1 => wavesock::DeflatePolicy::Shared,
        _ => wavesock::DeflatePolicy::Dedicated(1024 << ((b >> 4) % 9)),
    }
}

fn deflate_config(input: &mut Input<'_>) -> wavesock::DeflateConfig {
    let b = input.byte();
    let bits = input.byte();
    wavesock::DeflateConfig::default()
        .server_no_context_takeover(b & 1 != 0)
        .client_no_context_takeover(b & 2 != 0)
        .server_max_window_bits(window_bits(bits & 0x0f))
        .client_max_window_bits(window_bits(bits >> 4))
        .compression_threshold(0)
        .policy(policy(b))
}

fn check_params(p: &wavesock::DeflateParams) {
    assert!((8..=15).contains(&p.server_max_window_bits), "{p:?}");
    assert!((8..=15).contains(&p.client_max_window_bits), "{p:?}");
}

fn deflate_headers(data: &[u8]) {
    use wavesock::handshake::extensions::{check_response, negotiate};
    let mut input = Input(data);
    let config = deflate_config(&mut input);
    let mut headers = http::HeaderMap::new();
    for line in input.0.split(|&b| b == b'\n') {
        if let Ok(v) = http::HeaderValue::from_bytes(line) {
            headers.append("sec-websocket-extensions", v);
        }
    }
    if let Some((params, answer)) = negotiate(&config, &headers) {
        check_params(&params);
        assert!(answer.to_str().unwrap().starts_with("permessage-deflate"));
    }
    if let Ok(Some(params)) = check_response(&config, &headers) {
        check_params(&params);
    }
}

fn deflate_agreement(data: &[u8]) {
    use wavesock::handshake::extensions::{check_response, negotiate, offer};
    let mut input = Input(data);
    let client = deflate_config(&mut input);
    let server = deflate_config(&mut input);
    let mut request = http::HeaderMap::new();
    request.insert("sec-websocket-extensions", offer(&client));
    let Some((agreed, answer)) = negotiate(&server, &request) else {
        // A server declines only when it needs the client's window bounded
        // and the offer cannot say it is; `offer` always can.
        panic!("{server:?} declined the offer of {client:?}");
    };
    check_params(&agreed);
    // The server's policy holds, whatever the client offered.
    if server.policy == wavesock::DeflatePolicy::Shared {
        assert!(agreed.server_no_context_takeover && agreed.client_no_context_takeover);
    }
    if let Some((s, c)) = server.policy.windows() {
        assert!(agreed.server_max_window_bits <= s, "{agreed:?}");
        assert!(
            agreed.client_max_window_bits <= c || agreed.client_no_context_takeover,
            "{agreed:?}"
        );
    }
    let mut response = http::HeaderMap::new();
    response.insert("sec-websocket-extensions", answer.clone());
    match check_response(&client, &response) {
        Ok(Some(seen)) => {
            // client_no_context_takeover in an offer is a hint the server
            // may leave out of its answer (RFC 7692 §7.1.1.1): the client
            // keeps its promise, the server's inflater copes either way.
            // The shared policy makes the same promise.
            let promised = client.client_no_context_takeover
                || client.policy == wavesock::DeflatePolicy::Shared;
            let mut seen_by_server = seen;
            seen_by_server.client_no_context_takeover &=
                agreed.client_no_context_takeover || !promised;
            assert_eq!(seen_by_server, agreed, "answer {answer:?}");
        }
        other => panic!("client refused {answer:?} from {server:?}: {other:?}"),
    }
}

#[cfg(feature = "deflate")]
mod deflate_imp {
    use super::*;
    use wavesock::proto::deflate::{self, DeflateConfig, DeflateParams};
    use wavesock::proto::encoder::FrameEncoder;

    /// Switches compression on for a decoder and encoder pair, as an
    /// engine that owns both does.
    fn enable(
        d: &mut MessageDecoder,
        e: &mut FrameEncoder,
        p: &DeflateParams,
        config: &DeflateConfig,
    ) {
        let (inflater, deflater) =
            deflate::pair(d.role(), p, config, d.max_message_size()).unwrap();
        d.set_inflater(inflater);
        e.set_deflater(deflater);
    }

    fn params(input: &mut Input<'_>) -> DeflateParams {
        let b = input.byte();
        let mut p = DeflateParams::default();
        p.server_no_context_takeover = b & 1 != 0;
        p.client_no_context_takeover = b & 2 != 0;
        p.server_max_window_bits = 8 + (b >> 2 & 7);
        p.client_max_window_bits = 8 + (b >> 5 & 7);
        p
    }

    /// The inflater's own memory: zlib's state and window, made by the
    /// first compressed message and so inside the probe (about 95 KB with
    /// zlib-rs at a 15-bit window), plus the output buffer's growth step.
    pub const INFLATE_SLACK: usize = 128 << 10;

    pub fn inflate_bound(data: &[u8], probe: Probe<'_>) {
        let mut input = Input(data);
        let p = params(&mut input);
        let max = 1 + usize::from(input.byte()) * 16;
        let limits = Limits::default().max_message_size(max);
        let mut decoder = MessageDecoder::new(Role::Server, limits);
        let mut encoder = FrameEncoder::new(Role::Server);
        enable(&mut decoder, &mut encoder, &p, &Default::default());
        // One compressed binary frame, masked as a client sends it.
        let payload = input.0;
        let mut wire = BytesMut::new();
        wire.extend_from_slice(&[0xC2]);
        let n = payload.len();
        if n < 126 {
            wire.extend_from_slice(&[0x80 | n as u8]);
        } else {
            wire.extend_from_slice(&[0x80 | 126]);
            wire.extend_from_slice(&(n as u16).to_be_bytes());
        }
        wire.extend_from_slice(&[0, 0, 0, 0]);
        wire.extend_from_slice(payload);
        let mut out = None;
        let peak = probe(&mut || out = Some(decoder.decode(&mut wire)));
        if let Some(peak) = peak {
            // What the decoder holds beyond the wire bytes it was given.
            assert!(
                peak <= max + INFLATE_SLACK,
                "inflating under a limit of {max} grew the heap by {peak}"
            );
        }
        match out.unwrap() {
            Ok(Some(msg)) => assert!(msg.len() <= max),
            Ok(None) => {}
            Err(e) => assert!(
                matches!(
                    e,
                    Error::MessageTooLarge { .. }
                        | Error::Protocol(ProtocolError::InvalidCompressedData)
                ),
                "{e:?}"
            ),
        }
    }

    pub fn round_trip(data: &[u8]) {
        let mut input = Input(data);
        let p = params(&mut input);
        let sizes = input.take(usize::from(input.0.first().copied().unwrap_or(0) & 7));
        let b = input.byte();
        let config = wavesock::DeflateConfig::default()
            .level(u32::from(b % 10))
            .compression_threshold(0);
        // Each side keeps its memory under a policy of its own: the wire
        // must not tell them apart.
        let (ours, theirs) = (super::policy(b), super::policy(input.byte()));
        // Client to server, the client compressing with its own window.
        let mut sender_dec = MessageDecoder::new(Role::Client, Limits::default());
        let mut sender = FrameEncoder::new(Role::Client);
        enable(
            &mut sender_dec,
            &mut sender,
            &p,
            &config.clone().policy(ours),
        );
        let mut receiver = MessageDecoder::new(Role::Server, Limits::default());
        let mut receiver_enc = FrameEncoder::new(Role::Server);
        enable(&mut receiver, &mut receiver_enc, &p, &config.policy(theirs));
        let mut wire = BytesMut::new();
        for (i, piece) in pieces(input.0, sizes).into_iter().enumerate() {
            let msg = match std::str::from_utf8(piece) {
                Ok(s) if i % 2 == 0 => Message::text(s.to_owned()),
                _ => Message::binary(piece.to_vec()),
            };
            sender.encode_message(&msg, &mut wire).unwrap();
            let got = receiver.decode(&mut wire).unwrap();
            assert_eq!(got.as_ref(), Some(&msg));
            assert!(wire.is_empty());
        }
    }
}

#[cfg(not(feature = "deflate"))]
mod deflate_imp {
    use super::Probe;

    pub fn inflate_bound(_: &[u8], _: Probe<'_>) {}

    pub fn round_trip(_: &[u8]) {}
}

// -------------------------------------------------------------- connection

/// The connection state machine driven by input-chosen events: control
/// frames from the peer (ping, pong, close), decoding errors (memory budget
/// refusals among them), input heard, waits for memory budget, sends, our
/// close, the transport ending, draining what is owed, and clock ticks
/// (time only goes forward). After each event:
///
/// - at most one close frame ever leaves (owed by the core or sent by the
///   caller through `send_close`), and nothing at all is owed after it has
///   left through `poll_transmit`;
/// - a pong is owed exactly for each ping received before our close, in
///   order, with its payload; no keepalive ping after our close;
/// - after `handle_timeout(now)`, `poll_timeout` is `None` or later than
///   `now` (no busy loop);
/// - phases only go Open -> {Failing, Closed, TimedOut} and
///   Failing/Closed -> TimedOut;
/// - the budget's wait runs exactly while the model says (from the first
///   `handle_budget_wait` while open until input or the end of `Open`), a
///   tick past its timeout fails an open connection with
///   `BudgetExhausted` (1013), and no other timer makes it fail;
/// - the `State` byte round-trips and agrees with `phase()`.
pub fn conn(data: &[u8]) {
    let mut input = Input(data);
    let role = if input.byte() & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let ms = |b: u8| Duration::from_millis(u64::from(b) * 10);
    let ping = input.byte();
    let timers = Timers::default()
        .ping_interval((ping != 0).then(|| ms(ping)))
        .pong_timeout(ms(input.byte()).max(Duration::from_millis(1)))
        .close_timeout(ms(input.byte()).max(Duration::from_millis(1)));
    let budget = input.byte();
    // A connection still in its opening handshake (the hub's), with only
    // a deadline: no keepalive, no budget wait.
    let handshaking = ping & 0x80 != 0 && budget & 0x80 != 0;
    let budget_wait = (budget != 0 && !handshaking).then(|| ms(budget));
    let timers = timers.budget_wait(budget_wait);
    let start = Instant::now();
    let mut now = start;
    let mut c = if handshaking {
        Connection::handshaking(role, Some(now + timers.close_timeout))
    } else {
        Connection::new(role, timers, now)
    };

    let mut out = Sent {
        handshaking,
        ..Sent::default()
    };
    let mut close_sent_seen = false;
    // When the memory budget's wait started, as the model sees it.
    let mut budget_since: Option<Instant> = None;

    while !input.is_empty() {
        let before = c.phase();
        let op = input.byte();
        let arg = input.byte();
        let payload = bytes::Bytes::copy_from_slice(input.take(usize::from(arg % 8)));
        match op % 13 {
            0 => {
                let sent = c.is_close_sent();
                c.handle_frame(&Message::Ping(payload.clone()), now);
                if !sent {
                    // Past OWED_PONGS_MAX owed, the newest ping's pong
                    // takes the place of the newest owed (RFC 6455
                    // 5.5.3).
                    if out.pongs.len() >= wavesock::proto::conn::OWED_PONGS_MAX {
                        *out.pongs.back_mut().expect("owed") = payload;
                    } else {
                        out.pongs.push_back(payload);
                    }
                }
            }
            1 => c.handle_frame(&Message::Pong(payload), now),
            2 => {
                let frame = (arg & 8 != 0)
                    .then(|| CloseFrame::new(CloseCode(1000 + u16::from(arg >> 4)), ""));
                c.handle_frame(&Message::Close(frame), now);
            }
            3 => {
                let err = match arg % 7 {
                    0 => Error::Protocol(ProtocolError::ReservedBits),
                    1 => Error::InvalidUtf8,
                    2 => Error::MessageTooLarge { size: 2, max: 1 },
                    3 => Error::Protocol(ProtocolError::FrameAfterClose),
                    4 => Error::OverBudget { size: 2, budget: 1 },
                    5 => Error::BudgetExhausted,
                    _ => Error::Compression("x".into()),
                };
                c.handle_error(err, now);
            }
            4 => {
                c.handle_input(now);
                budget_since = None;
            }
            5 | 6 => {
                now += Duration::from_millis(u64::from(arg) * 7);
                c.handle_timeout(now);
                if before == Phase::Open {
                    // The budget's wait is the one timer that fails a
                    // connection (1013); the others time it out.
                    let expired = budget_since
                        .zip(budget_wait)
                        .is_some_and(|(since, wait)| now >= since + wait);
                    if expired {
                        assert_ne!(c.phase(), Phase::Open, "the budget's wait ran out");
                    }
                    if c.phase() == Phase::Failing {
                        assert!(expired, "failing on a timer without a budget wait");
                        assert_eq!(c.take_error(), Some(Error::BudgetExhausted));
                    }
                }
                if let Some(t) = c.poll_timeout() {
                    assert!(
                        t > now,
                        "poll_timeout {:?} after handle_timeout at {:?}",
                        t - start,
                        now - start
                    );
                }
            }
            7 => {
                let opcode = match arg % 4 {
                    0 => OpCode::Text,
                    1 => OpCode::Binary,
                    2 => OpCode::Continuation,
                    _ => OpCode::Ping,
                };
                let closed = c.is_close_sent() || c.is_peer_gone();
                match c.handle_send_frame(opcode, arg & 4 != 0, now) {
                    Ok(Outgoing::Send) => {
                        assert!(!closed, "a send allowed after a close");
                    }
                    Ok(Outgoing::Skip) => panic!("only a close is skipped"),
                    Err(e) => {
                        if closed {
                            assert!(
                                matches!(e, Error::AlreadyClosed | Error::ConnectionClosed),
                                "{e:?}"
                            );
                        }
                    }
                }
            }
            8 => {
                // A caller writes what is owed before its own close.
                out.drain(&mut c);
                let was_sent = c.is_close_sent();
                // Sometimes a code no close frame may carry: refused, and
                // not recorded.
                let code = if arg & 8 != 0 { 1005 } else { 1000 };
                let frame = Message::Close(Some(CloseFrame::new(CloseCode(code), "")));
                match c.handle_send(&frame, now) {
                    Ok(Outgoing::Send) => {
                        out.closes += 1;
                        assert!(out.closes <= 1, "a second close frame allowed");
                        assert!(c.is_close_sent());
                    }
                    Ok(Outgoing::Skip) => assert!(was_sent || c.is_peer_gone()),
                    Err(_) => {
                        assert_eq!(code, 1005, "only an invalid close is refused");
                        assert_eq!(c.is_close_sent(), was_sent, "a refused close recorded");
                    }
                }
            }
            9 => {
                let kind = match arg % 4 {
                    0 => std::io::ErrorKind::UnexpectedEof,
                    1 => std::io::ErrorKind::ConnectionReset,
                    2 => std::io::ErrorKind::BrokenPipe,
                    _ => std::io::ErrorKind::Other,
                };
                // Quiet once it ended otherwise (failing, closed, timed
                // out), or for a hang-up after our close.
                let quiet_if = before != Phase::Open
                    || (c.is_close_sent() && kind != std::io::ErrorKind::Other);
                let reported = c.handle_transport_error(kind.into());
                assert_eq!(reported.is_none(), quiet_if, "{kind:?}");
                assert!(c.is_transport_ended() && c.is_peer_gone());
            }
            12 => {
                if before == Phase::Open {
                    c.handle_refused();
                    assert_ne!(c.phase(), Phase::Open);
                    // An HTTP answer ends it: nothing more is owed, not
                    // even the pongs that were.
                    out.pongs.clear();
                    out.refused = true;
                }
            }
            10 => {
                c.handle_budget_wait(now);
                if budget_wait.is_some() && c.phase() == Phase::Open {
                    budget_since.get_or_insert(now);
                }
            }
            _ => out.drain(&mut c),
        }
        let after = c.phase();
        if after != Phase::Open {
            budget_since = None;
        }
        let state = c.state();
        assert_eq!(state.phase(), after);
        assert_eq!(State::from_bits(state.to_bits()), state);
        assert_eq!(
            state.is_waiting_for_budget(),
            budget_since.is_some(),
            "the budget's wait as the model sees it"
        );
        let allowed = before == after
            || matches!(
                (before, after),
                (Phase::Open, _) | (Phase::Failing | Phase::Closed, Phase::TimedOut)
            );
        assert!(allowed, "phase went {before:?} -> {after:?}");
        if close_sent_seen {
            assert!(c.is_close_sent(), "close_sent went back");
        }
        close_sent_seen = c.is_close_sent();
    }
    out.drain(&mut c);
    assert!(out.pongs.is_empty(), "pongs never owed: {:?}", out.pongs);
}

/// What the model of [`conn`] expects to leave, and what has.
#[derive(Default)]
struct Sent {
    /// Pongs owed, oldest first.
    pongs: std::collections::VecDeque<bytes::Bytes>,
    /// Close frames that left, either way.
    closes: usize,
    /// Our close left through `poll_transmit`: nothing may follow it.
    close_polled: bool,
    /// The opening handshake was refused: no WebSocket frame may follow.
    refused: bool,
    /// Still in the opening handshake: no keepalive.
    handshaking: bool,
}

impl Sent {
    fn drain(&mut self, c: &mut Connection) {
        while let Some(msg) = c.poll_transmit() {
            assert!(!self.close_polled, "{msg:?} owed after our close left");
            assert!(!self.refused, "{msg:?} owed after a refused handshake");
            match msg {
                Message::Pong(p) => {
                    assert_eq!(self.pongs.pop_front(), Some(p), "an unexpected pong");
                }
                Message::Close(_) => {
                    self.closes += 1;
                    self.close_polled = true;
                    assert!(c.is_close_sent());
                }
                Message::Ping(_) => {
                    assert_eq!(self.closes, 0, "a ping after our close");
                    assert!(!self.handshaking, "a keepalive ping before the upgrade");
                }
                other => panic!("the core owes {other:?}"),
            }
            assert!(self.closes <= 1, "a second close frame");
        }
    }
}

// --------------------------------------------------------------------- hub

/// The upgrade request the `hub` target's input follows, with or without
/// a permessage-deflate offer.
fn hub_request(deflate: bool) -> Vec<u8> {
    let mut r = b"GET /fuzz HTTP/1.1\r\nHost: fuzz\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n".to_vec();
    if deflate {
        r.extend_from_slice(
            b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n",
        );
    }
    r.extend_from_slice(b"\r\n");
    r
}

/// What the `hub` target's handler saw.
#[derive(Debug, Default)]
pub struct HubSeen {
    /// Connections opened (0 or 1).
    pub opened: usize,
    /// Close callbacks, in order.
    pub closed: Vec<HubEnd>,
    /// Data messages as received: (text, payload).
    pub messages: Vec<(bool, Vec<u8>)>,
    /// Pings received.
    pub pings: usize,
}

/// One `Handler::close` call of the `hub` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubEnd {
    /// An error ended the connection.
    pub error: bool,
    /// The close code for that error, if it has one (a violation).
    pub code: Option<u16>,
    /// The peer's close frame came.
    pub peer_close: bool,
}

/// What a `hub` run produced: the handler's view and the hub's bytes.
#[derive(Debug, Default)]
pub struct HubOutcome {
    pub seen: HubSeen,
    /// Everything the hub wrote, the HTTP response included.
    pub output: Vec<u8>,
    /// The whole frames after a `101`: (first byte, payload).
    pub frames: Vec<(u8, Vec<u8>)>,
    /// Compression was offered (and so, with the `deflate` feature,
    /// negotiated).
    pub deflate: bool,
    /// The input had the valid request in front.
    pub upgraded: bool,
}

/// Echoes data messages and records every call; checks each message
/// against the limits as it comes.
#[derive(Clone)]
struct FuzzHandler {
    seen: std::sync::Arc<std::sync::Mutex<HubSeen>>,
    max_message: usize,
}

impl FuzzHandler {
    fn seen(&self) -> std::sync::MutexGuard<'_, HubSeen> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl wavesock::hub::Handler for FuzzHandler {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &http::Request<()>,
        _: &mut http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        Ok(())
    }

    fn open(&mut self, _: &mut wavesock::hub::Ws<'_, ()>) {
        let mut seen = self.seen();
        seen.opened += 1;
        assert_eq!(seen.opened, 1, "one transport, one connection");
    }

    fn message(&mut self, ws: &mut wavesock::hub::Ws<'_, ()>, msg: wavesock::hub::HubMessage<'_>) {
        let bytes = msg.as_bytes();
        assert!(
            bytes.len() <= self.max_message,
            "a {} byte message past the {} byte limit",
            bytes.len(),
            self.max_message
        );
        if msg.is_text() {
            assert!(std::str::from_utf8(bytes).is_ok(), "text that is not UTF-8");
        }
        self.seen().messages.push((msg.is_text(), bytes.to_vec()));
        let _ = ws.send_borrowed(msg);
    }

    fn ping(&mut self, _: &mut wavesock::hub::Ws<'_, ()>, payload: &[u8]) {
        assert!(payload.len() <= 125, "a ping of {} bytes", payload.len());
        self.seen().pings += 1;
    }

    fn close(&mut self, closed: wavesock::hub::Closed, _: ()) {
        let end = HubEnd {
            error: closed.error.is_some(),
            code: closed
                .error
                .as_ref()
                .and_then(|e| e.close_code())
                .map(|c| c.0),
            peer_close: closed.frame.is_some(),
        };
        self.seen().closed.push(end);
    }
}

/// A transport that tells, through a oneshot, when the hub drops it.
struct Dropped<T> {
    inner: T,
    tx: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<T> Drop for Dropped<T> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(());
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Dropped<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Dropped<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The hub over an in-memory pipe, fed the input. Input format:
///
/// `[flags][pipe][sizes: flags >> 4 bytes] wire`, where flags bit 0 offers
/// permessage-deflate, bit 1 sends `wire` alone (no request in front: the
/// hub's HTTP side is fuzzed), bits 2-3 pick the limits (frames of 64 <<
/// 2n bytes, messages twice that), `pipe` sizes the pipe (1 + 16 * pipe
/// bytes), and `sizes` cut the request and `wire` into the chunks written,
/// one per turn of the runtime. Then the writing side is shut down.
///
/// - Nothing panics, in the hub (its task would fail) or out of it.
/// - The hub answers with an HTTP response or closes without one; behind
///   the valid request, with a `101`. What follows the `101` is unmasked
///   frames, at most one close frame and nothing after it; without
///   compression, the data frames are the echoes of the messages the
///   handler received, in order. A close frame sent for a violation (the
///   error the handler is told) carries that error's close code.
/// - The handler gets text only as valid UTF-8, messages within the
///   limit, pings within 125 bytes.
/// - When the input ends, the hub ends the connection: it lets go of the
///   transport, and the close callback has been called exactly once if the
///   connection was opened (never otherwise). Time is Tokio's paused
///   clock, so the hub's timeouts pass at once when nothing else can
///   happen; a hub that never ends the connection is stuck for an hour of
///   it and fails.
pub fn hub(data: &[u8]) {
    hub_run(data);
}

/// [`hub`], returning what it saw for callers with more to check.
pub fn hub_run(data: &[u8]) -> HubOutcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(hub_session(data))
}

async fn hub_session(data: &[u8]) -> HubOutcome {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wavesock::hub::{Hub, HubConfig};

    let mut input = Input(data);
    let flags = input.byte();
    let deflate = flags & 1 != 0;
    let raw = flags & 2 != 0;
    let max_frame = 64usize << (2 * ((flags >> 2) & 3));
    let max_message = 2 * max_frame;
    let pipe = 1 + 16 * usize::from(input.byte());
    let sizes = input.take(usize::from(flags >> 4)).to_vec();
    let mut wire = if raw {
        Vec::new()
    } else {
        hub_request(deflate)
    };
    wire.extend_from_slice(input.0);

    let config = wavesock::Config::default()
        .max_frame_size(max_frame)
        .max_message_size(max_message);
    #[cfg(feature = "deflate")]
    let config = config.deflate(wavesock::DeflateConfig::default());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(HubSeen::default()));
    let handler = FuzzHandler {
        seen: seen.clone(),
        max_message,
    };
    let hub = Hub::new(handler, HubConfig::default().config(config)).expect("a valid config");
    let handle = hub.handle();
    // `serve` needs a listener; nothing connects to it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback listener");
    let served = tokio::spawn(hub.serve(listener));

    let (client, server) = tokio::io::duplex(pipe);
    let (tx, dropped) = tokio::sync::oneshot::channel();
    let server = Dropped {
        inner: server,
        tx: Some(tx),
    };
    handle.accept(server).await.expect("the hub takes it");
    let (mut rd, mut wr) = tokio::io::split(client);
    let writer = tokio::spawn(async move {
        let sizes = if sizes.is_empty() { vec![255] } else { sizes };
        for piece in pieces(&wire, &sizes) {
            if wr.write_all(piece).await.is_err() {
                return;
            }
            tokio::task::yield_now().await;
        }
        let _ = wr.shutdown().await;
    });
    let mut output = Vec::new();
    let ended = async {
        let _ = rd.read_to_end(&mut output).await;
        dropped.await.expect("dropped, not forgotten");
    };
    let stuck = tokio::time::timeout(Duration::from_secs(3600), ended)
        .await
        .is_err();
    handle.shutdown().await.expect("shut down");
    match tokio::time::timeout(Duration::from_secs(60), served).await {
        Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Ok(_) => {}
        Err(_) => panic!("the hub does not stop"),
    }
    if let Err(e) = writer.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    assert!(!stuck, "the hub never ended the connection");

    let seen = std::mem::take(
        &mut *seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    assert_eq!(
        seen.closed.len(),
        seen.opened,
        "close callbacks per connection"
    );
    let mut outcome = HubOutcome {
        seen,
        output,
        frames: Vec::new(),
        deflate,
        upgraded: !raw,
    };
    outcome.frames = check_hub_output(&outcome);
    outcome
}

/// The hub's bytes: a response, then (after a `101`) whole frames, which
/// it returns.
fn check_hub_output(out: &HubOutcome) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    let bytes = &out.output;
    if bytes.is_empty() {
        assert!(!out.upgraded, "no answer to a valid request");
        assert_eq!(out.seen.opened, 0, "opened without a 101");
        return frames;
    }
    assert!(bytes.starts_with(b"HTTP/1.1 "), "not a response: {bytes:?}");
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        panic!("an unfinished response head");
    };
    let switched = bytes.starts_with(b"HTTP/1.1 101 ");
    assert_eq!(switched, out.seen.opened == 1, "a 101 exactly when opened");
    if out.upgraded {
        assert!(switched, "the valid request was refused");
    }
    if !switched {
        return frames;
    }
    let compressed = out.deflate && cfg!(feature = "deflate");
    let mut rest = &bytes[end + 4..];
    let mut echoes = out.seen.messages.iter();
    let mut close: Option<Option<u16>> = None;
    while rest.len() >= 2 {
        let (b0, b1) = (rest[0], rest[1]);
        assert_eq!(b1 & 0x80, 0, "a masked frame from the server");
        let (len, at) = match b1 & 0x7F {
            126 if rest.len() >= 4 => (usize::from(u16::from_be_bytes([rest[2], rest[3]])), 4),
            127 if rest.len() >= 10 => (
                usize::try_from(u64::from_be_bytes(rest[2..10].try_into().unwrap()))
                    .unwrap_or(usize::MAX),
                10,
            ),
            126 | 127 => break,
            n => (usize::from(n), 2),
        };
        if rest.len() - at < len {
            // Cut: the connection ended while the frame was on its way.
            break;
        }
        let payload = &rest[at..at + len];
        rest = &rest[at + len..];
        frames.push((b0, payload.to_vec()));
        assert!(close.is_none(), "a frame after the close frame");
        assert_eq!(b0 & 0x80, 0x80, "the hub sends whole messages");
        if !compressed {
            assert_eq!(b0 & 0x70, 0, "reserved bits without compression");
        }
        match b0 & 0x0F {
            0x1 | 0x2 => {
                let (text, sent) = echoes.next().expect("an echo of a message never received");
                assert_eq!((b0 & 0x0F) == 0x1, *text, "the echo's opcode");
                if !compressed {
                    assert_eq!(payload, &sent[..], "the echo's payload");
                }
            }
            0x8 => {
                assert!(len != 1 && len <= 125, "a close frame of {len} bytes");
                close = Some((len >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]])));
            }
            0x9 | 0xA => assert!(len <= 125, "a control frame of {len} bytes"),
            op => panic!("opcode {op:#x} from the hub"),
        }
    }
    // A close for a violation carries the violation's code.
    if let (
        Some(Some(code)),
        Some(HubEnd {
            code: Some(error_code),
            ..
        }),
    ) = (close, out.seen.closed.first())
    {
        assert_eq!(code, *error_code, "the close code and the handler's error");
    }
    frames
}

/// The driver under input-chosen sends of every kind, peer pings, writes
/// of input-chosen sizes and slice counts, blocked writes and a discard.
///
/// The model: what the peer decodes from the bytes written is exactly the
/// messages the driver accepted (`Outgoing::Send`) and the pongs it owed,
/// in order; after our close nothing but that close goes out and a second
/// close is skipped; `buffered()` is what was queued minus what was
/// written; a connection with nothing to write holds no queue.
pub fn driver(data: &[u8]) {
    use wavesock::PreparedMessage;
    use wavesock::proto::driver::Driver;
    use wavesock::proto::encoder::FrameEncoder;
    use wavesock::proto::outbox::{PoolLimits, QueuePool};

    let mut input = Input(data);
    let role = if input.byte() & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let now = Instant::now();
    let mut d = Driver::new(
        Connection::new(role, Timers::default(), now),
        FrameEncoder::new(role),
    );
    let mut pool = QueuePool::new(PoolLimits {
        buffer_len: 1 << 10,
        buffer_max: 1 << 20,
        count_max: 2,
        bytes_max: 1 << 20,
    });
    let mut expected: Vec<Message> = Vec::new();
    let mut wire = BytesMut::new();
    let mut close_sent = false;
    let mut discarded = false;
    // Where each expected message's frame ends in everything queued.
    let mut ends: Vec<usize> = Vec::new();

    while !input.is_empty() && !discarded {
        let before = d.buffered();
        let op = input.byte();
        let arg = input.byte();
        // Small payloads from the input; large ones (the shared paths)
        // made up to a size the input picks.
        let len = if arg & 1 == 0 {
            usize::from(arg % 16)
        } else {
            4096 + usize::from(arg) * 8
        };
        let fill = input.byte();
        let ascii = vec![b'a' + fill % 26; len];
        let verdict = match op % 9 {
            0 => {
                let m = Message::text(String::from_utf8(ascii.clone()).unwrap());
                Some((d.send(m.clone(), now, &mut pool), m))
            }
            1 => {
                let m = Message::binary(ascii.clone());
                Some((d.send(m.clone(), now, &mut pool), m))
            }
            2 => {
                let (opcode, m) = if fill & 1 == 0 {
                    (
                        OpCode::Text,
                        Message::text(String::from_utf8(ascii.clone()).unwrap()),
                    )
                } else {
                    (OpCode::Binary, Message::binary(ascii.clone()))
                };
                Some((d.send_data(opcode, &ascii, now, &mut pool), m))
            }
            3 => {
                let (opcode, m) = if fill & 1 == 0 {
                    (
                        OpCode::Text,
                        Message::text(String::from_utf8(ascii.clone()).unwrap()),
                    )
                } else {
                    (OpCode::Binary, Message::binary(ascii.clone()))
                };
                let payload = bytes::Bytes::from(ascii.clone());
                Some((d.send_data_shared(opcode, payload, now, &mut pool), m))
            }
            4 => {
                let m = Message::binary(ascii.clone());
                let p = PreparedMessage::new(&m).unwrap();
                Some((d.send_prepared(&p, now, &mut pool), m))
            }
            5 => {
                let frame = (arg & 2 != 0)
                    .then(|| CloseFrame::new(CloseCode(1000 + u16::from(fill % 4)), "bye"));
                let m = Message::Close(frame);
                let r = d.send(m.clone(), now, &mut pool);
                assert_eq!(
                    r,
                    Ok(if close_sent {
                        Outgoing::Skip
                    } else {
                        Outgoing::Send
                    }),
                    "a first close is sent, a second skipped"
                );
                close_sent = true;
                Some((r, m))
            }
            6 => {
                let payload = bytes::Bytes::copy_from_slice(&ascii[..ascii.len().min(8)]);
                d.conn_mut()
                    .handle_frame(&Message::Ping(payload.clone()), now);
                let owed = d.transmit(&mut pool).unwrap();
                assert_eq!(owed, !close_sent, "a pong is owed until our close");
                if owed {
                    expected.push(Message::Pong(payload));
                }
                None
            }
            7 => {
                // A write of at most `max` bytes over at most `slices`.
                let max = usize::from(fill) * 37 + 1;
                let slices = usize::from(arg % 4) + 1;
                let n = d.with_slices(|s| {
                    let mut n = 0;
                    for s in s.iter().take(slices) {
                        let k = s.len().min(max - n);
                        wire.extend_from_slice(&s[..k]);
                        n += k;
                        if n == max {
                            break;
                        }
                    }
                    n
                });
                let all = d.written(n, &mut pool);
                assert_eq!(d.buffered(), before - n);
                assert_eq!(all, d.buffered() == 0);
                assert_eq!(d.holds_queue(), !all, "an idle driver holds no queue");
                None
            }
            8 if arg & 0xc0 == 0x40 => {
                // The peer reads too slowly: the frames begun stay, the
                // rest are dropped, a 1013 close follows.
                let failed = d.fail_backlogged(before, 1, now, &mut pool).unwrap();
                assert_eq!(failed, !close_sent, "only an open connection fails");
                if failed {
                    let written = wire.len();
                    // Frame `i` begins where frame `i - 1` ends.
                    let begun = (0..ends.len())
                        .take_while(|&i| if i == 0 { 0 } else { ends[i - 1] } < written)
                        .count();
                    expected.truncate(begun);
                    ends.truncate(begun);
                    let kept = ends.last().map_or(0, |&e| e.max(written)) - written;
                    expected.push(Message::Close(Some(CloseFrame::new(
                        CloseCode::TRY_AGAIN_LATER,
                        "reading too slowly: backpressure limit",
                    ))));
                    assert!(d.buffered() > kept, "the close follows the frame begun");
                    close_sent = true;
                }
                None
            }
            8 if arg & 0x80 != 0 => {
                d.discard_writes(&mut pool);
                assert_eq!(d.buffered(), 0);
                assert!(!d.holds_queue());
                discarded = true;
                None
            }
            _ => {
                d.write_blocked();
                assert_eq!(d.buffered(), before, "fitting loses nothing");
                None
            }
        };
        if let Some((r, m)) = verdict {
            if m.is_close() {
                if r == Ok(Outgoing::Send) {
                    expected.push(m);
                }
            } else if close_sent {
                assert!(r.is_err(), "data after our close is refused: {r:?}");
                assert_eq!(d.buffered(), before, "and nothing is queued");
            } else {
                assert_eq!(r, Ok(Outgoing::Send));
                assert!(d.buffered() > before);
                expected.push(m);
            }
        }
        // One frame per message, each op queues one at most.
        if ends.len() < expected.len() {
            ends.push(wire.len() + d.buffered());
        }
    }
    if !discarded {
        // Everything left, written at once.
        while d.buffered() > 0 {
            let n = d.with_slices(|s| {
                s.iter()
                    .map(|s| {
                        wire.extend_from_slice(s);
                        s.len()
                    })
                    .sum()
            });
            d.written(n, &mut pool);
        }
        assert!(!d.holds_queue());
    }
    let peer = match role {
        Role::Server => Role::Client,
        Role::Client => Role::Server,
    };
    let mut dec = MessageDecoder::new(peer, Limits::default());
    let mut got = Vec::new();
    while let Some(m) = dec
        .decode(&mut wire)
        .expect("the driver writes valid frames")
    {
        got.push(m);
    }
    if discarded {
        assert!(got.len() <= expected.len());
        assert_eq!(
            got[..],
            expected[..got.len()],
            "what went out came in order"
        );
    } else {
        assert!(wire.is_empty(), "no partial frame is left");
        assert_eq!(got, expected);
    }
}

/// Memory an engine lends an inbox, as the Stream's: spares and an arena,
/// at sizes small enough for the fuzzer to cross them.
#[derive(Default)]
struct FuzzMemory {
    spares: Vec<BytesMut>,
    arena: Option<BytesMut>,
}

/// The Stream's scratch memory (a stack read), scaled down.
const FUZZ_SCRATCH: usize = 1 << 10;
const FUZZ_SPARE: usize = 8 << 10;

impl wavesock::proto::inbox::ReadMemory for FuzzMemory {
    fn take_spare(&mut self) -> BytesMut {
        self.spares
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(FUZZ_SPARE))
    }

    fn give_spare(&mut self, mut buf: BytesMut) {
        buf.clear();
        if buf.try_reclaim(FUZZ_SPARE) && buf.capacity() == FUZZ_SPARE && self.spares.len() < 2 {
            self.spares.push(buf);
        }
    }

    fn spare_len(&self) -> usize {
        FUZZ_SPARE
    }

    fn arena_copy(&mut self, bytes: &[u8]) -> Option<BytesMut> {
        if bytes.len() > 256 {
            return None;
        }
        let chunk = match self.arena.as_mut() {
            Some(c) if c.capacity() >= bytes.len() => c,
            _ => self.arena.insert(BytesMut::with_capacity(1 << 10)),
        };
        chunk.extend_from_slice(bytes);
        Some(chunk.split())
    }
}

/// Input-chosen messages a peer sends (1 to 6: pings, text, binary up to
/// ~37 KB), encoded into `wire`; the messages, in order.
fn peer_messages(
    input: &mut Input<'_>,
    encoder: &mut wavesock::proto::encoder::FrameEncoder,
    wire: &mut BytesMut,
) -> Vec<Message> {
    let mut sent = Vec::new();
    for _ in 0..input.byte() % 6 + 1 {
        let b = input.byte();
        let len = match b % 4 {
            0 => usize::from(b % 32),
            1 => 100 + usize::from(b) * 4,
            2 => 2000 + usize::from(b) * 40,
            _ => 12_000 + usize::from(b) * 100,
        };
        let msg = match b % 5 {
            0 => Message::Ping(vec![b; usize::from(b % 126)].into()),
            1 | 2 => Message::text("é".repeat(len / 2)),
            _ => Message::binary(vec![b; len]),
        };
        encoder.encode_message(&msg, wire).unwrap();
        sent.push(msg);
    }
    sent
}

/// The receiving side (`proto::inbox::Inbox`) as both engines drive it:
/// input-chosen messages from a client, read in input-chosen sizes either
/// as the Stream reads (scratch copied into the arena or a spare) or as the
/// hub does (decoded in a shared buffer, the rest kept), under an optional
/// memory budget that another connection takes from and gives back to at
/// input-chosen moments. Properties: what is decoded is what was sent, in
/// order, and nothing else (a budget may stop it early, only with a budget
/// error); a waiting inbox holds at most four times its bytes and none
/// once everything is decoded; under a budget its account always records
/// the buffer it holds; nothing panics.
pub fn inbox(data: &[u8]) {
    use wavesock::proto::MemoryBudget;
    use wavesock::proto::budget::{BudgetAccount, Grant, Held};
    use wavesock::proto::encoder::FrameEncoder;
    use wavesock::proto::inbox::{Inbox, Plan};

    let mut input = Input(data);
    let flags = input.byte();
    // The hub's way: decode in scratch memory shared by all connections.
    let borrow = flags & 1 != 0;
    let budget = (flags & 2 != 0)
        .then(|| MemoryBudget::new((16 << 10) + usize::from(flags >> 2) * 2048).allowance(0));
    let limits = Limits::default()
        .max_frame_size(1 << 20)
        .max_message_size(1 << 20)
        .budget(budget.clone());

    let mut wire = BytesMut::new();
    let sent = peer_messages(&mut input, &mut FrameEncoder::new(Role::Client), &mut wire);
    let wire = wire.freeze();

    let mut inbox = Inbox::new(MessageDecoder::new(Role::Server, limits), BytesMut::new());
    let mut other = BudgetAccount::new(budget.clone());
    let mut mem = FuzzMemory::default();
    let mut scratch = BytesMut::with_capacity(4 << 10);
    let mut got: Vec<Message> = Vec::new();
    let mut at = 0;
    let mut stopped = false;
    let mut stalled = false;

    // Decodes what the inbox holds, as an engine does after a read.
    let take = |inbox: &Inbox,
                next: Result<Option<Message>, Error>,
                got: &mut Vec<Message>,
                stopped: &mut bool|
     -> Option<Grant> {
        match next {
            Ok(Some(m)) => {
                got.push(m);
                None
            }
            Ok(None) => Some(inbox.held_back().unwrap_or(Grant::Granted)),
            Err(e) => {
                assert!(
                    budget.is_some() && matches!(e, Error::OverBudget { .. }),
                    "valid input failed to decode: {e}"
                );
                *stopped = true;
                Some(Grant::Granted)
            }
        }
    };

    while !stopped && got.len() < sent.len() {
        let op = input.byte();
        let arg = input.byte();
        match op % 8 {
            // Another connection takes budget, or gives it back.
            0 => {
                let _ = other.try_set(Held::Fragments, usize::from(arg) * 256);
            }
            1 => other.release_all(),
            2 => {
                inbox.wait(&mut mem);
                let len = inbox.buffered().len();
                let cap = inbox.buffered().capacity();
                assert!(cap <= 4 * len, "waiting with {len} bytes in {cap}");
            }
            _ => {}
        }
        // Once the input is spent, the rest arrives in large reads.
        let want = if input.is_empty() {
            64 << 10
        } else {
            1 + usize::from(arg) * (1 + usize::from(op >> 3))
        };
        let chunk = &wire[at..wire.len().min(at + want)];
        let mut refused = None;
        match inbox.plan(&mut mem) {
            Plan::Scratch { limit } => {
                let n = chunk.len().min(limit);
                if borrow {
                    scratch.extend_from_slice(&chunk[..n]);
                    at += n;
                    loop {
                        let next = inbox.decode_in(&mut scratch);
                        match take(&inbox, next, &mut got, &mut stopped) {
                            None => continue,
                            Some(Grant::Granted) => {}
                            Some(g) => refused = Some(g),
                        }
                        break;
                    }
                    inbox.keep_rest(&mut scratch, !stopped);
                    assert!(scratch.is_empty());
                } else {
                    let n = n.min(FUZZ_SCRATCH);
                    inbox.received(&chunk[..n], n == FUZZ_SCRATCH, &mut mem);
                    at += n;
                }
            }
            Plan::Own => {
                use bytes::BufMut;
                let mut target = inbox.target();
                let n = chunk.len().min(target.chunk_mut().len());
                target.put_slice(&chunk[..n]);
                inbox.read_done((n > 0).then_some(n), &mut mem);
                at += n;
            }
            Plan::Refused(g) => refused = Some(g),
        }
        if refused.is_none() && !stopped {
            loop {
                let next = inbox.decode();
                match take(&inbox, next, &mut got, &mut stopped) {
                    None => continue,
                    Some(Grant::Granted) => {}
                    Some(g) => refused = Some(g),
                }
                break;
            }
        }
        match refused {
            Some(Grant::Never { .. }) => stopped = true,
            // Waiting for budget: the other connection gives some back
            // (an engine waits for exactly this).
            Some(_) => {
                // Budget no one else holds is all there is: the next try
                // must get on.
                if other.total() == 0 {
                    assert!(!stalled, "waits for budget that no one else holds");
                    stalled = true;
                }
                other.release_all();
            }
            None => stalled = false,
        }
        if let Some(account) = budget.as_ref().map(|_| inbox.decoder().account()) {
            let held = account.held(Held::ReadBuffer);
            let cap = inbox.buffered().capacity();
            assert_eq!(held, cap, "the account records the buffer");
        }
        if at == wire.len() && input.is_empty() && refused.is_none() {
            // All read, nothing more to decide: decode what is left.
            break;
        }
    }
    assert!(got.len() <= sent.len());
    assert_eq!(got, sent[..got.len()], "decoded what was sent, in order");
    if budget.is_none() {
        assert!(
            !stopped && got.len() == sent.len(),
            "no budget: all decoded"
        );
    }
    if got.len() == sent.len() {
        inbox.wait(&mut mem);
        assert_eq!(inbox.buffered().capacity(), 0, "all decoded: nothing held");
    }
}

/// An engine's link for the `receive` target: it owns the connection, and
/// keeps what the connection owes as sent.
struct ReceiveLink {
    conn: Connection,
    sent: Vec<Message>,
    transport_ended: bool,
    /// What `Link::queued` says: replies waiting, input-chosen.
    queued: usize,
}

impl wavesock::proto::receive::Link for ReceiveLink {
    fn state(&self) -> State {
        self.conn.state()
    }

    fn with_conn<T>(&mut self, f: impl FnOnce(&mut Connection) -> T) -> Result<T, Error> {
        let out = f(&mut self.conn);
        while let Some(msg) = self.conn.poll_transmit() {
            self.sent.push(msg);
        }
        Ok(out)
    }

    fn transport_ended(&mut self) {
        self.transport_ended = true;
    }

    fn abandon(&mut self) {}

    fn queued(&self) -> usize {
        self.queued
    }
}

/// The receive step (`proto::receive::Receiver`) as an engine drives it:
/// input-chosen messages from the peer (then, optionally, input-chosen
/// garbage and a close frame), read in input-chosen sizes the Stream's way,
/// with every outcome an engine can report chosen by the input (reads that
/// find nothing or fail, flushes that take all, some or nothing, or fail,
/// the clock moving on, another connection taking and giving back budget),
/// with keepalive and a memory budget optional. Properties: the data
/// messages handed out are what was sent, in order; the budget is never
/// over its limit; the connection ends, once, within a bound on steps
/// (ending the input ends the transport, and the clock runs); a
/// connection that fails with a close code has sent a close frame; with
/// nothing in the way (no garbage, no failures, no budget, no keepalive)
/// every message arrives; nothing panics.
pub fn receive(data: &[u8]) {
    receive_with(data, false)
}

/// [`receive`] with the engine reading into a buffer of its own, the
/// hub's way ([`Receiver::step_in`](wavesock::proto::receive::Receiver::step_in)):
/// messages borrowed from it or split off, a flush and the next read in
/// one step, a read that finds nothing answered without a step when the
/// receiver says so, and a cork's worth of replies now and then. Beyond
/// `receive`'s properties: the engine's buffer is empty whenever a step
/// other than a message or a flush comes back, and at the end.
pub fn receive_in(data: &[u8]) {
    receive_with(data, true)
}

fn receive_with(data: &[u8], in_buffer: bool) {
    use std::io;
    use wavesock::proto::budget::{BudgetAccount, Held};
    use wavesock::proto::decoder::BorrowedData;
    use wavesock::proto::encoder::FrameEncoder;
    use wavesock::proto::inbox::{Inbox, Plan};
    use wavesock::proto::receive::{Ended, Input as Did, Receiver, Step, Stepped};

    let mut input = Input(data);
    let flags = input.byte();
    let role = if flags & 1 != 0 {
        Role::Client
    } else {
        Role::Server
    };
    let peer = match role {
        Role::Client => Role::Server,
        Role::Server => Role::Client,
    };
    let keepalive = flags & 2 != 0;
    let budget = (flags & 4 != 0).then(|| {
        wavesock::MemoryBudget::new((16 << 10) + usize::from(flags >> 6) * 8192).allowance(0)
    });
    let flush_all = flags & 8 != 0;
    let garbage = flags & 16 != 0;
    let close_at_end = flags & 32 != 0;

    let mut wire = BytesMut::new();
    let mut encoder = FrameEncoder::new(peer);
    let mut sent = peer_messages(&mut input, &mut encoder, &mut wire);
    // Only data messages reach the application's side of the check.
    sent.retain(Message::is_data);
    if garbage {
        let n = usize::from(input.byte()) % 32;
        wire.extend_from_slice(input.take(n));
    }
    if close_at_end {
        let close = Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")));
        encoder.encode_message(&close, &mut wire).unwrap();
    }
    let wire = wire.freeze();

    let start = Instant::now();
    let mut clock = start;
    let timers = Timers::default()
        .ping_interval(keepalive.then(|| Duration::from_secs(30)))
        .budget_wait(budget.as_ref().map(|_| Duration::from_secs(5)));
    let limits = Limits::default()
        .max_frame_size(1 << 20)
        .max_message_size(1 << 20)
        .budget(budget.clone());
    let inbox = Inbox::new(MessageDecoder::new(role, limits), BytesMut::new());
    let mut rx = Receiver::new(inbox, flush_all);
    let mut link = ReceiveLink {
        conn: Connection::new(role, timers, start),
        sent: Vec::new(),
        transport_ended: false,
        queued: 0,
    };
    // The engine's own read buffer (`in_buffer`).
    let mut scratch = BytesMut::with_capacity(FUZZ_SCRATCH);
    let mut other = BudgetAccount::new(budget.clone());
    let mut mem = FuzzMemory::default();
    let mut got: Vec<Message> = Vec::new();
    let mut at = 0;
    let mut failures = false;
    let mut did = Did::Start;
    let mut steps = 0;
    let ended = loop {
        steps += 1;
        assert!(steps < 200_000, "no end after {steps} steps");
        let now = clock;
        let step = if in_buffer {
            match rx.step_in(&mut link, did, &mut scratch, &mut mem, &|| now) {
                Stepped::Borrowed(data) => {
                    got.push(match data {
                        BorrowedData::Text(t) => Message::text(t.to_owned()),
                        BorrowedData::Binary(b) => Message::binary(b.to_vec()),
                    });
                    did = Did::Start;
                    continue;
                }
                Stepped::Step(step) => {
                    if !matches!(step, Step::Message(_) | Step::Flush) {
                        assert!(scratch.is_empty(), "{step:?} with the buffer not empty");
                    }
                    step
                }
            }
        } else {
            rx.step(&mut link, did, &mut mem, &|| now)
        };
        if let Some(b) = &budget {
            assert!(b.in_use() <= b.limit(), "budget over: {}", b.in_use());
        }
        // Once the input is spent, the engine reads what is left in full
        // and lets time pass.
        let (op, arg) = if input.is_empty() {
            (0, 255)
        } else {
            (input.byte(), input.byte())
        };
        // Now and then the replies queued reach a cork's worth.
        link.queued = if op & 0x40 != 0 { 16 << 10 } else { 0 };
        // A flush before the read: the engine writes all, or waits, or
        // fails; then reads as asked.
        let step = match step {
            Step::FlushRead(plan) => match op % 8 {
                7 if arg == 0 => {
                    failures = true;
                    did = Did::WriteFailed(io::ErrorKind::BrokenPipe.into());
                    continue;
                }
                7 => {
                    did = Did::FlushBlocked;
                    continue;
                }
                _ => Step::Read(plan),
            },
            step => step,
        };
        did = match step {
            Step::Message(msg) => {
                if msg.is_data() {
                    got.push(msg);
                }
                Did::Start
            }
            Step::Read(plan) => {
                let rest = &wire[at..];
                let read = match op % 8 {
                    5 => rest.is_empty(),
                    6 => arg != 0,
                    7 => false,
                    _ => true,
                };
                if !read && matches!(plan, Plan::Scratch { .. }) && !in_buffer {
                    // Room set aside for a read that did not happen (the
                    // step over the engine's buffer gives it back itself).
                    rx.inbox_mut().scratch_unused();
                }
                match op % 8 {
                    5 if !rest.is_empty() => Did::ReadPending,
                    6 if arg == 0 => {
                        failures = true;
                        Did::Read(Err(io::ErrorKind::ConnectionReset.into()))
                    }
                    7 => {
                        // Another connection takes budget or gives it back.
                        if arg & 1 == 0 {
                            let _ = other.try_set(Held::Fragments, usize::from(arg) * 128);
                        } else {
                            other.release_all();
                        }
                        Did::ReadPending
                    }
                    _ => {
                        let want = 1 + usize::from(arg) * (1 + usize::from(op >> 3));
                        let chunk = &rest[..rest.len().min(want)];
                        let inbox = rx.inbox_mut();
                        let n = match plan {
                            Plan::Scratch { limit } if in_buffer => {
                                assert!(scratch.is_empty(), "a read into a buffer left full");
                                let n = chunk.len().min(limit).min(FUZZ_SCRATCH);
                                scratch.extend_from_slice(&chunk[..n]);
                                n
                            }
                            Plan::Scratch { limit } => {
                                let n = chunk.len().min(limit).min(FUZZ_SCRATCH);
                                if n > 0 {
                                    // As the Stream hands it over (a read
                                    // of one whole message decoded there).
                                    let mut got = chunk[..n].to_vec();
                                    rx.received(&mut got, n == FUZZ_SCRATCH, &mut mem);
                                } else {
                                    inbox.scratch_unused();
                                }
                                n
                            }
                            Plan::Own => {
                                use bytes::BufMut;
                                let mut target = inbox.target();
                                let n = chunk.len().min(target.chunk_mut().len());
                                target.put_slice(&chunk[..n]);
                                inbox.read_done((n > 0).then_some(n), &mut mem);
                                n
                            }
                            Plan::Refused(g) => panic!("a read planned when refused: {g:?}"),
                        };
                        at += n;
                        Did::Read(Ok(n))
                    }
                }
            }
            Step::Flush if in_buffer => match op % 8 {
                // This engine writes all or waits.
                7 if arg == 0 => {
                    failures = true;
                    Did::WriteFailed(io::ErrorKind::BrokenPipe.into())
                }
                7 => Did::FlushBlocked,
                _ => Did::Flushed(false),
            },
            Step::Flush => match op % 8 {
                6 => Did::Flushed(true),
                7 if arg == 0 => {
                    failures = true;
                    Did::WriteFailed(io::ErrorKind::BrokenPipe.into())
                }
                7 => Did::FlushBlocked,
                _ => Did::Flushed(false),
            },
            Step::WriteNow | Step::WriteLast => Did::Start,
            Step::WaitForBudget(wanted) => {
                if budget.as_ref().is_some_and(|b| b.available() >= wanted) {
                    Did::BudgetReady
                } else if op % 2 == 0 && other.total() > 0 {
                    other.release_all();
                    Did::Start
                } else {
                    clock += Duration::from_secs(u64::from(arg % 8));
                    Did::Timer
                }
            }
            Step::Wait => {
                // Woken by input while some is left, else by the timer.
                if at < wire.len() && op % 4 != 0 {
                    Did::Start
                } else {
                    clock += Duration::from_secs(1 + u64::from(arg % 64));
                    Did::Timer
                }
            }
            Step::Finish { .. } => {
                if op % 4 == 3 {
                    clock += Duration::from_secs(u64::from(arg % 16));
                    Did::Timer
                } else {
                    Did::Finished
                }
            }
            Step::End(how) => break how,
            other => panic!("a step this engine does not know: {other:?}"),
        };
        if in_buffer && matches!(did, Did::ReadPending) && op & 0x80 != 0 && rx.read_pending(&link)
        {
            // Nothing to step for: woken by input while some is left,
            // else by the timer.
            did = if at < wire.len() {
                Did::Start
            } else {
                clock += Duration::from_secs(1 + u64::from(arg % 64));
                Did::Timer
            };
        }
    };
    rx.quit_scratch(&mut scratch);
    assert!(scratch.is_empty());
    assert!(rx.is_done());
    let now = clock;
    assert!(
        matches!(
            rx.step(&mut link, Did::Start, &mut mem, &|| now),
            Step::End(None)
        ),
        "ended once"
    );
    // Garbage may decode to messages of its own, after those sent.
    let k = got.len().min(sent.len());
    assert_eq!(got[..k], sent[..k], "handed out what was sent, in order");
    assert!(garbage || got.len() <= sent.len(), "more than was sent");
    if let Some(Ended::Error(e)) = &ended
        && e.close_code().is_some()
        && !failures
    {
        assert!(
            link.sent.iter().any(Message::is_close),
            "failed with {e} and sent no close frame"
        );
    }
    if !garbage && !failures && !keepalive && budget.is_none() {
        assert_eq!(got.len(), sent.len(), "nothing in the way: all arrive");
    }
}
