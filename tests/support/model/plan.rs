//! A client script turned into what the client does on the wire (bytes,
//! pieces, pauses, sync points) and, through the model, what must come
//! back.

use std::time::Duration;

use flate2::{Compress, Compression, FlushCompress};

use super::reference::{OURS_CODE, OURS_REASON, Phase, Reference, WireFrame};
use super::script::{
    BAD_UTF8, Bad, Client, Close, Deflate, End, Handshake, MAX_FRAME, MAX_MESSAGE, Setup, Step,
    Unit, Violation, at, binary, text,
};

/// What the client waits for at a `Sync`.
#[derive(Debug, Clone)]
pub struct Want {
    /// Echoes received.
    pub echoes: usize,
    /// A pong with this payload (the newest ping's).
    pub pong: Option<Vec<u8>>,
    /// The server's close frame.
    pub close: bool,
    /// The conversation is over: what the split Stream's sending task had
    /// not sent by then may never come.
    pub done: bool,
}

#[derive(Debug, Clone)]
pub enum Action {
    /// Bytes written in pieces ending at `cuts`.
    Write {
        bytes: Vec<u8>,
        cuts: Vec<usize>,
        pause: Duration,
    },
    Sync(Want),
    StopReading(Duration),
    Pause(Duration),
    /// The last actions: the client's close frame, FIN, the answer to the
    /// server's close (once it came), part of a frame and FIN, a reset,
    /// or only reading to the end.
    Close(Vec<u8>),
    Fin,
    Answer(Vec<u8>),
    Cut(Vec<u8>),
    /// These bytes (part of a frame), then a reset.
    Rst(Vec<u8>),
    Read,
}

#[derive(Debug)]
pub struct Plan {
    pub index: usize,
    pub request: Vec<u8>,
    pub request_cuts: Vec<usize>,
    pub request_pause: Duration,
    pub wait_upgrade: bool,
    pub bad: Option<Bad>,
    pub read_size: usize,
    pub actions: Vec<Action>,
    /// The model after the whole script.
    pub model: Reference,
    /// The client resets the connection at its end.
    pub resets: bool,
    /// permessage-deflate offered (and the server is set to take it).
    pub deflate: bool,
}

/// The upgrade request of client `index`: its path names it to the server.
pub fn request(index: usize, deflate: bool) -> Vec<u8> {
    let offer = if deflate {
        "Sec-WebSocket-Extensions: permessage-deflate\r\n"
    } else {
        ""
    };
    format!(
        "GET /c{index} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{offer}Sec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes()
}

fn bad_request(index: usize, bad: Bad) -> Vec<u8> {
    let good = String::from_utf8(request(index, false)).unwrap();
    match bad {
        Bad::NoUpgrade => format!("GET /c{index} HTTP/1.1\r\nHost: x\r\n\r\n"),
        Bad::Version8 => good.replace("Version: 13", "Version: 8"),
        Bad::NoKey => good.replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", ""),
        Bad::ShortKey => good.replace("dGhlIHNhbXBsZSBub25jZQ==", "AAAA"),
        Bad::Post => good.replacen("GET", "POST", 1),
        Bad::Garbage => "HELLO THERE\r\n\r\n".to_owned(),
        Bad::TooLarge => good.replace(
            "Host: x\r\n",
            &format!("Host: x\r\nX-Pad: {}\r\n", "a".repeat(9000)),
        ),
        Bad::Truncated(frac) => {
            let keep = at(frac, good.len());
            good[..keep].to_owned()
        }
    }
    .into_bytes()
}

/// Frames as a client writes them: masked (unless not), with the next of
/// a sequence of keys.
struct Encoder {
    keys: u32,
    pings: usize,
    pongs: usize,
    /// The client's compressor once permessage-deflate is on, and whether
    /// it keeps its context from message to message.
    deflate: Option<(Compress, bool)>,
}

/// A message compressed as RFC 7692 §7.2.1 has it: deflate, flushed, the
/// last four bytes (`00 00 ff ff`) taken off.
fn compress(c: &mut Compress, takeover: bool, data: &[u8]) -> Vec<u8> {
    if !takeover {
        c.reset();
    }
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    let start = c.total_in();
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(1024));
        }
        let done = (c.total_in() - start) as usize;
        c.compress_vec(&data[done..], &mut out, FlushCompress::Sync)
            .expect("deflate");
        if (c.total_in() - start) as usize == data.len() && out.len() < out.capacity() {
            break;
        }
    }
    // zlib skips a flush with nothing new since the last: an empty
    // message after another, which RFC 7692 §7.2.3.6 sends as one empty
    // stored block's first byte.
    if out.is_empty() {
        return vec![0x00];
    }
    assert!(out.ends_with(&[0, 0, 0xff, 0xff]), "a flushed block");
    out.truncate(out.len() - 4);
    out
}

impl Encoder {
    fn key(&mut self) -> [u8; 4] {
        self.keys = self.keys.wrapping_add(1);
        self.keys.wrapping_mul(0x9e37_79b9).to_be_bytes()
    }

    fn encode(&mut self, out: &mut Vec<u8>, f: &WireFrame) {
        out.push(u8::from(f.fin) << 7 | (f.rsv & 7) << 4 | (f.opcode & 0xf));
        let m = if f.masked { 0x80 } else { 0 };
        match f.payload.len() {
            n @ 0..=125 => out.push(m | n as u8),
            n @ 126..=0xffff => {
                out.push(m | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(m | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        if f.masked {
            let k = self.key();
            out.extend_from_slice(&k);
            out.extend(f.payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        } else {
            out.extend_from_slice(&f.payload);
        }
    }

    fn ping(&mut self, len: u8) -> WireFrame {
        self.pings += 1;
        frame(true, 9, tagged(format!("p{}", self.pings), len))
    }

    fn pong(&mut self, len: u8) -> WireFrame {
        self.pongs += 1;
        frame(true, 10, tagged(format!("q{}", self.pongs), len))
    }

    /// `data` compressed: with the connection's compressor, or (without
    /// permessage-deflate, for a frame the server must refuse) one of its
    /// own.
    fn compress(&mut self, data: &[u8]) -> Vec<u8> {
        match &mut self.deflate {
            Some((c, takeover)) => compress(c, *takeover, data),
            None => compress(&mut Compress::new(Compression::new(3), false), false, data),
        }
    }
}

/// A payload of `len` bytes (at least the tag's) starting with a tag, so
/// that each ping is told from the others by its pong.
fn tagged(tag: String, len: u8) -> Vec<u8> {
    let mut p = tag.into_bytes();
    while p.len() < usize::from(len) {
        p.push(b'.');
    }
    p
}

fn frame(fin: bool, opcode: u8, payload: Vec<u8>) -> WireFrame {
    WireFrame {
        fin,
        rsv: 0,
        opcode,
        masked: true,
        payload,
    }
}

/// `payload` cut at `cuts` (fractions) and wherever a piece would be over
/// `MAX_FRAME`: the fragments' bounds.
fn pieces(len: usize, cuts: &[u16]) -> Vec<(usize, usize)> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| at(c, len)).collect();
    points.push(0);
    points.push(len);
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    for w in points.windows(2) {
        let (mut a, b) = (w[0], w[1]);
        while b - a > MAX_FRAME {
            out.push((a, a + MAX_FRAME));
            a += MAX_FRAME;
        }
        out.push((a, b));
    }
    if out.is_empty() {
        out.push((0, 0));
    }
    out
}

/// A message's frames: fragments of `payload` (compressed: RSV1 on the
/// first), with `pings` after the fragments they point at.
fn message(
    enc: &mut Encoder,
    opcode: u8,
    payload: &[u8],
    cuts: &[u16],
    pings: &[(u16, u8)],
    compressed: bool,
) -> Vec<WireFrame> {
    let bounds = pieces(payload.len(), cuts);
    let mut out = Vec::new();
    for (i, &(a, b)) in bounds.iter().enumerate() {
        let op = if i == 0 { opcode } else { 0 };
        let mut f = frame(i + 1 == bounds.len(), op, payload[a..b].to_vec());
        if i == 0 && compressed {
            f.rsv = 4;
        }
        out.push(f);
        for &(where_, len) in pings {
            if at(where_, bounds.len()) == i {
                out.push(enc.ping(len));
            }
        }
    }
    out
}

fn close_payload(c: &Close) -> Vec<u8> {
    match *c {
        Close::Empty => Vec::new(),
        Close::Code(code, reason) => {
            let mut p = code.to_be_bytes().to_vec();
            p.extend_from_slice(text(usize::from(reason), code as u8).as_bytes());
            p
        }
        Close::OneByte => vec![0x03],
        Close::BadReason => vec![0x03, 0xe8, 0xff, 0xfe],
        Close::Long => {
            let mut p = 1000u16.to_be_bytes().to_vec();
            p.extend_from_slice(&[b'x'; 124]);
            p
        }
    }
}

fn unit_frames(enc: &mut Encoder, unit: &Unit) -> Vec<WireFrame> {
    match unit {
        Unit::Data {
            text: is_text,
            len,
            seed,
            frags,
            pings,
            compress,
        } => {
            let len = *len as usize;
            let (op, mut payload) = if *is_text {
                (1, text(len, *seed).into_bytes())
            } else {
                (2, binary(len, *seed))
            };
            let compressed = *compress && enc.deflate.is_some();
            if compressed {
                payload = enc.compress(&payload);
            }
            message(enc, op, &payload, frags, pings, compressed)
        }
        Unit::Ping(len) => vec![enc.ping(*len)],
        Unit::Pings(n) => (0..*n).map(|_| enc.ping(0)).collect(),
        Unit::Pong(len) => vec![enc.pong(*len)],
        Unit::ServerClose => vec![frame(true, 1, b"close".to_vec())],
        Unit::Close(c) => vec![frame(true, 8, close_payload(c))],
        Unit::Bad(v) => match v {
            Violation::Unmasked => vec![WireFrame {
                masked: false,
                ..frame(true, 1, b"hi".to_vec())
            }],
            Violation::Opcode(op) => vec![frame(true, *op, b"op".to_vec())],
            Violation::Rsv(bits) => vec![WireFrame {
                // RSV1 alone marks a compressed message once
                // permessage-deflate is on: RSV2 makes it a violation.
                rsv: if *bits == 4 && enc.deflate.is_some() {
                    6
                } else {
                    *bits
                },
                ..frame(true, 1, b"hi".to_vec())
            }],
            Violation::FragmentedPing => vec![frame(false, 9, b"f".to_vec())],
            Violation::LongPing => vec![frame(true, 9, vec![b'l'; 126])],
            Violation::Continuation => vec![frame(true, 0, b"x".to_vec())],
            Violation::Interleaved => vec![
                frame(false, 1, b"ab".to_vec()),
                frame(true, 2, b"cd".to_vec()),
            ],
            Violation::BadUtf8 {
                len,
                at: where_,
                kind,
                frags,
            } => {
                let good = text(usize::from(*len), *kind);
                let mut split = at(*where_, good.len());
                while !good.is_char_boundary(split) {
                    split -= 1;
                }
                let mut payload = good.as_bytes()[..split].to_vec();
                payload.extend_from_slice(BAD_UTF8[usize::from(*kind) % BAD_UTF8.len()]);
                payload.extend_from_slice(&good.as_bytes()[split..]);
                message(enc, 1, &payload, frags, &[], false)
            }
            Violation::BigFrame(extra) => {
                vec![frame(
                    true,
                    2,
                    binary(MAX_FRAME + 1 + usize::from(*extra), 7),
                )]
            }
            Violation::BigMessage(extra) => {
                let payload = binary(MAX_MESSAGE + 1 + usize::from(*extra), 9);
                message(enc, 2, &payload, &[], &[], false)
            }
            Violation::RsvContinuation => vec![
                frame(false, 1, b"ab".to_vec()),
                WireFrame {
                    rsv: 4,
                    ..frame(true, 0, b"cd".to_vec())
                },
            ],
            // A block of the reserved type 3.
            Violation::BadDeflate => vec![WireFrame {
                rsv: 4,
                ..frame(true, 2, vec![0x07, 0x00])
            }],
            Violation::Bomb(extra) => {
                let payload = enc.compress(&vec![0; MAX_MESSAGE + 1 + usize::from(*extra)]);
                message(enc, 2, &payload, &[], &[], true)
            }
        },
    }
}

/// The plan of client `index` of a script.
pub fn plan(index: usize, client: &Client, setup: &Setup) -> Plan {
    let deflate = setup.deflate != Deflate::Off;
    let mut enc = Encoder {
        keys: index as u32 * 7919,
        pings: 0,
        pongs: 0,
        deflate: deflate.then(|| {
            (
                Compress::new(Compression::new(3), false),
                setup.deflate.client_takeover(),
            )
        }),
    };
    let mut model = Reference::new(deflate);
    let mut actions = Vec::new();
    let (request, request_cuts, request_pause, wait_upgrade, bad) = match &client.handshake {
        Handshake::Good {
            cuts,
            pause_ms,
            wait,
        } => {
            let r = request(index, deflate);
            let mut c: Vec<usize> = cuts.iter().map(|&f| at(f, r.len())).collect();
            c.sort_unstable();
            c.dedup();
            (
                r,
                c,
                Duration::from_millis(u64::from(*pause_ms)),
                *wait,
                None,
            )
        }
        Handshake::Bad(b) => (
            bad_request(index, *b),
            Vec::new(),
            Duration::ZERO,
            false,
            Some(*b),
        ),
    };
    if let Some(b) = bad {
        // A refused request: nothing is sent after it but its end.
        let last = match (&client.end, b) {
            (End::Rst | End::CutRst(_), _) => Action::Rst(Vec::new()),
            (_, Bad::Truncated(_)) | (End::Fin | End::Cut(_), _) => Action::Fin,
            _ => Action::Read,
        };
        actions.push(last);
        return Plan {
            index,
            request,
            request_cuts,
            request_pause,
            wait_upgrade,
            bad,
            read_size: usize::from(client.read_size),
            actions,
            model,
            resets: matches!(client.end, End::Rst | End::CutRst(_)),
            deflate: false,
        };
    }
    for step in &client.steps {
        match step {
            Step::Write {
                units,
                cuts,
                pause_ms,
            } => {
                let mut bytes = Vec::new();
                for u in units {
                    for f in unit_frames(&mut enc, u) {
                        enc.encode(&mut bytes, &f);
                        model.frame(&f);
                    }
                }
                model.turn();
                let mut c: Vec<usize> = cuts.iter().map(|&f| at(f, bytes.len())).collect();
                c.sort_unstable();
                c.dedup();
                actions.push(Action::Write {
                    bytes,
                    cuts: c,
                    pause: Duration::from_millis(u64::from(*pause_ms)),
                });
            }
            Step::Sync => actions.push(Action::Sync(Want {
                echoes: model.echoes.len(),
                pong: match model.phase {
                    Phase::Open => model.pings.last().cloned(),
                    _ => None,
                },
                close: match model.phase {
                    Phase::Open => false,
                    Phase::Ours => true,
                    Phase::Done => model.close_frame().is_some(),
                },
                done: model.phase == Phase::Done,
            })),
            Step::StopReading(ms) => {
                actions.push(Action::StopReading(Duration::from_millis(u64::from(*ms))))
            }
            Step::Pause(ms) => actions.push(Action::Pause(Duration::from_millis(u64::from(*ms)))),
        }
    }
    let close_of = |enc: &mut Encoder, model: &mut Reference, payload: Vec<u8>| {
        let f = frame(true, 8, payload);
        let mut bytes = Vec::new();
        enc.encode(&mut bytes, &f);
        model.frame(&f);
        bytes
    };
    let last = match (&client.end, model.phase) {
        (End::Rst, _) => {
            model.rst();
            Action::Rst(Vec::new())
        }
        (End::CutRst(frac), _) => {
            let mut bytes = Vec::new();
            enc.encode(&mut bytes, &frame(true, 1, text(100, 1).into_bytes()));
            bytes.truncate(at(*frac, bytes.len()));
            model.rst();
            Action::Rst(bytes)
        }
        (End::Fin, _) => {
            model.fin();
            Action::Fin
        }
        (End::Cut(frac), _) => {
            let mut bytes = Vec::new();
            enc.encode(&mut bytes, &frame(true, 1, text(100, 1).into_bytes()));
            bytes.truncate(at(*frac, bytes.len()));
            model.fin();
            Action::Cut(bytes)
        }
        (End::Close(_) | End::Answer, Phase::Done) => Action::Read,
        (End::Answer, Phase::Ours) => {
            let mut p = OURS_CODE.to_be_bytes().to_vec();
            p.extend_from_slice(OURS_REASON);
            Action::Answer(close_of(&mut enc, &mut model, p))
        }
        (End::Close(code), _) => {
            let mut p = code.to_be_bytes().to_vec();
            p.extend_from_slice(b"bye");
            Action::Close(close_of(&mut enc, &mut model, p))
        }
        (End::Answer, _) => {
            let p = 1000u16.to_be_bytes().to_vec();
            Action::Close(close_of(&mut enc, &mut model, p))
        }
    };
    model.turn();
    actions.push(last);
    Plan {
        index,
        request,
        request_cuts,
        request_pause,
        wait_upgrade,
        bad,
        read_size: usize::from(client.read_size),
        actions,
        model,
        resets: matches!(client.end, End::Rst | End::CutRst(_)),
        deflate,
    }
}
