//! The protocol core alone, under a caller that holds back what it owes:
//! each script's pings and closing message, as the model's
//! [`CoreEvent`]s, told to a `wavesock::proto::conn::Connection` whose
//! owed frames are taken only at the end of each of the client's writes,
//! and the pongs it gives compared with the model's, exactly.
//!
//! Every engine takes what the core owes after each frame it hears, so
//! over a socket no more than one pong is ever owed and the bound on owed
//! pongs never shows. It matters to a caller that holds frames back (the
//! core's docs name a close asked for and not yet sent): this is that
//! caller, so that the bound and which pongs it keeps can fail the harness.

use std::time::Instant;

use wavesock::Message;
use wavesock::Role;
use wavesock::Timers;
use wavesock::proto::conn::Connection;

use super::plan::Plan;
use super::reference::CoreEvent;

/// Runs `plan`'s conversation through the core; what is wrong, if
/// anything.
pub fn check(plan: &Plan) -> Vec<String> {
    if plan.bad.is_some() {
        return Vec::new();
    }
    let now = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default(), now);
    let mut held = false;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut bad = Vec::new();
    for e in &plan.model.core_events {
        match e {
            CoreEvent::Ping(p) => c.handle_frame(&Message::Ping(p.clone().into()), now),
            CoreEvent::CloseAsked => held = true,
            CoreEvent::Turn => {
                while let Some(m) = c.poll_transmit() {
                    match m {
                        Message::Pong(p) => got.push(p.to_vec()),
                        other => bad.push(format!("the core owed {other:?}")),
                    }
                }
                if std::mem::take(&mut held) && !c.send_close(now) {
                    bad.push("the core refused the close asked for".into());
                }
            }
        }
    }
    let want = &plan.model.core_pongs;
    if got != *want {
        let first = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        bad.push(format!(
            "core: {} pongs, want {}; first difference at {first}: got {:?}, want {:?}",
            got.len(),
            want.len(),
            got.get(first)
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            want.get(first)
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        ));
    }
    bad
}
