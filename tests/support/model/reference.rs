//! The model: what RFC 6455 and wavesock's documented rules say an echo
//! server must do with the frames a client sends, written from the RFC and
//! the guide, not from the library. It reads the client's frames in order
//! and keeps what must come back: the data echoed (the server echoes each
//! whole message, and closes with 4000 "asked to" on the text `close`),
//! the pings owed a pong, and how the conversation ends.

use flate2::{Decompress, FlushDecompress};

use super::script::{MAX_FRAME, MAX_MESSAGE};

/// The pongs a connection owes at once, at most: past that, a ping's pong
/// takes the place of the newest one owed (RFC 6455 §5.5.3 lets an
/// endpoint answer only the most recent of the pings it has not answered).
/// The documented rule (README's "up to 16 owed at once; past that the
/// newest ping is answered", `proto::conn`'s docs), stated here rather
/// than imported, so that a change to the library's bound fails the
/// harness instead of moving it.
pub const OWED_PONGS: usize = 16;

/// The server's close on the text `close`.
pub const OURS_CODE: u16 = 4000;
pub const OURS_REASON: &[u8] = b"asked to";

/// One client frame, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireFrame {
    pub fin: bool,
    pub rsv: u8,
    pub opcode: u8,
    pub masked: bool,
    pub payload: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Open,
    /// The text `close` came: our close frame is owed or sent; the server
    /// reads on only for the client's answer.
    Ours,
    Done,
}

/// How the conversation ended, as far as the client's bytes decide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The client's close frame came first: the server answers with this
    /// payload (the client's code and reason, or nothing) and ends cleanly.
    Answered(Vec<u8>),
    /// The client broke a rule: the server closes with this code.
    Failed(u16),
    /// Our close first, then the client's answer.
    Ours(After),
    /// The client's FIN, without a close frame: an error end, no close
    /// frame from the server.
    Fin,
    /// The client reset the connection.
    Rst,
}

/// What the protocol core alone hears of a conversation, for a caller
/// that writes what the core owes only at the end of each of the
/// client's writes (a turn) and holds the close the text `close` asks for
/// to the end of that turn too: the pattern the bound on owed pongs is
/// for (see [`OWED_PONGS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreEvent {
    /// A ping, with its payload.
    Ping(Vec<u8>),
    /// The text `close`: a close is asked for, sent when the turn ends.
    CloseAsked,
    /// The turn ends: the caller takes every frame owed, then sends the
    /// close asked for, if one was.
    Turn,
}

/// What followed our close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// The client's close frame (its payload): a clean end.
    Close(Vec<u8>),
    /// FIN instead: a clean end too (the guide's "Closing").
    Fin,
    Rst,
    /// A frame the server refuses, or a close frame it refuses: the end is
    /// an error or not (the hub drops what follows a close unheard), but
    /// nothing more is sent.
    Refused,
}

/// The server's inflater, when permessage-deflate is on. It keeps its
/// context from message to message: a client that may not keep its own
/// compresses each message alone, which inflates the same either way.
pub struct Inflater(Decompress);

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inflater")
    }
}

/// The four bytes RFC 7692 §7.2.2 has a sender strip from each message.
pub const TAIL: [u8; 4] = [0, 0, 0xff, 0xff];

/// Inflates `input` onto `out`, stopping once `out` passes `limit`;
/// `Err` if it is not deflate data.
pub fn inflate(
    d: &mut Decompress,
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), ()> {
    let mut at = 0;
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(out.capacity().max(8192));
        }
        let (in0, out0) = (d.total_in(), d.total_out());
        let status = d
            .decompress_vec(&input[at..], out, FlushDecompress::Sync)
            .map_err(|_| ())?;
        at += (d.total_in() - in0) as usize;
        let progress = d.total_in() != in0 || d.total_out() != out0;
        if out.len() > limit
            || (at == input.len() && out.len() < out.capacity())
            || !progress
            || status == flate2::Status::StreamEnd
        {
            return Ok(());
        }
    }
}

#[derive(Debug)]
pub struct Reference {
    pub phase: Phase,
    /// The message being reassembled: its opcode, whether it is
    /// compressed, and its (inflated) bytes so far.
    frag: Option<(u8, bool, Vec<u8>)>,
    inflater: Option<Inflater>,
    /// Every message echoed, in order.
    pub echoes: Vec<(u8, Vec<u8>)>,
    /// Pings read while open: each is owed a pong.
    pub pings: Vec<Vec<u8>>,
    /// Pings read after the text `close`, before our close went out: the
    /// hub holds its close to the end of the turn and the split Stream
    /// sends it from another task, so these may be answered, but no ping
    /// is owed a pong once our close is out.
    pub late_pings: Vec<Vec<u8>>,
    pub ending: Option<Ending>,
    /// Bytes followed the frame that ended the conversation.
    pub trailing: bool,
    /// The code a refusal after our close would have had.
    pub late_refusal: Option<u16>,
    /// What the core alone hears ([`CoreEvent`]), while the conversation
    /// lasts.
    pub core_events: Vec<CoreEvent>,
    /// The pongs, in order, that such a caller takes from the core: each
    /// turn's pings, at most [`OWED_PONGS`] a turn, the last of them the
    /// newest ping's; none for a ping after our close went out.
    pub core_pongs: Vec<Vec<u8>>,
    /// This turn's pongs owed, in the core of [`CoreEvent`]'s caller.
    owed: Vec<Vec<u8>>,
    /// Our close is asked for, held to the end of the turn, in the same.
    close_held: bool,
    /// Our close went out, in the same: no ping is owed a pong after.
    close_out: bool,
}

impl Reference {
    /// The model of a server with permessage-deflate negotiated, or not.
    pub fn new(deflate: bool) -> Self {
        Reference {
            phase: Phase::Open,
            frag: None,
            inflater: deflate.then(|| Inflater(Decompress::new(false))),
            echoes: Vec::new(),
            pings: Vec::new(),
            late_pings: Vec::new(),
            ending: None,
            trailing: false,
            late_refusal: None,
            core_events: Vec::new(),
            core_pongs: Vec::new(),
            owed: Vec::new(),
            close_held: false,
            close_out: false,
        }
    }
}

/// RFC 6455 §7.4: the codes an endpoint may send, with those IANA has
/// registered since (1012 to 1014).
pub fn valid_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

impl Reference {
    fn end(&mut self, ending: Ending) {
        self.ending = Some(ending);
        self.phase = Phase::Done;
    }

    /// The server refuses what the client sent, with `code`.
    fn fail(&mut self, code: u16) {
        match self.phase {
            Phase::Open => self.end(Ending::Failed(code)),
            Phase::Ours => {
                self.late_refusal = Some(code);
                self.end(Ending::Ours(After::Refused))
            }
            Phase::Done => {}
        }
    }

    /// A whole frame from the client.
    pub fn frame(&mut self, f: &WireFrame) {
        if self.phase == Phase::Done {
            self.trailing = true;
            return;
        }
        // RSV1 marks a compressed message's first frame, once
        // permessage-deflate is on; every other RSV bit is a violation.
        let rsv_ok =
            f.rsv == 0 || (self.inflater.is_some() && f.rsv == 4 && matches!(f.opcode, 1 | 2));
        if !f.masked || !rsv_ok {
            return self.fail(1002);
        }
        match f.opcode {
            0..=2 => self.data(f),
            8..=10 => self.control(f),
            _ => self.fail(1002),
        }
    }

    fn control(&mut self, f: &WireFrame) {
        if !f.fin || f.payload.len() > 125 {
            return self.fail(1002);
        }
        if f.opcode == 9 {
            self.owe_pong(&f.payload);
        }
        match f.opcode {
            9 if self.phase == Phase::Open => self.pings.push(f.payload.clone()),
            9 => self.late_pings.push(f.payload.clone()),
            8 => {
                let p = &f.payload;
                let ok = match p.len() {
                    0 => Ok(()),
                    1 => Err(1002),
                    _ if !valid_code(u16::from_be_bytes([p[0], p[1]])) => Err(1002),
                    _ if std::str::from_utf8(&p[2..]).is_err() => Err(1007),
                    _ => Ok(()),
                };
                match (ok, self.phase) {
                    (Err(code), _) => self.fail(code),
                    (Ok(()), Phase::Open) => self.end(Ending::Answered(p.clone())),
                    (Ok(()), _) => self.end(Ending::Ours(After::Close(p.clone()))),
                }
            }
            _ => {} // a pong
        }
    }

    fn data(&mut self, f: &WireFrame) {
        let (opcode, compressed, mut buf) = match (f.opcode, self.frag.take()) {
            (0, Some(started)) => started,
            (1 | 2, None) => (f.opcode, f.rsv == 4, Vec::new()),
            // A continuation of nothing, or a new message inside one.
            _ => return self.fail(1002),
        };
        // A frame is a message too: held to the smaller limit, and the
        // message's limit is checked on each fragment's header (on what
        // it inflates to, for a compressed one).
        if f.payload.len() > MAX_FRAME.min(MAX_MESSAGE)
            || (!compressed && buf.len() + f.payload.len() > MAX_MESSAGE)
        {
            return self.fail(1009);
        }
        if compressed {
            let d = &mut self.inflater.as_mut().expect("RSV1 only with deflate").0;
            let mut ok = inflate(d, &f.payload, &mut buf, MAX_MESSAGE);
            if f.fin && ok.is_ok() && buf.len() <= MAX_MESSAGE {
                ok = inflate(d, &TAIL, &mut buf, MAX_MESSAGE);
            }
            if ok.is_err() {
                return self.fail(1002);
            }
            if buf.len() > MAX_MESSAGE {
                return self.fail(1009);
            }
        } else {
            buf.extend_from_slice(&f.payload);
        }
        if opcode == 1 {
            // Checked as it arrives: a sequence that can never be valid
            // fails at once, one cut short fails at the message's end.
            if let Err(e) = std::str::from_utf8(&buf) {
                if e.error_len().is_some() || f.fin {
                    return self.fail(1007);
                }
            }
        }
        if !f.fin {
            self.frag = Some((opcode, compressed, buf));
            return;
        }
        if self.phase == Phase::Open {
            if opcode == 1 && buf == b"close" {
                self.phase = Phase::Ours;
                self.core_events.push(CoreEvent::CloseAsked);
                self.close_held = true;
            } else {
                self.echoes.push((opcode, buf));
            }
        }
    }

    /// A ping read, as the core of [`CoreEvent`]'s caller owes its pong.
    fn owe_pong(&mut self, payload: &[u8]) {
        self.core_events.push(CoreEvent::Ping(payload.to_vec()));
        if self.close_out {
            return;
        }
        if self.owed.len() >= OWED_PONGS {
            *self.owed.last_mut().expect("OWED_PONGS > 0") = payload.to_vec();
        } else {
            self.owed.push(payload.to_vec());
        }
    }

    /// The end of one of the client's writes: [`CoreEvent`]'s caller takes
    /// what the core owes, then sends the close it holds.
    pub fn turn(&mut self) {
        self.core_events.push(CoreEvent::Turn);
        self.core_pongs.append(&mut self.owed);
        if std::mem::take(&mut self.close_held) {
            self.close_out = true;
        }
    }

    /// The client's FIN (after a part of a frame, or not).
    pub fn fin(&mut self) {
        match self.phase {
            Phase::Open => self.end(Ending::Fin),
            Phase::Ours => self.end(Ending::Ours(After::Fin)),
            Phase::Done => {}
        }
    }

    /// The client's reset.
    pub fn rst(&mut self) {
        match self.phase {
            Phase::Open => self.end(Ending::Rst),
            Phase::Ours => self.end(Ending::Ours(After::Rst)),
            Phase::Done => {}
        }
    }

    /// The close frame the server must send, if one: its code, and its
    /// whole payload where that is fixed.
    pub fn close_frame(&self) -> Option<(u16, Option<Vec<u8>>)> {
        match self.ending.as_ref()? {
            Ending::Answered(p) if p.is_empty() => Some((1005, Some(Vec::new()))),
            Ending::Answered(p) => Some((u16::from_be_bytes([p[0], p[1]]), Some(p.clone()))),
            Ending::Failed(code) => Some((*code, None)),
            Ending::Ours(_) => {
                let mut p = OURS_CODE.to_be_bytes().to_vec();
                p.extend_from_slice(OURS_REASON);
                Some((OURS_CODE, Some(p)))
            }
            Ending::Fin | Ending::Rst => None,
        }
    }
}
