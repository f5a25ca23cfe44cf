//! Raw-socket helpers of the hub's suites (`tests/hub/engines.rs`,
//! `tests/hub/hub_driver.rs`, ...):
//! an upgrade by hand, client frames built with the core's encoder, server
//! frames read off the wire, and bounded waits.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wavesock::proto::bytes::BytesMut;
use wavesock::proto::encoder::FrameEncoder;
use wavesock::{Frame, Message, OpCode, Role};

pub async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("in time")
}

/// The upgrade request `upgrade_raw` sends.
pub const REQUEST: &[u8] =
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// A raw client connection, upgraded.
pub async fn upgrade_raw(addr: SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(REQUEST).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(tcp.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{head:?}");
    tcp
}

/// A client's (masked) frame.
pub fn frame(fin: bool, opcode: OpCode, payload: Vec<u8>) -> Vec<u8> {
    let mut out = BytesMut::new();
    FrameEncoder::new(Role::Client)
        .encode_message(&Message::Frame(Frame::new(fin, opcode, payload)), &mut out)
        .unwrap();
    out.to_vec()
}

/// Reads one server frame from a socket or one half of it: its opcode and
/// payload.
pub async fn read_frame(tcp: &mut (impl tokio::io::AsyncRead + Unpin)) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    within(10, tcp.read_exact(&mut head)).await.unwrap();
    let len = match head[1] & 0x7f {
        126 => tcp.read_u16().await.unwrap() as usize,
        127 => tcp.read_u64().await.unwrap() as usize,
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    within(10, tcp.read_exact(&mut payload)).await.unwrap();
    (head[0] & 0x0f, payload)
}

/// Reads frames until a close frame; its code.
pub async fn close_code(tcp: &mut TcpStream) -> u16 {
    loop {
        let (op, payload) = read_frame(tcp).await;
        if op == 0x8 {
            return u16::from_be_bytes([payload[0], payload[1]]);
        }
    }
}

/// Waits until `f` holds, for at most five seconds.
pub async fn until(mut f: impl FnMut() -> bool) {
    within(5, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// A server's `Config` under `budget`, with limits large enough that only
/// the budget refuses the scenarios' messages.
pub fn budget_config(budget: &wavesock::MemoryBudget) -> wavesock::Config {
    wavesock::Config::default()
        .memory_budget(budget.clone())
        .max_message_size(64 << 20)
        .max_frame_size(64 << 20)
}

/// A small deterministic generator (xorshift), so a failing run can be
/// repeated from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A client's frame with first byte `b0` (FIN, RSV and opcode as given),
/// masked with a key from `rng`.
pub fn masked_with(b0: u8, payload: &[u8], rng: &mut Rng) -> Vec<u8> {
    let key = (rng.next() as u32 | 1).to_be_bytes();
    let mut f = vec![b0];
    match payload.len() {
        n @ 0..=125 => f.push(0x80 | n as u8),
        n @ 126..=0xFFFF => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&key);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    f
}

/// Writes `wire` in pieces of random sizes (a byte to 100 KB) with, now
/// and then, a yield or a millisecond's pause: frames split anywhere,
/// across reads and turns.
pub async fn write_cut(w: &mut (impl tokio::io::AsyncWrite + Unpin), wire: &[u8], rng: &mut Rng) {
    let mut at = 0;
    while at < wire.len() {
        let n = match rng.below(10) {
            0 => 1,
            1..=3 => rng.below(16) as usize + 1,
            4..=7 => rng.below(3000) as usize + 1,
            _ => rng.below(100_000) as usize + 1,
        };
        let end = (at + n).min(wire.len());
        w.write_all(&wire[at..end]).await.unwrap();
        at = end;
        match rng.below(5) {
            0 => tokio::time::sleep(Duration::from_millis(1)).await,
            1 | 2 => tokio::task::yield_now().await,
            _ => {}
        }
    }
}

/// Reads and drops what the server sends until it ends.
pub fn drain(mut r: tokio::net::tcp::OwnedReadHalf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
}
