//! Two connections, client and server, over an in-memory wire: what one
//! side's core sends, the other's receives.

use super::*;

/// One side of an in-memory connection: the protocol core only.
struct Side {
    conn: Connection,
    encoder: FrameEncoder,
    decoder: MessageDecoder,
    inbox: BytesMut,
    received: Vec<Message>,
}

impl Side {
    fn new(role: Role, timers: Timers, limits: Limits, now: Instant) -> Side {
        Side {
            conn: Connection::new(role, timers, now),
            encoder: FrameEncoder::new(role),
            decoder: MessageDecoder::new(role, limits),
            inbox: BytesMut::new(),
            received: Vec::new(),
        }
    }

    /// Encodes what this side sends: `msg` after what the core owes.
    fn send(&mut self, msg: Message, wire: &mut BytesMut, now: Instant) -> Result<(), Error> {
        if self.conn.handle_send(&msg, now)? == Outgoing::Skip {
            return Ok(());
        }
        self.transmit(wire);
        self.encoder.encode_message(&msg, wire)
    }

    fn transmit(&mut self, wire: &mut BytesMut) {
        while let Some(m) = self.conn.poll_transmit() {
            self.encoder.encode_message(&m, wire).unwrap();
        }
    }

    /// Decodes everything in the inbox, as a connection's read loop does.
    fn receive(&mut self, now: Instant) {
        if !self.inbox.is_empty() {
            self.conn.handle_input(now);
        }
        while self.conn.phase() == Phase::Open {
            match self.decoder.decode(&mut self.inbox) {
                Ok(Some(m)) => {
                    if m.is_control() {
                        self.conn.handle_frame(&m, now);
                    }
                    self.received.push(m);
                }
                Ok(None) => break,
                Err(e) => self.conn.handle_error(e, now),
            }
        }
    }
}

/// A client and a server core with the wire between them.
struct Pair {
    now: Instant,
    client: Side,
    server: Side,
}

impl Pair {
    fn new(timers: Timers, limits: Limits) -> Pair {
        let now = Instant::now();
        Pair {
            now,
            client: Side::new(Role::Client, timers, limits.clone(), now),
            server: Side::new(Role::Server, timers, limits, now),
        }
    }

    /// Moves owed frames across both ways until neither side owes any.
    fn step(&mut self) {
        loop {
            let mut to_server = BytesMut::new();
            let mut to_client = BytesMut::new();
            self.client.transmit(&mut to_server);
            self.server.transmit(&mut to_client);
            if to_server.is_empty() && to_client.is_empty() {
                return;
            }
            self.server.inbox.extend_from_slice(&to_server);
            self.client.inbox.extend_from_slice(&to_client);
            self.client.receive(self.now);
            self.server.receive(self.now);
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.client.conn.handle_timeout(self.now);
        self.server.conn.handle_timeout(self.now);
        self.step();
    }
}

#[test]
fn pair_ping_is_answered_over_the_wire() {
    let mut p = Pair::new(Timers::default(), Limits::default());
    let mut wire = BytesMut::new();
    p.client
        .send(Message::Ping("are you there".into()), &mut wire, p.now)
        .unwrap();
    p.server.inbox.extend_from_slice(&wire);
    p.server.receive(p.now);
    p.step();
    assert_eq!(p.client.received, [Message::Pong("are you there".into())]);
}

#[test]
fn pair_closing_handshake_completes_both_ways() {
    let mut p = Pair::new(Timers::default(), Limits::default());
    let mut wire = BytesMut::new();
    let bye = Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "done")));
    p.client.send(bye.clone(), &mut wire, p.now).unwrap();
    p.server.inbox.extend_from_slice(&wire);
    p.server.receive(p.now);
    p.step();
    assert_eq!(p.server.received, std::slice::from_ref(&bye));
    assert_eq!(p.client.received, [bye], "the server echoed the code");
    assert_eq!(p.server.conn.phase(), Phase::Closed);
    assert_eq!(p.client.conn.phase(), Phase::Closed);
    // The server ends TCP; the client waits for it.
    assert!(Phase::Closed.awaits_transport_end(Role::Client));
    assert!(!Phase::Closed.awaits_transport_end(Role::Server));
    assert!(!Phase::Failing.awaits_transport_end(Role::Client));
}

#[test]
fn pair_oversized_message_gets_1009_before_its_payload() {
    let mut p = Pair::new(Timers::default(), Limits::default().max_message_size(16));
    let mut wire = BytesMut::new();
    p.client
        .send(Message::binary(vec![0; 1000]), &mut wire, p.now)
        .unwrap();
    // Only the header (2 + 2 length + 4 mask bytes) reaches the server.
    wire.truncate(8);
    p.server.inbox.extend_from_slice(&wire);
    p.server.receive(p.now);
    assert_eq!(p.server.conn.phase(), Phase::Failing);
    p.step();
    let Some(Message::Close(Some(f))) = p.client.received.last() else {
        panic!("{:?}", p.client.received)
    };
    assert_eq!(f.code, CloseCode::MESSAGE_TOO_BIG);
    assert_eq!(f.reason.as_str(), "message over max_message_size");
    assert!(matches!(
        p.server.conn.take_error(),
        Some(Error::MessageTooLarge {
            size: 1000,
            max: 16
        })
    ));
}

#[test]
fn pair_keepalive_keeps_a_live_peer_and_drops_a_dead_one() {
    let mut p = Pair::new(timers(), Limits::default());
    for _ in 0..10 {
        p.advance(30 * SEC);
        p.advance(10 * SEC);
    }
    assert_eq!(p.client.conn.phase(), Phase::Open);
    assert_eq!(p.server.conn.phase(), Phase::Open);
    let pongs = p.client.received.iter().filter(|m| m.is_pong()).count();
    assert!(pongs >= 5, "the client's pings were answered: {pongs}");

    // The server goes silent: its core is no longer stepped.
    let mut client = p.client;
    let mut now = p.now;
    for _ in 0..8 {
        now += 10 * SEC;
        client.conn.handle_timeout(now);
        let mut lost = BytesMut::new();
        client.transmit(&mut lost);
    }
    assert_eq!(client.conn.phase(), Phase::TimedOut);
    assert_eq!(client.conn.take_error(), Some(Error::KeepaliveTimeout));
}
