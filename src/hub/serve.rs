//! Running and serving a [`Hub`]: its engines, each a task, and the
//! acceptor that hands a listener's connections to them in turn.

use std::future::Future;
use std::io;
use std::task::Poll;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::hub::accept::{ACCEPT_PAUSE, Listener};
use crate::hub::config::HubConfig;
use crate::hub::engine::Engine;
use crate::hub::event::{HUB_MASK, MAX_ENGINES};
use crate::hub::handle::{Adopter, Command, HubHandle};
use crate::hub::handler::Handler;

/// Connections waiting to be taken by an engine (accepted by the acceptor
/// of several engines, handed over, adopted).
const ACCEPT_QUEUE: usize = 1024;

/// A server engine for many connections; see the [module docs](crate::hub).
#[derive(Debug)]
pub struct Hub<H: Handler> {
    engines: Vec<Engine<H>>,
    handle: HubHandle,
}

impl<H: Handler> Hub<H> {
    /// A hub running `handler` (cloned into each engine) with `config`.
    ///
    /// With [`HubConfig::engines`] `None`, there is one engine per worker
    /// thread of the current Tokio runtime (one outside a runtime, at most
    /// 256).
    pub fn new(handler: H, config: HubConfig) -> Result<Self> {
        Self::with_handle(config, |_| handler)
    }

    /// A hub whose handler is made with the hub's handle, for a handler
    /// that reaches connections other than the one it is called for (a
    /// task it spawns that answers later, a kick by id). Within a
    /// callback, [`Ws::handle`](crate::hub::Ws::handle) gives the same handle.
    ///
    /// ```no_run
    /// use wavesock::hub::{Handler, HttpResponse, Hub, HubConfig, HubHandle, HubMessage, Ws};
    /// use wavesock::http::{Request, Response};
    /// use wavesock::Message;
    ///
    /// #[derive(Clone)]
    /// struct Later {
    ///     hub: HubHandle,
    /// }
    ///
    /// impl Handler for Later {
    ///     type Data = ();
    ///
    ///     fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
    ///         Ok(())
    ///     }
    ///
    ///     fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
    ///         let (hub, id, text) = (self.hub.clone(), ws.id(), msg.as_bytes().len().to_string());
    ///         tokio::spawn(async move {
    ///             // ... a call that takes a while ...
    ///             let _ = hub.send(id, Message::text(text)).await;
    ///         });
    ///     }
    /// }
    ///
    /// # async fn run() -> wavesock::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:9001").await?;
    /// let hub = Hub::with_handle(HubConfig::default(), |hub| Later { hub: hub.clone() })?;
    /// hub.serve(listener).await
    /// # }
    /// ```
    pub fn with_handle(config: HubConfig, handler: impl FnOnce(&HubHandle) -> H) -> Result<Self> {
        config.validate()?;
        let count = config.engines.unwrap_or_else(|| {
            tokio::runtime::Handle::try_current()
                .map(|h| h.metrics().num_workers())
                .unwrap_or(1)
                .min(MAX_ENGINES)
        });
        // Numbers this hub's connection ids apart from other hubs'.
        static HUBS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let hub = HUBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & HUB_MASK;
        let mut senders = Vec::with_capacity(count);
        let mut accept_senders = Vec::with_capacity(count);
        let mut receivers = Vec::with_capacity(count);
        for _ in 0..count {
            let (tx, rx) = mpsc::channel(config.handle_capacity);
            let (accept_tx, accept_rx) = mpsc::channel(ACCEPT_QUEUE);
            senders.push(tx);
            accept_senders.push(accept_tx);
            receivers.push((rx, accept_rx));
        }
        let handle = HubHandle::new(senders, accept_senders, &config);
        let handler = handler(&handle);
        let engines = receivers
            .into_iter()
            .enumerate()
            .map(|(index, (rx, accept_rx))| {
                Engine::new(
                    hub,
                    index as u32,
                    handler.clone(),
                    config.clone(),
                    rx,
                    accept_rx,
                    handle.clone(),
                )
            })
            .collect();
        Ok(Hub { engines, handle })
    }

    /// A handle to send to connections from other tasks and to shut the
    /// hub down.
    pub fn handle(&self) -> HubHandle {
        self.handle.clone()
    }

    /// Hands this hub connections upgraded elsewhere (hyper, axum); see
    /// [`Adopter`].
    pub fn adopter(&self) -> Adopter<H::Data> {
        Adopter::new(self.handle.clone())
    }

    /// Serves connections accepted from `listener` until
    /// [`HubHandle::shutdown`].
    ///
    /// One engine accepts on its own task. With several, each runs on a
    /// task of its own (`tokio::spawn`, so the runtime spreads them over
    /// its workers) and this task accepts and hands the connections out in
    /// turn: one listener, as given, and an even spread whatever the
    /// kernel's hashing of `SO_REUSEPORT` would do with few client
    /// addresses. Accepted sockets get `TCP_NODELAY`: replies are
    /// written whole, once per read, so Nagle's delay would only add
    /// latency.
    pub async fn serve(self, listener: TcpListener) -> Result<()> {
        match self.run_with(Some(listener)).await {
            None => Ok(()),
            Some(e) => Err(Error::Io(io::Error::other(e))),
        }
    }

    /// Serves only the connections handed over through
    /// [`HubHandle::accept`] and [`Adopter::adopt`] (a hyper or axum
    /// server, a TLS acceptor of your own), until [`HubHandle::shutdown`].
    ///
    /// An engine that panics shuts the others down (their connections are
    /// closed with 1001, as on [`HubHandle::shutdown`]); its panic then
    /// resumes here. [`serve`](Self::serve) returns it as an error instead.
    pub async fn run(self) {
        if let Some(e) = self.run_with(None).await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }

    /// Runs the engines (accepting from `listener` if given) until they
    /// have all ended; the first engine's failure, if one failed.
    async fn run_with(self, listener: Option<TcpListener>) -> Option<tokio::task::JoinError> {
        let Hub {
            mut engines,
            handle,
        } = self;
        if engines.len() == 1 {
            // On this task: a panic goes up as any other would.
            let mut engine = engines.pop().expect("one engine");
            engine.acceptor.listener = listener.map(Listener::Tokio);
            drop(handle);
            tokio::task::unconstrained(engine).await;
            return None;
        }
        let count = engines.len();
        let mut tasks = tokio::task::JoinSet::new();
        for e in engines {
            tasks.spawn(tokio::task::unconstrained(e));
        }
        let mut stop = handle.stopped();
        let mut listener = listener;
        let mut failed = None;
        let mut next = 0;
        enum Next {
            Accepted(io::Result<TcpStream>),
            Stopped,
            Ended(Option<std::result::Result<(), tokio::task::JoinError>>),
        }
        loop {
            let event = {
                let mut ended = std::pin::pin!(tasks.join_next());
                let mut stopped = std::pin::pin!(stop.wait_for(|stopped| *stopped));
                let mut accept = std::pin::pin!(async {
                    match &listener {
                        Some(l) => l.accept().await.map(|(tcp, _)| tcp),
                        None => std::future::pending().await,
                    }
                });
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = ended.as_mut().poll(cx) {
                        return Poll::Ready(Next::Ended(r));
                    }
                    if listener.is_some() && stopped.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Next::Stopped);
                    }
                    accept.as_mut().poll(cx).map(Next::Accepted)
                })
                .await
            };
            match event {
                // Every engine has ended.
                Next::Ended(None) => break,
                Next::Ended(Some(Ok(()))) => {}
                Next::Ended(Some(Err(e))) => {
                    // An engine panicked (or was cancelled): stop taking
                    // connections and shut the others down, then report it.
                    listener = None;
                    if failed.is_none() {
                        failed = Some(e);
                        let _ = handle.shutdown().await;
                    }
                }
                Next::Stopped => listener = None,
                Next::Accepted(Ok(tcp)) => {
                    // An engine that stopped was shut down (or failed,
                    // which the next turn of this loop hears).
                    if handle.hand_over(next, Command::Accept(tcp)).await.is_err() {
                        listener = None;
                    }
                    next = (next + 1) % count;
                }
                Next::Accepted(Err(_)) => {
                    // Out of file descriptors, or a connection that went
                    // away before it was accepted: try again shortly.
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
            }
        }
        failed
    }
}
