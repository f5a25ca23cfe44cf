//! Async work from hub handlers: a key-value "database" answered over
//! WebSocket, each query a call that takes its time, with a timeout, the
//! answers in the order the queries came on each connection, and limits
//! for a client that asks faster than it reads.
//!
//! ```text
//! cargo run --example hub_async -- 127.0.0.1:9002
//! ```
//!
//! Commands, one per text message: `get KEY`, `set KEY VALUE`, `sleep MS`
//! (a query that takes MS milliseconds), `blob N` (N bytes, as a binary
//! answer, at most 1 MiB). Answers are text: `KEY = VALUE`,
//! `KEY: not found`, `KEY set`, `slept MS`, `CMD: timed out`.
//!
//! Handlers run on the engine's task and must not wait, so each query is
//! spawned, and its answer goes back through the [`HubHandle`] the handler
//! was made with. What keeps that well-behaved:
//!
//! - **Order.** Each query's task waits until the previous query of its
//!   connection is answered, then calls (a oneshot chain per connection):
//!   one call at a time per connection, so a client sees its own writes
//!   and gets its answers in the order it asked; calls of different
//!   connections run at once.
//! - **A timeout** on each call (`Options::timeout`).
//! - **A bound on work per connection.** At most `max_in_flight` queries
//!   per connection at once; a client past it is closed with 1013 (try
//!   again later). An idle connection holds no task.
//! - **A slow reader.** The hub stops reading a connection whose answers
//!   it cannot write (its queries wait in TCP's flow control, not here),
//!   and what can be in flight, `max_in_flight` answers of at most
//!   1 MiB, is below `max_backpressure` (32 MiB): a client that keeps to
//!   the limits is never cut off, however slowly it reads. Answers are
//!   handed over with `HubHandle::send`, which waits for room in the
//!   engine's queue: a flood of answers slows these tasks, not the hub.
//! - **Cancellation.** When the connection closes, its calls still running
//!   are dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use wavesock::http::{Request, Response};
use wavesock::hub::{
    BackpressurePolicy, Closed, Handler, HttpResponse, Hub, HubConfig, HubHandle, HubMessage, Ws,
};
use wavesock::{CloseCode, Config, Message};

/// The limits; see the module docs.
#[derive(Debug, Clone)]
pub struct Options {
    pub timeout: Duration,
    pub max_in_flight: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(2),
            max_in_flight: MAX_IN_FLIGHT,
        }
    }
}

/// Queries per connection at once, at most.
const MAX_IN_FLIGHT: usize = 16;
/// The largest `blob` answered.
const BLOB_MAX: usize = 1 << 20;

/// A stand-in for a database client: a map behind a lock, each call
/// taking a few milliseconds, counting the calls in progress.
#[derive(Debug, Clone, Default)]
pub struct Db {
    rows: Arc<Mutex<HashMap<String, String>>>,
    running: Arc<AtomicUsize>,
}

/// What a query asks.
enum Query {
    Get(String),
    Set(String, String),
    Sleep(u64),
    Blob(usize),
}

impl Query {
    fn parse(text: &str) -> Option<Query> {
        let mut words = text.splitn(3, ' ');
        Some(match (words.next()?, words.next(), words.next()) {
            ("get", Some(k), None) => Query::Get(k.to_owned()),
            ("set", Some(k), Some(v)) => Query::Set(k.to_owned(), v.to_owned()),
            ("sleep", Some(ms), None) => Query::Sleep(ms.parse().ok()?),
            ("blob", Some(n), None) => Query::Blob(n.parse().ok().filter(|n| *n <= BLOB_MAX)?),
            _ => return None,
        })
    }
}

impl Db {
    /// Calls still running.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    async fn call(&self, query: &Query) -> Message {
        self.running.fetch_add(1, Ordering::SeqCst);
        // Counted down however the call ends, cancelled included.
        struct Done<'a>(&'a AtomicUsize);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _done = Done(&self.running);
        // A round trip to the database.
        tokio::time::sleep(Duration::from_millis(2)).await;
        match query {
            Query::Get(k) => {
                let found = self.rows.lock().unwrap().get(k).cloned();
                Message::text(match found {
                    Some(v) => format!("{k} = {v}"),
                    None => format!("{k}: not found"),
                })
            }
            Query::Set(k, v) => {
                self.rows.lock().unwrap().insert(k.clone(), v.clone());
                Message::text(format!("{k} set"))
            }
            Query::Sleep(ms) => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                Message::text(format!("slept {ms}"))
            }
            Query::Blob(n) => Message::binary(vec![b'x'; *n]),
        }
    }
}

/// What the hub keeps per connection: no task, a few words.
struct Session {
    /// Resolved when the latest query's answer is handed to the hub.
    last: Option<oneshot::Receiver<()>>,
    /// Permits for queries in progress.
    in_flight: Arc<Semaphore>,
    /// Cancelled when the connection closes.
    gone: CancellationToken,
}

#[derive(Clone)]
struct Queries {
    hub: HubHandle,
    db: Db,
    options: Arc<Options>,
}

impl Handler for Queries {
    type Data = Session;

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<Session, HttpResponse> {
        Ok(Session {
            last: None,
            in_flight: Arc::new(Semaphore::new(self.options.max_in_flight)),
            gone: CancellationToken::new(),
        })
    }

    fn message(&mut self, ws: &mut Ws<'_, Session>, msg: HubMessage<'_>) {
        let HubMessage::Text(text) = msg else {
            let _ = ws.send_text("commands are text");
            return;
        };
        let Ok(permit) = ws.data().in_flight.clone().try_acquire_owned() else {
            // The client asks faster than it waits for answers.
            let _ = ws.close(CloseCode::TRY_AGAIN_LATER, "too many queries in flight");
            return;
        };
        let query = Query::parse(text);
        let label = text.chars().take(32).collect::<String>();
        let (done, next) = oneshot::channel();
        let session = ws.data_mut();
        let previous = session.last.replace(next);
        let gone = session.gone.clone();
        let (hub, db, id, timeout) = (
            self.hub.clone(),
            self.db.clone(),
            ws.id(),
            self.options.timeout,
        );
        tokio::spawn(async move {
            let answer = async {
                // The previous query answered first (a dropped sender, a
                // cancelled query, counts as answered).
                if let Some(previous) = previous {
                    let _ = previous.await;
                }
                let Some(q) = query else {
                    return Message::text(format!("{label}: unknown command"));
                };
                match tokio::time::timeout(timeout, db.call(&q)).await {
                    Ok(answer) => answer,
                    Err(_) => Message::text(format!("{label}: timed out")),
                }
            };
            let answer = tokio::select! {
                answer = answer => answer,
                // Closed: nobody to answer; the call is dropped.
                () = gone.cancelled() => return,
            };
            // Waits for room in the engine's queue: a flood of answers
            // slows these tasks, not the hub.
            let _ = hub.send(id, answer).await;
            drop(permit);
            let _ = done.send(());
        });
    }

    fn close(&mut self, _: Closed, session: Session) {
        session.gone.cancel();
    }
}

/// Serves the queries on `listener` with `db` until the process ends.
pub async fn serve(listener: TcpListener, db: Db, options: Options) -> wavesock::Result<()> {
    let config = HubConfig::default()
        .config(
            Config::default()
                .max_message_size(64 << 10)
                // Above what a client within its limits can have in flight
                // (`MAX_IN_FLIGHT` answers of `BLOB_MAX`): only one past
                // them, such as a test with a larger `max_in_flight`, is
                // cut off.
                .max_backpressure(2 * MAX_IN_FLIGHT * BLOB_MAX),
        )
        .backpressure_policy(BackpressurePolicy::Close);
    let options = Arc::new(options);
    let hub = Hub::with_handle(config, |hub| Queries {
        hub: hub.clone(),
        db,
        options,
    })?;
    hub.serve(listener).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9002".into());
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("hub_async listening on {}", listener.local_addr()?);
    Ok(serve(listener, Db::default(), Options::default()).await?)
}
