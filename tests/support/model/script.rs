//! Client scripts as data: what proptest generates and shrinks, and what a
//! regression case writes by hand. Every number in a script is small and
//! plain (lengths, seeds, cut points as fractions of 2^16), so a shrunk
//! script prints as something a test can be written from.

use proptest::prelude::*;

/// The servers' limits: small, so that scripts reach them cheaply.
pub const MAX_FRAME: usize = 16 << 10;
pub const MAX_MESSAGE: usize = 64 << 10;

/// A test case: the servers' settings and one to three clients, run at
/// once against a fresh server of each engine.
#[derive(Debug, Clone)]
pub struct Script {
    pub setup: Setup,
    pub clients: Vec<Client>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub budget: Budget,
    /// The hub's read buffer at its 4 KiB minimum, so that messages span
    /// reads (the Stream reads as it always does).
    pub small_hub_reads: bool,
    /// permessage-deflate on the server, and offered by every client
    /// (feature `deflate`).
    pub deflate: Deflate,
}

/// The server's permessage-deflate, by its policy: what it negotiates
/// decides whether a client may keep its compression context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deflate {
    Off,
    /// Context kept both ways.
    Takeover,
    /// No context takeover either way.
    Shared,
    /// Small windows for the server, no context takeover for the client
    /// (which does not offer `client_max_window_bits`).
    Dedicated,
}

impl Deflate {
    /// Whether a client may compress with the context of its earlier
    /// messages.
    pub fn client_takeover(self) -> bool {
        self == Deflate::Takeover
    }
}

/// A memory budget shared by the server's connections, large enough that
/// no script is refused for it: what it checks is the accounting (back to
/// 0, never past the limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    None,
    /// Every byte counted (`allowance(0)`).
    Counted,
    /// The default allowance per connection.
    Allowance,
}

#[derive(Debug, Clone)]
pub struct Client {
    pub handshake: Handshake,
    /// Bytes per read; 0 for as much as is there. A slow reader.
    pub read_size: u8,
    pub steps: Vec<Step>,
    pub end: End,
}

#[derive(Debug, Clone)]
pub enum Handshake {
    /// The upgrade request, written at `cuts` (fractions of its length)
    /// with `pause_ms` between the pieces; `wait` for the `101` before
    /// going on, else the steps follow the request at once.
    Good {
        cuts: Vec<u16>,
        pause_ms: u8,
        wait: bool,
    },
    /// A request the server must refuse; the steps are not run.
    Bad(Bad),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// A plain GET, no `Upgrade`.
    NoUpgrade,
    /// `Sec-WebSocket-Version: 8`.
    Version8,
    NoKey,
    /// A key that is not 16 bytes in base64.
    ShortKey,
    Post,
    /// Not HTTP.
    Garbage,
    /// A head over `max_handshake_size`.
    TooLarge,
    /// The first part of a good request (a fraction of it), then FIN.
    Truncated(u16),
}

#[derive(Debug, Clone)]
pub enum Step {
    /// The units' frames as one byte string, written in pieces cut at
    /// `cuts`, with `pause_ms` between them.
    Write {
        units: Vec<Unit>,
        cuts: Vec<u16>,
        pause_ms: u8,
    },
    /// Wait until everything the model says must have come back so far
    /// has (reading again if stopped).
    Sync,
    /// Stop reading for a while; writing goes on.
    StopReading(u16),
    Pause(u8),
}

#[derive(Debug, Clone)]
pub enum Unit {
    /// A data message of `len` bytes made from `seed`, in fragments cut at
    /// `frags` (and wherever `MAX_FRAME` needs), with a ping of the given
    /// length after the fragment `pings.0` points at.
    Data {
        text: bool,
        len: u32,
        seed: u8,
        frags: Vec<u16>,
        pings: Vec<(u16, u8)>,
        /// Sent compressed, when permessage-deflate is on.
        compress: bool,
    },
    Ping(u8),
    /// Pings back to back.
    Pings(u16),
    /// An unsolicited pong.
    Pong(u8),
    /// The text `close`: the echo server closes with 4000 "asked to".
    ServerClose,
    /// The client's close frame.
    Close(Close),
    /// Something the server must refuse.
    Bad(Violation),
}

#[derive(Debug, Clone)]
pub enum Close {
    Empty,
    /// A code (valid or not) and a reason of `reason` bytes.
    Code(u16, u8),
    /// A one-byte payload.
    OneByte,
    /// A valid code and a reason that is not UTF-8.
    BadReason,
    /// 126 bytes: over what a control frame holds.
    Long,
}

#[derive(Debug, Clone)]
pub enum Violation {
    /// A client frame without a mask.
    Unmasked,
    /// A reserved opcode (3 to 7, 11 to 15).
    Opcode(u8),
    /// RSV bits without an extension.
    Rsv(u8),
    FragmentedPing,
    LongPing,
    /// A continuation with no message started.
    Continuation,
    /// A new data frame inside a fragmented message.
    Interleaved,
    /// Text with a bad sequence (`kind`) spliced in at `at`, in fragments.
    BadUtf8 {
        len: u16,
        at: u16,
        kind: u8,
        frags: Vec<u16>,
    },
    /// One frame over `MAX_FRAME` by `extra + 1` bytes.
    BigFrame(u16),
    /// Fragments under `MAX_FRAME` adding up to over `MAX_MESSAGE`.
    BigMessage(u16),
    /// RSV1 on a continuation (1002 with or without permessage-deflate).
    RsvContinuation,
    /// A compressed frame whose payload is not deflate data.
    BadDeflate,
    /// A few compressed bytes that inflate to over `MAX_MESSAGE`.
    Bomb(u16),
}

#[derive(Debug, Clone)]
pub enum End {
    /// A close frame with this code (1000 if it is not one a client may
    /// send), then read to the end.
    Close(u16),
    /// `shutdown(SHUT_WR)`, then read to the end.
    Fin,
    /// `SO_LINGER` 0 and drop: a reset.
    Rst,
    /// Wait for the server's close and answer it; a close of our own if
    /// the server is not closing.
    Answer,
    /// The first part (a fraction) of a text frame, then FIN.
    Cut(u16),
    /// The first part of a text frame, then a reset.
    CutRst(u16),
}

/// A fraction of 2^16 of `len`: a cut point.
pub fn at(frac: u16, len: usize) -> usize {
    (frac as usize * len) >> 16
}

/// Text of about `len` bytes (at most), never the word `close`.
pub fn text(len: usize, seed: u8) -> String {
    const CHARS: [&[char]; 4] = [
        &['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'k', 'm', 'n', 'p'],
        &['a', 'é', 'ß', 'z'],
        &['€', 'x', '中', 'y'],
        &['😀', 'a', 'é', '€'],
    ];
    let set = CHARS[usize::from(seed % 4)];
    let mut s = String::with_capacity(len);
    let mut i = usize::from(seed);
    loop {
        let c = set[i % set.len()];
        if s.len() + c.len_utf8() > len {
            break;
        }
        s.push(c);
        i = i.wrapping_mul(5).wrapping_add(3);
    }
    if s == "close" {
        s.insert(0, 'x');
    }
    s
}

pub fn binary(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(13)) ^ (i >> 8) as u8)
        .collect()
}

/// The bad byte sequences of `Violation::BadUtf8`.
pub const BAD_UTF8: [&[u8]; 6] = [
    &[0x80],                   // a lone continuation byte
    &[0xc0, 0xaf],             // overlong
    &[0xed, 0xa0, 0x80],       // a surrogate
    &[0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
    &[0xff],
    &[0xe2, 0x82], // cut short (invalid unless it ends a message, and then too)
];

/// The valid close codes a script picks from, and the invalid ones.
pub const CODES: [u16; 28] = [
    1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000,
    4999, // valid
    0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535, // not on the wire
];

// ------------------------------------------------------------ strategies

fn cuts(max: usize) -> impl Strategy<Value = Vec<u16>> {
    prop::collection::vec(any::<u16>(), 0..=max)
}

fn data() -> impl Strategy<Value = Unit> {
    let len = prop_oneof![
        8 => 0u32..64,
        3 => 64u32..2048,
        1 => 2048u32..=(MAX_MESSAGE as u32),
    ];
    (
        any::<bool>(),
        len,
        any::<u8>(),
        cuts(4),
        prop::collection::vec((any::<u16>(), 0u8..=125), 0..=2),
        prop::bool::weighted(0.7),
    )
        .prop_map(|(text, len, seed, frags, pings, compress)| Unit::Data {
            text,
            len,
            seed,
            frags,
            pings,
            compress,
        })
}

fn close() -> impl Strategy<Value = Close> {
    prop_oneof![
        2 => Just(Close::Empty),
        6 => (prop::sample::select(&CODES[..]), 0u8..=123).prop_map(|(c, r)| Close::Code(c, r)),
        1 => Just(Close::OneByte),
        1 => Just(Close::BadReason),
        1 => Just(Close::Long),
    ]
}

fn violation() -> impl Strategy<Value = Violation> {
    prop_oneof![
        Just(Violation::Unmasked),
        prop::sample::select(vec![3u8, 4, 5, 6, 7, 11, 12, 13, 14, 15]).prop_map(Violation::Opcode),
        (1u8..8).prop_map(Violation::Rsv),
        Just(Violation::FragmentedPing),
        Just(Violation::LongPing),
        Just(Violation::Continuation),
        Just(Violation::Interleaved),
        (0u16..2000, any::<u16>(), 0u8..6, cuts(3)).prop_map(|(len, at, kind, frags)| {
            Violation::BadUtf8 {
                len,
                at,
                kind,
                frags,
            }
        }),
        (0u16..4096).prop_map(Violation::BigFrame),
        (0u16..4096).prop_map(Violation::BigMessage),
        Just(Violation::RsvContinuation),
        Just(Violation::BadDeflate),
        (0u16..4096).prop_map(Violation::Bomb),
    ]
}

fn unit() -> impl Strategy<Value = Unit> {
    prop_oneof![
        12 => data(),
        4 => (0u8..=125).prop_map(Unit::Ping),
        1 => (2u16..200).prop_map(Unit::Pings),
        2 => (0u8..=125).prop_map(Unit::Pong),
        1 => Just(Unit::ServerClose),
        1 => close().prop_map(Unit::Close),
        1 => violation().prop_map(Unit::Bad),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (prop::collection::vec(unit(), 1..=5), cuts(6), 0u8..=15).prop_map(
            |(units, cuts, pause_ms)| Step::Write {
                units,
                cuts,
                pause_ms,
            }
        ),
        2 => Just(Step::Sync),
        1 => (0u16..=300).prop_map(Step::StopReading),
        1 => (0u8..=40).prop_map(Step::Pause),
    ]
}

fn handshake() -> impl Strategy<Value = Handshake> {
    let bad = prop_oneof![
        Just(Bad::NoUpgrade),
        Just(Bad::Version8),
        Just(Bad::NoKey),
        Just(Bad::ShortKey),
        Just(Bad::Post),
        Just(Bad::Garbage),
        Just(Bad::TooLarge),
        any::<u16>().prop_map(Bad::Truncated),
    ];
    prop_oneof![
        12 => (cuts(3), 0u8..=10, any::<bool>()).prop_map(|(cuts, pause_ms, wait)| {
            Handshake::Good {
                cuts,
                pause_ms,
                wait,
            }
        }),
        1 => bad.prop_map(Handshake::Bad),
    ]
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        4 => prop::sample::select(vec![1000u16, 1001, 3000, 4999]).prop_map(End::Close),
        3 => Just(End::Fin),
        2 => Just(End::Rst),
        2 => Just(End::Answer),
        1 => any::<u16>().prop_map(End::Cut),
        1 => any::<u16>().prop_map(End::CutRst),
    ]
}

fn client() -> impl Strategy<Value = Client> {
    (
        handshake(),
        prop_oneof![4 => Just(0u8), 1 => 1u8..=97],
        prop::collection::vec(step(), 0..=6),
        end(),
    )
        .prop_map(|(handshake, read_size, steps, end)| Client {
            handshake,
            read_size,
            steps,
            end,
        })
}

fn deflate() -> impl Strategy<Value = Deflate> {
    #[cfg(feature = "deflate")]
    return prop_oneof![
        3 => Just(Deflate::Off),
        2 => Just(Deflate::Takeover),
        1 => Just(Deflate::Shared),
        1 => Just(Deflate::Dedicated),
    ];
    #[cfg(not(feature = "deflate"))]
    Just(Deflate::Off)
}

pub fn script() -> impl Strategy<Value = Script> {
    let setup = (
        prop_oneof![
            2 => Just(Budget::None),
            1 => Just(Budget::Counted),
            1 => Just(Budget::Allowance),
        ],
        any::<bool>(),
        deflate(),
    )
        .prop_map(|(budget, small_hub_reads, deflate)| Setup {
            budget,
            small_hub_reads,
            deflate,
        });
    let clients = prop_oneof![
        4 => prop::collection::vec(client(), 1..=1),
        1 => prop::collection::vec(client(), 2..=3),
    ];
    (setup, clients).prop_map(|(setup, clients)| Script { setup, clients })
}

// ----------------------------------------------------------- shorthands
// For scripts written by hand.

impl Setup {
    pub const PLAIN: Setup = Setup {
        budget: Budget::None,
        small_hub_reads: false,
        deflate: Deflate::Off,
    };
}

impl Handshake {
    /// The request in one write, the steps after the `101`.
    pub fn good() -> Handshake {
        Handshake::Good {
            cuts: vec![],
            pause_ms: 0,
            wait: true,
        }
    }
}

impl Unit {
    pub fn text(len: u32) -> Unit {
        Unit::Data {
            text: true,
            len,
            seed: 0,
            frags: vec![],
            pings: vec![],
            compress: false,
        }
    }
}

impl Step {
    /// The units in one write.
    pub fn write(units: Vec<Unit>) -> Step {
        Step::Write {
            units,
            cuts: vec![],
            pause_ms: 0,
        }
    }
}

impl Client {
    pub fn new(steps: Vec<Step>, end: End) -> Client {
        Client {
            handshake: Handshake::good(),
            read_size: 0,
            steps,
            end,
        }
    }
}

impl Script {
    pub fn one(client: Client) -> Script {
        Script {
            setup: Setup::PLAIN,
            clients: vec![client],
        }
    }
}
