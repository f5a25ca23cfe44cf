//! Each engine's transcripts against the model, and the engines against
//! each other where the model leaves a choice that they must still make
//! alike.

use super::client::{ReadEnd, Transcript};
use super::plan::Plan;
use super::reference::{After, Ending};
use super::script::Bad;
use super::server::{EndClass, Engine};

/// What one engine did with one client.
#[derive(Debug, Clone)]
pub struct Seen {
    pub transcript: Transcript,
    pub opened: usize,
    pub ended: Vec<EndClass>,
}

/// The status a refusal must have, where RFC 6455 names one; any 4xx
/// otherwise (the engines must then agree with each other).
fn refusal(bad: Bad) -> Option<u16> {
    match bad {
        // RFC 6455 §4.4.
        Bad::Version8 => Some(426),
        _ => None,
    }
}

/// Whether the pings read while open must all be answered: the server
/// read on past them to a close frame or a FIN, and nothing it refused.
fn pongs_owed(ending: &Ending) -> bool {
    matches!(
        ending,
        Ending::Answered(_) | Ending::Fin | Ending::Ours(After::Close(_) | After::Fin)
    )
}

/// Checks one client's transcript from `engine` against the model; what
/// is wrong, if anything.
///
/// `known` is to tolerate findings reported and not fixed yet (each marked
/// KNOWN where it is checked, with its reproducer among `tests/hub/model.rs`'
/// ignored tests), so that the generated run looks past them for new
/// ones; none is open now.
pub fn client(engine: Engine, plan: &Plan, seen: &Seen, known: bool) -> Vec<String> {
    let _ = known;
    let m = &plan.model;
    let t = &seen.transcript;
    let split = engine == Engine::Split;
    let rst = plan.resets;
    let mut bad = Vec::new();
    for p in &t.problems {
        bad.push(format!("client: {p}"));
    }

    // The server's reports: each opened connection ends once.
    if seen.opened > 1 {
        bad.push(format!("opened {} times", seen.opened));
    }
    if seen.ended.len() != seen.opened {
        bad.push(format!(
            "opened {} time(s), end reported {} time(s): {:?}",
            seen.opened,
            seen.ended.len(),
            seen.ended
        ));
    }
    if t.status == Some(101) && seen.opened == 0 {
        bad.push("the client got a 101 from a connection never opened".into());
    }

    // How reading ended: the server lets go of the socket.
    match &t.end {
        ReadEnd::Stopped => {}
        ReadEnd::Eof => {}
        ReadEnd::Error(_) => {
            // A server that stops reading (a failure, a refusal) resets
            // the connection if unread bytes were waiting: allowed there.
            let unread = matches!(m.ending, Some(Ending::Failed(_)))
                || m.trailing
                || plan.bad.is_some()
                || t.write_failed.is_some();
            if !unread {
                bad.push(format!("reading ended with {:?}", t.end));
            }
        }
        other => bad.push(format!("reading ended with {other:?}")),
    }

    // The handshake.
    match plan.bad {
        None if rst => {
            if t.status.is_some_and(|s| s != 101) {
                bad.push(format!("status {:?} for a good request", t.status));
            }
        }
        None => {
            if t.status != Some(101) {
                bad.push(format!(
                    "status {:?} for a good request ({:?})",
                    t.status,
                    String::from_utf8_lossy(&t.head)
                ));
            }
        }
        Some(b) => {
            if seen.opened != 0 {
                bad.push(format!("{b:?} opened a connection"));
            }
            match (b, t.status) {
                (_, Some(101)) => bad.push(format!("{b:?} was upgraded")),
                (Bad::Truncated(_), _) => {}
                (_, None) if rst => {}
                (b, s) => {
                    let ok = match refusal(b) {
                        Some(want) => s == Some(want),
                        None => s.is_some_and(|s| (400..500).contains(&s)),
                    };
                    if !ok {
                        bad.push(format!(
                            "{b:?} answered with {s:?} ({:?})",
                            String::from_utf8_lossy(&t.head)
                        ));
                    }
                }
            }
            return bad;
        }
    }
    if t.status != Some(101) {
        return bad;
    }
    let ending = m.ending.clone().expect("every plan ends");

    // permessage-deflate, taken when offered.
    let deflate = t
        .extensions
        .as_deref()
        .is_some_and(|e| e.contains("permessage-deflate"));
    if deflate != plan.deflate {
        bad.push(format!(
            "permessage-deflate {}, answered {:?}",
            if plan.deflate {
                "offered"
            } else {
                "not offered"
            },
            t.extensions
        ));
    }

    // The frames: a server's, whole, and nothing after its close.
    let mut close = None;
    for (i, f) in t.frames.iter().enumerate() {
        if close.is_some() {
            bad.push(format!("frame {i} (opcode {}) after the close", f.opcode));
            break;
        }
        let rsv_ok = f.rsv == 0 || (deflate && f.rsv == 4 && matches!(f.opcode, 1 | 2));
        if f.masked || !rsv_ok || !f.fin || !matches!(f.opcode, 1 | 2 | 8 | 10) {
            bad.push(format!(
                "frame {i}: opcode {} fin {} rsv {} masked {}",
                f.opcode, f.fin, f.rsv, f.masked
            ));
        }
        if f.opcode == 8 {
            close = Some(f.payload.clone());
        }
    }

    // Every message echoed, in order: all of them, or (where the end may
    // beat the split Stream's sending task, or the client reset) the
    // first ones.
    let echoes: Vec<(u8, &[u8])> = t
        .echoes()
        .map(|f| (f.opcode, f.payload.as_slice()))
        .collect();
    let want: Vec<(u8, &[u8])> = m.echoes.iter().map(|(o, p)| (*o, p.as_slice())).collect();
    let prefix_only = split || rst;
    let echoes_ok = if prefix_only {
        want.starts_with(&echoes)
    } else {
        echoes == want
    };
    if !echoes_ok {
        let first_diff = echoes
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(echoes.len().min(want.len()));
        bad.push(format!(
            "echoes: got {} of {} expected, first difference at {first_diff}: got {:?}, want {:?}",
            echoes.len(),
            want.len(),
            echoes.get(first_diff).map(|(o, p)| (o, p.len(), short(p))),
            want.get(first_diff).map(|(o, p)| (o, p.len(), short(p))),
        ));
    }

    // Pongs: every engine writes what the core owes after each frame it
    // hears (proto's `Link::with_conn`), so no more than one pong is ever
    // owed and none is replaced: each ping read while open is answered by
    // its own pong, in order, a prefix of them all (the end may cut it
    // short), all of them where the server read on past them to a close
    // or a FIN. After the text `close`: none on the Stream, which sends
    // its close as it reads the message, nor on the hub, which reads
    // nothing more until the close it holds is out; on the split Stream,
    // whatever its receiver reads before the sending task sends the close.
    let got: Vec<&[u8]> = t
        .frames
        .iter()
        .filter(|f| f.opcode == 10)
        .map(|f| f.payload.as_slice())
        .collect();
    let answerable: Vec<&[u8]> = if split {
        m.pings
            .iter()
            .chain(&m.late_pings)
            .map(Vec::as_slice)
            .collect()
    } else {
        m.pings.iter().map(Vec::as_slice).collect()
    };
    if !answerable.starts_with(&got) {
        let at = got
            .iter()
            .zip(&answerable)
            .position(|(a, b)| a != b)
            .unwrap_or(answerable.len());
        bad.push(format!(
            "pongs: {} for {} pings and {} after the text `close`, pong {at} is {:?}, want {:?}",
            got.len(),
            m.pings.len(),
            m.late_pings.len(),
            got.get(at).map(|p| short(p)),
            answerable.get(at).map(|p| short(p)),
        ));
    } else if !rst && pongs_owed(&ending) && got.len() < m.pings.len() {
        bad.push(format!(
            "{} pongs for {} pings; the first unanswered: {:?}",
            got.len(),
            m.pings.len(),
            short(&m.pings[got.len()])
        ));
    }

    // The close frame.
    let code_of = |c: &[u8]| (c.len() >= 2).then(|| u16::from_be_bytes([c[0], c[1]]));
    match (m.close_frame(), &close) {
        (None, Some(c)) => bad.push(format!(
            "a close frame {:?} for an end without one",
            short(c)
        )),
        (None, None) => {}
        (Some((code, payload)), Some(c)) => {
            let mut ok = match &payload {
                Some(p) => c == p,
                None => code_of(c) == Some(code),
            };
            // The split Stream's close goes out from the sending task: the
            // client's close may be read and answered first, or a frame
            // the core refuses read and failed first.
            if split {
                ok |= match &ending {
                    Ending::Ours(After::Close(theirs)) => c == theirs,
                    Ending::Ours(After::Refused) => code_of(c) == m.late_refusal,
                    _ => false,
                };
            }
            if !ok {
                bad.push(format!(
                    "close frame {:?}, want code {code} {:?}",
                    short(c),
                    payload.as_deref().map(short)
                ));
            }
        }
        (Some((code, _)), None) => {
            // The split Stream's close may lose the race with the end.
            let optional = rst
                || (split
                    && matches!(
                        ending,
                        Ending::Ours(After::Fin | After::Rst | After::Refused)
                    ));
            if !optional {
                bad.push(format!("no close frame, want code {code}"));
            }
        }
    }

    // How the server saw the end.
    if let [end] = seen.ended.as_slice() {
        let want = match &ending {
            Ending::Answered(_) => Some(EndClass::Clean),
            Ending::Failed(code) => Some(EndClass::Code(*code)),
            Ending::Fin => Some(EndClass::Io),
            Ending::Ours(After::Close(_)) => Some(EndClass::Clean),
            Ending::Ours(After::Fin) if !split => Some(EndClass::Clean),
            _ => None,
        };
        if want.as_ref().is_some_and(|w| w != end) && !rst {
            bad.push(format!("the server ended with {end:?}, want {want:?}"));
        }
    }
    bad
}

/// Bytes for a report: text if they are, cut short.
fn short(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned();
    if b.len() > 40 {
        format!("{s}... ({} bytes)", b.len())
    } else {
        s
    }
}

/// What engines must agree on for one client where the model leaves a
/// choice: the refusal's status, and the reason of a close for a refused
/// frame.
pub fn agree(plan: &Plan, seen: &[(Engine, &Seen)]) -> Vec<String> {
    if plan.resets {
        return Vec::new();
    }
    let mut bad = Vec::new();
    let status: Vec<_> = seen
        .iter()
        .map(|(e, s)| (*e, s.transcript.status))
        .collect();
    if status.windows(2).any(|w| w[0].1 != w[1].1) {
        bad.push(format!(
            "the engines answered the request differently: {status:?}"
        ));
    }
    if matches!(plan.model.ending, Some(Ending::Failed(_))) {
        let closes: Vec<_> = seen
            .iter()
            .filter_map(|(e, s)| {
                let c = s.transcript.frames.iter().find(|f| f.opcode == 8)?;
                Some((*e, short(&c.payload)))
            })
            .collect();
        if closes.windows(2).any(|w| w[0].1 != w[1].1) {
            bad.push(format!(
                "the engines failed the connection differently: {closes:?}"
            ));
        }
    }
    bad
}
