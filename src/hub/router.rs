//! Several WebSocket routes on one hub, each with its own handler and
//! data type, as uWebSockets' `app.ws(pattern, behavior)`.

// Refusals are `Handler::upgrade`'s `HttpResponse`, made at most once per
// connection: boxing them would only add an allocation to every refusal.
#![allow(clippy::result_large_err)]

use std::any::Any;

use http::{Request, Response, StatusCode};

use crate::hub::event::{Closed, HttpResponse, HubMessage, respond};
use crate::hub::handler::Handler;
use crate::hub::ws::Ws;

/// A [`Handler`] that hands each connection to the handler of the route
/// its request's path matches, each route with its own handler and
/// [`Handler::Data`] type (feature `router`).
///
/// Patterns are axum's (the same matcher, `matchit`): `/chat/{room}`
/// takes one segment as `room`, `/files/{*path}` the rest of the path,
/// and a static segment wins over a parameter. The route's
/// [`upgrade`](Handler::upgrade) and [`request`](Handler::request) find
/// the parameters, percent-decoded, as [`PathParams`] in the request's
/// extensions; [`Query`] reads the query string. A request whose path no
/// route matches is answered `404 Not Found`; one whose parameters are
/// not UTF-8 once decoded, `400 Bad Request`.
///
/// A route's handler is called exactly as a hub's own would be, with a
/// [`Ws`] typed with its own data: the router adds a look-up per upgrade
/// and a boxed data per connection, nothing per message but a virtual
/// call.
///
/// Connections handed to the hub through an [`Adopter`](crate::hub::Adopter)
/// need a [`RouteData`], which only the router makes: upgrade through the
/// hub itself ([`Hub::serve`](crate::hub::Hub::serve),
/// [`HubHandle::accept`](crate::hub::HubHandle::accept)) to route.
///
/// ```no_run
/// use wavesock::hub::{Handler, HttpResponse, Hub, HubConfig, HubMessage, PathParams, Query, Router, Ws};
/// use wavesock::http::{Request, Response};
///
/// #[derive(Clone)]
/// struct Chat;
///
/// impl Handler for Chat {
///     /// The room and the user's name.
///     type Data = (String, String);
///
///     fn upgrade(&mut self, req: &Request<()>, _: &mut Response<()>) -> Result<Self::Data, HttpResponse> {
///         let room = req.extensions().get::<PathParams>().and_then(|p| p.get("room")).unwrap_or("lobby");
///         let name = Query::from_request(req).get("name").unwrap_or("anonymous").to_owned();
///         Ok((room.to_owned(), name))
///     }
///
///     fn open(&mut self, ws: &mut Ws<'_, Self::Data>) {
///         let room = ws.data().0.clone();
///         ws.subscribe(&room);
///     }
///
///     fn message(&mut self, ws: &mut Ws<'_, Self::Data>, msg: HubMessage<'_>) {
///         let room = ws.data().0.clone();
///         ws.publish(&room, msg);
///     }
/// }
///
/// #[derive(Clone)]
/// struct Echo;
///
/// impl Handler for Echo {
///     type Data = ();
///
///     fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
///         Ok(())
///     }
///
///     fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
///         let _ = ws.send_borrowed(msg);
///     }
/// }
///
/// # async fn run() -> wavesock::Result<()> {
/// let routes = Router::new().route("/chat/{room}", Chat).route("/echo", Echo);
/// let hub = Hub::new(routes, HubConfig::default())?;
/// hub.serve(tokio::net::TcpListener::bind("127.0.0.1:9001").await?).await
/// # }
/// ```
#[derive(Default)]
pub struct Router {
    matcher: matchit::Router<usize>,
    routes: Vec<Box<dyn Route>>,
}

impl Clone for Router {
    fn clone(&self) -> Self {
        Router {
            matcher: self.matcher.clone(),
            routes: self.routes.iter().map(|r| r.clone_box()).collect(),
        }
    }
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("routes", &self.routes.len())
            .finish_non_exhaustive()
    }
}

/// Why a route was not added: its pattern is malformed, or conflicts with
/// one added before (`/a/{x}` and `/a/{y}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route {pattern:?}: {reason}")]
pub struct RouteError {
    pattern: String,
    reason: String,
}

impl Router {
    /// A router with no routes: every request is answered `404`.
    pub fn new() -> Self {
        Router::default()
    }

    /// Adds a route: connections whose request path matches `pattern` go
    /// to `handler` (cloned into each engine).
    ///
    /// # Panics
    ///
    /// If the pattern is malformed or conflicts with one added before, as
    /// axum's `Router::route`; [`try_route`](Self::try_route) returns the
    /// error instead.
    #[track_caller]
    pub fn route<H: Handler>(self, pattern: &str, handler: H) -> Self {
        match self.try_route(pattern, handler) {
            Ok(router) => router,
            Err(e) => panic!("{e}"),
        }
    }

    /// Adds a route as [`route`](Self::route) does, or says why not.
    pub fn try_route<H: Handler>(mut self, pattern: &str, handler: H) -> Result<Self, RouteError> {
        self.matcher
            .insert(pattern, self.routes.len())
            .map_err(|e| RouteError {
                pattern: pattern.to_owned(),
                reason: e.to_string(),
            })?;
        self.routes.push(Box::new(handler));
        Ok(self)
    }

    /// The route for `request`, and the request with its [`PathParams`]
    /// added; or the answer refusing it.
    fn find(&self, request: &Request<()>) -> Result<(usize, Request<()>), HttpResponse> {
        let found = self
            .matcher
            .at(request.uri().path())
            .map_err(|_| respond(StatusCode::NOT_FOUND, "no route for this path"))?;
        let mut params = Vec::with_capacity(found.params.len());
        for (name, value) in found.params.iter() {
            let value = percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .map_err(|_| {
                    respond(
                        StatusCode::BAD_REQUEST,
                        "a path parameter is not UTF-8 once decoded",
                    )
                })?;
            params.push((name.to_owned(), value.into_owned()));
        }
        let mut request = request.clone();
        request.extensions_mut().insert(PathParams(params));
        Ok((*found.value, request))
    }
}

/// A routed connection's data: the route it came by and its handler's
/// own data, boxed. Made only by [`Router`].
pub struct RouteData {
    route: usize,
    data: Box<dyn Any + Send>,
}

impl std::fmt::Debug for RouteData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteData")
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl Handler for Router {
    type Data = RouteData;

    fn upgrade(
        &mut self,
        request: &Request<()>,
        response: &mut Response<()>,
    ) -> Result<RouteData, HttpResponse> {
        let (route, request) = self.find(request)?;
        let data = self.routes[route].upgrade(&request, response)?;
        Ok(RouteData { route, data })
    }

    fn request(&mut self, request: &Request<()>) -> Option<HttpResponse> {
        match self.find(request) {
            Ok((route, request)) => self.routes[route].request(&request),
            Err(refusal) => Some(refusal),
        }
    }

    fn open(&mut self, ws: &mut Ws<'_, RouteData>) {
        let route = ws.data.route;
        self.routes[route].open(ws);
    }

    fn message(&mut self, ws: &mut Ws<'_, RouteData>, msg: HubMessage<'_>) {
        let route = ws.data.route;
        self.routes[route].message(ws, msg);
    }

    fn drain(&mut self, ws: &mut Ws<'_, RouteData>) {
        let route = ws.data.route;
        self.routes[route].drain(ws);
    }

    fn ping(&mut self, ws: &mut Ws<'_, RouteData>, payload: &[u8]) {
        let route = ws.data.route;
        self.routes[route].ping(ws, payload);
    }

    fn pong(&mut self, ws: &mut Ws<'_, RouteData>, payload: &[u8]) {
        let route = ws.data.route;
        self.routes[route].pong(ws, payload);
    }

    fn close(&mut self, closed: Closed, data: RouteData) {
        // Made by this router's `upgrade`: the index is one of its routes.
        self.routes[data.route].close(closed, data.data);
    }
}

/// A route's handler with its data type erased, so that routes of
/// different handler types share one table.
trait Route: Send {
    fn clone_box(&self) -> Box<dyn Route>;
    fn upgrade(
        &mut self,
        request: &Request<()>,
        response: &mut Response<()>,
    ) -> Result<Box<dyn Any + Send>, HttpResponse>;
    fn request(&mut self, request: &Request<()>) -> Option<HttpResponse>;
    fn open(&mut self, ws: &mut Ws<'_, RouteData>);
    fn message(&mut self, ws: &mut Ws<'_, RouteData>, msg: HubMessage<'_>);
    fn drain(&mut self, ws: &mut Ws<'_, RouteData>);
    fn ping(&mut self, ws: &mut Ws<'_, RouteData>, payload: &[u8]);
    fn pong(&mut self, ws: &mut Ws<'_, RouteData>, payload: &[u8]);
    fn close(&mut self, closed: Closed, data: Box<dyn Any + Send>);
}

/// `ws` as the route's handler sees it: its own data type.
fn typed<'b, T: 'static>(ws: &'b mut Ws<'_, RouteData>) -> Ws<'b, T> {
    Ws {
        io: ws.io,
        conn: &mut *ws.conn,
        // The router boxed this route's handler's data, of this type, in
        // `upgrade`.
        data: ws
            .data
            .data
            .downcast_mut::<T>()
            .expect("a route's data is its handler's"),
        turn: &mut *ws.turn,
    }
}

impl<H: Handler> Route for H {
    fn clone_box(&self) -> Box<dyn Route> {
        Box::new(self.clone())
    }

    fn upgrade(
        &mut self,
        request: &Request<()>,
        response: &mut Response<()>,
    ) -> Result<Box<dyn Any + Send>, HttpResponse> {
        Handler::upgrade(self, request, response).map(|d| Box::new(d) as Box<dyn Any + Send>)
    }

    fn request(&mut self, request: &Request<()>) -> Option<HttpResponse> {
        Handler::request(self, request)
    }

    fn open(&mut self, ws: &mut Ws<'_, RouteData>) {
        Handler::open(self, &mut typed(ws));
    }

    fn message(&mut self, ws: &mut Ws<'_, RouteData>, msg: HubMessage<'_>) {
        Handler::message(self, &mut typed(ws), msg);
    }

    fn drain(&mut self, ws: &mut Ws<'_, RouteData>) {
        Handler::drain(self, &mut typed(ws));
    }

    fn ping(&mut self, ws: &mut Ws<'_, RouteData>, payload: &[u8]) {
        Handler::ping(self, &mut typed(ws), payload);
    }

    fn pong(&mut self, ws: &mut Ws<'_, RouteData>, payload: &[u8]) {
        Handler::pong(self, &mut typed(ws), payload);
    }

    fn close(&mut self, closed: Closed, data: Box<dyn Any + Send>) {
        if let Ok(data) = data.downcast::<H::Data>() {
            Handler::close(self, closed, *data);
        }
    }
}

/// The path parameters of the route a request matched, percent-decoded,
/// in the request's extensions (see [`Router`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathParams(Vec<(String, String)>);

impl PathParams {
    /// The value of parameter `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every parameter, in the pattern's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

/// A request's query string, decoded as an HTML form
/// (`application/x-www-form-urlencoded`: `+` is a space, `%XX` a byte,
/// bytes that are not UTF-8 replaced), as axum's `Query` reads it.
///
/// ```
/// use wavesock::hub::Query;
/// use wavesock::http::Request;
///
/// let req = Request::get("/chat?name=J%C3%BCrgen&room=a+b&room=c").body(())?;
/// let query = Query::from_request(&req);
/// assert_eq!(query.get("name"), Some("Jürgen"));
/// assert_eq!(query.get("room"), Some("a b"));
/// assert_eq!(query.get_all("room").collect::<Vec<_>>(), ["a b", "c"]);
/// assert_eq!(query.get("missing"), None);
/// # Ok::<(), wavesock::http::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// The query of `request`'s URI (empty without one).
    pub fn from_request<B>(request: &Request<B>) -> Query {
        Query::parse(request.uri().query().unwrap_or(""))
    }

    /// Decodes `query` (without its `?`).
    pub fn parse(query: &str) -> Query {
        Query(
            form_urlencoded::parse(query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Named(&'static str);

    impl Handler for Named {
        type Data = &'static str;

        fn upgrade(
            &mut self,
            request: &Request<()>,
            _: &mut Response<()>,
        ) -> Result<&'static str, HttpResponse> {
            let params = request.extensions().get::<PathParams>().expect("params");
            if params.get("id") == Some("refuse") {
                return Err(respond(StatusCode::FORBIDDEN, self.0));
            }
            Ok(self.0)
        }

        fn request(&mut self, request: &Request<()>) -> Option<HttpResponse> {
            let params = request.extensions().get::<PathParams>()?;
            Some(respond(
                StatusCode::OK,
                format!("{} {:?}", self.0, params.iter().collect::<Vec<_>>()),
            ))
        }

        fn message(&mut self, _: &mut Ws<'_, &'static str>, _: HubMessage<'_>) {}
    }

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    fn body(r: HttpResponse) -> (StatusCode, String) {
        (r.status(), String::from_utf8(r.into_body()).unwrap())
    }

    fn router() -> Router {
        Router::new()
            .route("/a/{id}", Named("a"))
            .route("/a/static", Named("static"))
            .route("/files/{*rest}", Named("files"))
    }

    #[test]
    fn requests_go_to_the_route_their_path_matches_with_decoded_params() {
        let mut r = router();
        let mut answer =
            |path: &str| body(Handler::request(&mut r, &get(path)).expect("an answer"));
        assert_eq!(
            answer("/a/x%20y?q=1"),
            (StatusCode::OK, r#"a [("id", "x y")]"#.into())
        );
        assert_eq!(answer("/a/static"), (StatusCode::OK, "static []".into()));
        assert_eq!(
            answer("/files/d/e.txt"),
            (StatusCode::OK, r#"files [("rest", "d/e.txt")]"#.into())
        );
        assert_eq!(answer("/b").0, StatusCode::NOT_FOUND);
        assert_eq!(answer("/a/%FF").0, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn upgrades_keep_the_route_and_its_handler_s_data() {
        let mut r = router();
        let mut response = Response::new(());
        let d = Handler::upgrade(&mut r, &get("/files/x"), &mut response).unwrap();
        assert_eq!(d.route, 2);
        assert_eq!(d.data.downcast_ref::<&str>(), Some(&"files"));
        let d = Handler::upgrade(&mut r, &get("/a/static"), &mut response).unwrap();
        assert_eq!(d.route, 1);
        let refused = Handler::upgrade(&mut r, &get("/a/refuse"), &mut response).unwrap_err();
        assert_eq!(body(refused), (StatusCode::FORBIDDEN, "a".into()));
        let missing = Handler::upgrade(&mut r, &get("/nowhere"), &mut response).unwrap_err();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        // A clone routes alike (each engine has one).
        let d = Handler::upgrade(&mut r.clone(), &get("/a/1"), &mut response).unwrap();
        assert_eq!((d.route, d.data.downcast_ref::<&str>()), (0, Some(&"a")));
    }

    #[test]
    fn conflicting_or_malformed_patterns_are_refused() {
        assert!(router().try_route("/a/{other}", Named("x")).is_err());
        assert!(Router::new().try_route("/a/{", Named("x")).is_err());
        let err = Router::new()
            .route("/x", Named("x"))
            .try_route("/x", Named("y"))
            .unwrap_err();
        assert!(err.to_string().contains("\"/x\""), "{err}");
    }

    #[test]
    fn query_strings_decode_as_forms() {
        let q = Query::parse("a=1&b=%E2%9C%93&a=2&c&d=x+y&bad=%FF");
        assert_eq!(q.get("a"), Some("1"));
        assert_eq!(q.get_all("a").collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(q.get("b"), Some("✓"));
        assert_eq!(q.get("c"), Some(""));
        assert_eq!(q.get("d"), Some("x y"));
        assert_eq!(q.get("bad"), Some("\u{FFFD}"));
        assert_eq!(Query::from_request(&get("/p")), Query::default());
    }
}
