//! The fuzzing properties of wavesock, written once.
//!
//! Each `pub fn` takes the fuzzer's bytes and panics when a property fails.
//! The cargo-fuzz targets in `fuzz_targets/` call them; the root crate's
//! `tests/fuzz_props.rs` (proptest inputs) and `tests/fuzz_regressions.rs`
//! (every file under `fuzz/regressions/<target>/`) include this file with
//! `#[path]`, so a crash the fuzzer finds is replayed by `cargo test` on the
//! same function.
//!
//! Only the public API is used: the sans-IO core (`wavesock::proto`), the
//! handshake functions and the codec.

// Included as a module by the root crate's tests, where not every target
// is used by every test binary.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use wavesock::handshake::server::{
    accept_response, check_request, error_response, parse_request, write_response,
};
use wavesock::handshake::{client, derive_accept_key};
use wavesock::proto::conn::{Connection, Phase, State, Timers};
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
/// - 1: configurations from the input: what the server answers to the
///   client's offer, the client accepts with the same parameters;
/// - 2: arbitrary bytes as a compressed message under a small message
///   limit: the decoder's heap grows by at most the limit plus the
///   inflater's fixed slack, and a message it hands out is within it;
/// - 3: messages cut from the input, compressed and inflated again, come
///   out as they went in, whatever the negotiated windows and context rule.
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

fn deflate_config(input: &mut Input<'_>) -> wavesock::DeflateConfig {
    let b = input.byte();
    let bits = input.byte();
    wavesock::DeflateConfig::default()
        .server_no_context_takeover(b & 1 != 0)
        .client_no_context_takeover(b & 2 != 0)
        .server_max_window_bits(window_bits(bits & 0x0f))
        .client_max_window_bits(window_bits(bits >> 4))
        .compression_threshold(0)
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
    let mut response = http::HeaderMap::new();
    response.insert("sec-websocket-extensions", answer.clone());
    match check_response(&client, &response) {
        Ok(Some(seen)) => {
            // client_no_context_takeover in an offer is a hint the server
            // may leave out of its answer (RFC 7692 §7.1.1.1): the client
            // keeps its promise, the server's inflater copes either way.
            let mut seen_by_server = seen;
            seen_by_server.client_no_context_takeover &=
                agreed.client_no_context_takeover || !client.client_no_context_takeover;
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

    /// The inflater's own memory: zlib's state and the window (at most
    /// 32 KiB), plus the output buffer's growth step.
    pub const INFLATE_SLACK: usize = 64 << 10;

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
        let config = wavesock::DeflateConfig::default()
            .level(u32::from(input.byte() % 10))
            .compression_threshold(0);
        // Client to server, the client compressing with its own window.
        let mut sender_dec = MessageDecoder::new(Role::Client, Limits::default());
        let mut sender = FrameEncoder::new(Role::Client);
        enable(&mut sender_dec, &mut sender, &p, &config);
        let mut receiver = MessageDecoder::new(Role::Server, Limits::default());
        let mut receiver_enc = FrameEncoder::new(Role::Server);
        enable(&mut receiver, &mut receiver_enc, &p, &config);
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
    let budget_wait = (budget != 0).then(|| ms(budget));
    let timers = timers.budget_wait(budget_wait);
    let start = Instant::now();
    let mut now = start;
    let mut c = Connection::new(role, timers, now);

    let mut out = Sent::default();
    let mut close_sent_seen = false;
    // When the memory budget's wait started, as the model sees it.
    let mut budget_since: Option<Instant> = None;

    while !input.is_empty() {
        let before = c.phase();
        let op = input.byte();
        let arg = input.byte();
        let payload = bytes::Bytes::copy_from_slice(input.take(usize::from(arg % 8)));
        match op % 12 {
            0 => {
                let sent = c.is_close_sent();
                c.handle_frame(&Message::Ping(payload.clone()), now);
                if !sent {
                    out.pongs.push_back(payload);
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
                let ok = c.check_send(opcode, arg & 4 != 0).is_ok();
                if ok {
                    assert!(!c.is_close_sent(), "a send allowed after our close");
                }
            }
            8 => {
                // A caller writes what is owed before its own close.
                out.drain(&mut c);
                if c.send_close(now) {
                    out.closes += 1;
                    assert!(out.closes <= 1, "a second close frame allowed");
                }
            }
            9 => {
                c.handle_transport_end();
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
}

impl Sent {
    fn drain(&mut self, c: &mut Connection) {
        while let Some(msg) = c.poll_transmit() {
            assert!(!self.close_polled, "{msg:?} owed after our close left");
            match msg {
                Message::Pong(p) => {
                    assert_eq!(self.pongs.pop_front(), Some(p), "an unexpected pong");
                }
                Message::Close(_) => {
                    self.closes += 1;
                    self.close_polled = true;
                    assert!(c.is_close_sent());
                }
                Message::Ping(_) => assert_eq!(self.closes, 0, "a ping after our close"),
                other => panic!("the core owes {other:?}"),
            }
            assert!(self.closes <= 1, "a second close frame");
        }
    }
}
