//! What a hub does with its connections.

use http::{Request, Response};

use crate::hub::event::{Closed, HttpResponse, HubMessage};
use crate::hub::ws::Ws;

/// What a hub does with its connections: decides on upgrades and takes
/// their events. Each engine has its own clone; share state between them
/// with an `Arc`.
///
/// Every method is called on the engine's task and should not block: a slow
/// handler holds up every connection of its engine.
pub trait Handler: Clone + Send + 'static {
    /// What the application keeps per connection.
    type Data: Send + 'static;

    /// A WebSocket upgrade request, already checked against RFC 6455. Return
    /// the connection's data to accept it (headers added to `response`,
    /// such as a subprotocol, are sent with the `101`), or a refusal
    /// ([`respond`](crate::hub::respond) makes one).
    ///
    /// The request's extensions hold the connection's
    /// [`Addresses`](crate::hub::Addresses) and, under a `Router`
    /// (feature `router`), the route's `PathParams`.
    #[allow(clippy::result_large_err)]
    fn upgrade(
        &mut self,
        request: &Request<()>,
        response: &mut Response<()>,
    ) -> std::result::Result<Self::Data, HttpResponse>;

    /// A request that is not a WebSocket upgrade (a page, a health check):
    /// return the response to send, or `None` for the default refusal
    /// (`426 Upgrade Required` or `400 Bad Request`). The connection is
    /// closed after the response. Its extensions hold what
    /// [`upgrade`](Self::upgrade)'s do.
    fn request(&mut self, request: &Request<()>) -> Option<HttpResponse> {
        let _ = request;
        None
    }

    /// The connection is open (the `101` is on its way).
    fn open(&mut self, ws: &mut Ws<'_, Self::Data>) {
        let _ = ws;
    }

    /// A text or binary message, borrowed for the call.
    fn message(&mut self, ws: &mut Ws<'_, Self::Data>, msg: HubMessage<'_>);

    /// Every byte that waited for the peer is written, after a send found
    /// more than `max_backpressure` waiting ([`SendStatus::Backpressure`](crate::hub::SendStatus::Backpressure)
    /// or [`SendStatus::Dropped`](crate::hub::SendStatus::Dropped)): sending may resume.
    fn drain(&mut self, ws: &mut Ws<'_, Self::Data>) {
        let _ = ws;
    }

    /// A ping arrived. Its pong is sent for you, with the other replies
    /// of this read once its callbacks are done (a Stream writes it
    /// before `next()` yields the ping instead: see the guide's
    /// [frames wavesock sends on its own](crate::guide#the-frames-wavesock-sends-on-its-own)).
    fn ping(&mut self, ws: &mut Ws<'_, Self::Data>, payload: &[u8]) {
        let _ = (ws, payload);
    }

    /// A pong arrived.
    fn pong(&mut self, ws: &mut Ws<'_, Self::Data>, payload: &[u8]) {
        let _ = (ws, payload);
    }

    /// The connection is gone; its data is handed back.
    fn close(&mut self, closed: Closed, data: Self::Data) {
        let _ = (closed, data);
    }
}
