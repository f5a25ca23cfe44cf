//! The HTTP upgrade of a hub connection: reads the request into the
//! connection's reading state, checks it, asks the handler, and answers
//! (switching protocols, or refusing).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;

use crate::error::HandshakeError;
use crate::handshake::server::{Accepting, error_response, parse_request, write_response};
use crate::hub::config::HubConfig;
use crate::hub::conn::{Slot, Stage};
use crate::hub::handler::Handler;
use crate::hub::read::ReceiverPool;
use crate::hub::turn::Turn;
use crate::hub::ws::Ws;
use crate::meter::{self, Refused};
use crate::proto::Role;
use crate::proto::conn::Connection;
use crate::proto::inbox::OwnMemory;
use crate::proto::receive::Receiver;

/// Reads the upgrade request; answers it.
pub(crate) fn read_handshake<H: Handler>(
    slot: &mut Slot<H::Data>,
    cx: &mut Context<'_>,
    handler: &mut H,
    config: &HubConfig,
    receivers: &mut ReceiverPool,
    turn: &mut Turn,
) {
    /// What the bytes read so far call for.
    enum Step {
        Answer(http::Request<()>),
        Refuse(HandshakeError),
        Read(Poll<io::Result<usize>>),
    }
    let max = config.config.handshake.max_size;
    let mut r = slot
        .receiver
        .take()
        .unwrap_or_else(|| receivers.lend(config));
    loop {
        let io = &mut slot.io;
        let step = r.inbox_mut().with_buffered(|bytes| {
            match parse_request(bytes, config.config.handshake.max_headers) {
                Ok(Some((_, len))) if len > max => Step::Refuse(HandshakeError::TooLarge(max)),
                Ok(Some((request, len))) => {
                    bytes.advance(len);
                    Step::Answer(request)
                }
                Ok(None) if bytes.len() >= max => Step::Refuse(HandshakeError::TooLarge(max)),
                Ok(None) => {
                    let room = max - bytes.len();
                    bytes.reserve(room.min(1024));
                    Step::Read(tokio_util::io::poll_read_buf(Pin::new(io), cx, bytes))
                }
                Err(e) => Step::Refuse(e),
            }
        });
        match step {
            Step::Answer(request) => return answer(slot, r, request, handler, config, turn),
            Step::Refuse(e) => return refuse(slot, turn, &e),
            Step::Read(Poll::Pending) => break,
            Step::Read(Poll::Ready(Ok(n))) if n > 0 => {}
            // Gone before asking anything: nothing to answer.
            Step::Read(Poll::Ready(_)) => {
                slot.conn.abandoned = true;
                break;
            }
        }
    }
    slot.receiver = Some(r);
}

/// Answers a request that is not a valid upgrade, then ends.
fn refuse<T>(slot: &mut Slot<T>, turn: &mut Turn, err: &HandshakeError) {
    meter::refused(Refused::of_handshake(err));
    match error_response(err) {
        Some(resp) => write_http(slot, turn, &resp, resp.body()),
        None => slot.conn.abandoned = true,
    }
}

fn write_http<T, B>(slot: &mut Slot<T>, turn: &mut Turn, resp: &http::Response<B>, body: &[u8]) {
    let mut head = Vec::with_capacity(160 + body.len());
    write_response(resp, body, &mut head);
    slot.conn.queue_raw(turn, &head);
    // Nothing but this answer goes out, within the handshake's deadline.
    slot.conn.core_mut().handle_refused();
    slot.stage = Stage::Ending;
}

fn answer<H: Handler>(
    slot: &mut Slot<H::Data>,
    mut r: Box<Receiver>,
    mut request: http::Request<()>,
    handler: &mut H,
    config: &HubConfig,
    turn: &mut Turn,
) {
    request.extensions_mut().insert(slot.io.addresses());
    let mut accepting = match Accepting::http1(&request) {
        Ok(a) => a,
        Err(e) => {
            if let Some(resp) = handler.request(&request) {
                meter::refused(Refused::of_status(resp.status()));
                return write_http(slot, turn, &resp, resp.body());
            }
            return refuse(slot, turn, &e);
        }
    };
    accepting.negotiate(request.headers(), config.config.deflate.as_ref());
    let mut response = accepting.required().clone();
    let data = match handler.upgrade(&request, &mut response) {
        Ok(data) => data,
        Err(refusal) => {
            // Whatever its status (a redirect too), as the Stream counts a
            // callback's refusal.
            meter::refused(Refused::of_status(refusal.status()).unwrap_or(Refused::Rejected));
            return write_http(slot, turn, &refusal, refusal.body());
        }
    };
    accepting.respond(&mut response);
    if let Some((params, deflate)) = accepting.into_deflate() {
        let encoder = slot.conn.driver.encoder_mut();
        if let Err(e) =
            crate::proto::deflate::enable(r.inbox_mut().decoder_mut(), encoder, &params, &deflate)
        {
            slot.conn.fail(e.into());
            return;
        }
    }
    let mut head = Vec::with_capacity(160);
    write_response(&response, &[], &mut head);
    slot.conn.queue_raw(turn, &head);
    // What followed the request waits in memory of its size.
    r.inbox_mut().wait(&mut OwnMemory);
    slot.receiver = Some(r);
    #[cfg(feature = "metrics")]
    {
        let took = slot.admitted.elapsed();
        turn.meter.handshake(took);
    }
    *slot.conn.core_mut() = Connection::new(Role::Server, config.config.timers(), turn.now());
    turn.meter.opened(true);
    slot.stage = Stage::Open;
    let data = slot.data.insert(data);
    handler.open(&mut Ws {
        io: &slot.io,
        conn: &mut slot.conn,
        data,
        turn,
    });
    // Frames that came with the request are read on the next service.
    slot.requeue(&mut turn.schedule);
}
