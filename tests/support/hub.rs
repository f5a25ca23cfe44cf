//! A [`Hub`] for the tests: a handler that echoes and records every call
//! it gets, the hub served on a loopback listener (connections also come
//! through [`HubHandle::accept`]), and a transport wrapper that says when
//! the hub has let go of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wavesock::Message;
use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{
    Closed, ConnId, Handler, Hub, HubConfig, HubHandle, HubMessage, SendStatus, Ws,
};

/// `HubConfig::default()` under the readiness mode
/// `WAVESOCK_HUB_READINESS` names (`owned` or `tokio`), so that CI can run
/// a suite under each; unset, the library's default. The library itself
/// reads no environment: choosing is the program's business, here the
/// test suite's.
pub fn defaults() -> HubConfig {
    match std::env::var("WAVESOCK_HUB_READINESS") {
        Ok(mode) => HubConfig::default().readiness(
            mode.parse()
                .unwrap_or_else(|_| panic!("WAVESOCK_HUB_READINESS={mode}: owned or tokio")),
        ),
        Err(_) => HubConfig::default(),
    }
}

/// What the handler saw of one connection.
#[derive(Debug, Default)]
pub struct Seen {
    /// Data messages, in order.
    pub received: Vec<Message>,
    /// Pings, counted.
    pub pings: usize,
    /// The most bytes ever waiting for the peer, sampled at each call.
    pub max_buffered: usize,
    /// What became of each echo.
    pub statuses: Vec<SendStatus>,
    /// `drain` calls.
    pub drains: usize,
}

/// A connection as `Handler::close` reported it.
#[derive(Debug)]
pub struct Ended {
    pub closed: Closed,
    pub seen: Seen,
}

/// Everything the handler saw, over all connections.
#[derive(Debug, Default)]
pub struct Log {
    /// Connections opened, in order.
    pub opened: Vec<ConnId>,
    /// Connections ended, in order.
    pub ended: Vec<Ended>,
}

impl Log {
    /// Panics unless every opened connection was ended exactly once and
    /// nothing else was ended.
    pub fn assert_each_ended_once(&self) {
        let mut count: HashMap<ConnId, usize> = HashMap::new();
        for e in &self.ended {
            *count.entry(e.closed.id).or_default() += 1;
        }
        for id in &self.opened {
            assert_eq!(
                count.remove(id),
                Some(1),
                "connection {id}: close callbacks"
            );
        }
        assert!(count.is_empty(), "closed but never opened: {count:?}");
    }

    /// The ended connection `id`.
    pub fn ended(&self, id: ConnId) -> Option<&Ended> {
        self.ended.iter().find(|e| e.closed.id == id)
    }
}

/// Echoes data messages back (unless `echo` is off) and records.
#[derive(Clone)]
pub struct Recorder {
    pub log: Arc<Mutex<Log>>,
    pub echo: bool,
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            log: Arc::default(),
            echo: true,
        }
    }
}

fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Handler for Recorder {
    type Data = Seen;

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<Seen, HttpResponse> {
        Ok(Seen::default())
    }

    fn open(&mut self, ws: &mut Ws<'_, Seen>) {
        lock(&self.log).opened.push(ws.id());
    }

    fn message(&mut self, ws: &mut Ws<'_, Seen>, msg: HubMessage<'_>) {
        let owned = match msg {
            HubMessage::Text(t) => Message::text(t.to_owned()),
            HubMessage::Binary(b) => Message::binary(b.to_vec()),
        };
        ws.data_mut().received.push(owned);
        if self.echo {
            let status = ws.send_borrowed(msg).expect("an echo is a valid send");
            ws.data_mut().statuses.push(status);
        }
        let buffered = ws.buffered_amount();
        let seen = ws.data_mut();
        seen.max_buffered = seen.max_buffered.max(buffered);
    }

    fn drain(&mut self, ws: &mut Ws<'_, Seen>) {
        ws.data_mut().drains += 1;
    }

    fn ping(&mut self, ws: &mut Ws<'_, Seen>, _: &[u8]) {
        let buffered = ws.buffered_amount();
        let seen = ws.data_mut();
        seen.pings += 1;
        seen.max_buffered = seen.max_buffered.max(buffered);
    }

    fn close(&mut self, closed: Closed, seen: Seen) {
        lock(&self.log).ended.push(Ended { closed, seen });
    }
}

/// A running hub with a [`Recorder`].
pub struct TestHub {
    pub handle: HubHandle,
    pub log: Arc<Mutex<Log>>,
    pub addr: SocketAddr,
    task: JoinHandle<wavesock::Result<()>>,
}

impl TestHub {
    /// A hub serving a fresh loopback listener.
    pub async fn start(config: HubConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, config, Recorder::new())
    }

    /// A hub with `recorder` serving `listener`.
    pub fn serve(listener: TcpListener, config: HubConfig, recorder: Recorder) -> Self {
        let addr = listener.local_addr().unwrap();
        let log = recorder.log.clone();
        let hub = Hub::new(recorder, config).expect("a valid hub config");
        let handle = hub.handle();
        let task = tokio::spawn(hub.serve(listener));
        TestHub {
            handle,
            log,
            addr,
            task,
        }
    }

    pub fn log(&self) -> MutexGuard<'_, Log> {
        lock(&self.log)
    }

    /// Waits (up to `within`) until `n` connections have ended.
    pub async fn wait_ended(&self, n: usize, within: Duration) {
        let wait = async {
            while self.log().ended.len() < n {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        if tokio::time::timeout(within, wait).await.is_err() {
            panic!(
                "{} of {n} connections ended after {within:?}",
                self.log().ended.len()
            );
        }
    }

    /// Shuts the hub down, waits for it, and checks that every opened
    /// connection was ended exactly once.
    pub async fn stop(self) -> Log {
        self.handle.shutdown().await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the hub stops")
            .expect("the hub's task did not panic")
            .expect("serve");
        let log = std::mem::take(&mut *lock(&self.log));
        log.assert_each_ended_once();
        log
    }
}

/// A transport that tells, through a oneshot, when it is dropped: the hub
/// has finished with the connection.
pub struct Tracked<T> {
    pub inner: T,
    dropped: Option<oneshot::Sender<()>>,
}

impl<T> Tracked<T> {
    pub fn new(inner: T) -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (
            Tracked {
                inner,
                dropped: Some(tx),
            },
            rx,
        )
    }
}

impl<T> Drop for Tracked<T> {
    fn drop(&mut self) {
        if let Some(tx) = self.dropped.take() {
            let _ = tx.send(());
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
