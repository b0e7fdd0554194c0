//! The instance's one HTTP server: what a request and an answer are to a route
//! ([`HttpRequest`], [`HttpResponse`]), the routes by path prefix (`Routes`), and the server
//! that answers them on every address it listens at (`server.rs`).
//!
//! An application adds routes with [`crate::StreamsApp::add_http_route`]; telemetry adds
//! `/metrics`. A handler is plain blocking code (it may ask the stream threads, or a Kafka
//! broker, and wait): the server runs it on a small pool of threads, never on the thread that
//! reads and writes the connections.

mod server;

use std::sync::Arc;

use bytes::Bytes;

pub(crate) use crate::http::server::{HttpOptions, HttpServer};
use crate::types::error::{Error, Result};

/// A request, as a route's handler is given it: method, path and query as the client sent
/// them (percent-encoded), and the headers whose values are text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    method: String,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
}

impl HttpRequest {
    /// A request for `target` (`/path?query`) by `method`, without headers: what the server
    /// makes of one it reads, and what a test of a handler passes it.
    pub fn new(method: impl Into<String>, target: &str) -> Self {
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query.to_owned())),
            None => (target, None),
        };
        HttpRequest {
            method: method.into(),
            path: path.to_owned(),
            query,
            headers: Vec::new(),
        }
    }

    /// This request with header `name: value` added.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// `GET`, `HEAD`, `POST`, …
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The path, percent-encoded as sent (`/counts/key%201`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What follows the `?`, if anything did.
    pub fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the method only reads (`GET` or `HEAD`; the server leaves a `HEAD` answer's body
    /// out).
    pub fn is_read(&self) -> bool {
        matches!(self.method.as_str(), "GET" | "HEAD")
    }
}

/// An answer: a status, headers and a whole body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl HttpResponse {
    /// `status` with `body` as `content_type`.
    pub fn new(status: u16, content_type: &str, body: impl Into<Bytes>) -> Self {
        HttpResponse {
            status,
            headers: vec![("Content-Type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }

    /// `status` with `body` as UTF-8 plain text.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        HttpResponse::new(status, "text/plain; charset=utf-8", body.into())
    }

    /// This answer with header `name: value` added. A value that is not visible ASCII (or
    /// tabs and spaces) cannot be sent: the server leaves that header out.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    pub(crate) fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    pub(crate) fn into_body(self) -> Bytes {
        self.body
    }
}

/// What answers the requests of one route.
pub type HttpHandler = Arc<dyn Fn(&HttpRequest) -> HttpResponse + Send + Sync>;

/// The server's routes: a handler per path prefix.
#[derive(Clone, Default)]
pub(crate) struct Routes {
    routes: Vec<(String, HttpHandler)>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.routes.iter().map(|(p, _)| p))
            .finish()
    }
}

impl Routes {
    /// Routes the paths under `prefix` to `handler`. A prefix starts with `/`; one ending in
    /// `/` (`/counts/`) takes every path that starts with it, one that does not (`/metrics`)
    /// takes itself and the paths under it (`/metrics/…`). A prefix already taken is
    /// [`Error::Config`].
    pub(crate) fn add(&mut self, prefix: &str, handler: HttpHandler) -> Result<()> {
        if !prefix.starts_with('/') {
            return Err(Error::Config(format!(
                "HTTP route {prefix:?}: a route is a path prefix starting with /"
            )));
        }
        if self.routes.iter().any(|(p, _)| p == prefix) {
            return Err(Error::Config(format!(
                "HTTP route {prefix:?}: already taken"
            )));
        }
        self.routes.push((prefix.to_owned(), handler));
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The handler of the longest prefix that takes `path`.
    fn find(&self, path: &str) -> Option<&HttpHandler> {
        self.routes
            .iter()
            .filter(|(prefix, _)| takes(prefix, path))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, handler)| handler)
    }

    /// The answer of the route that takes `request`'s path; 404, naming the routes, if none
    /// does.
    pub(crate) fn answer(&self, request: &HttpRequest) -> HttpResponse {
        match self.find(request.path()) {
            Some(handler) => handler(request),
            None => {
                let mut prefixes: Vec<&str> = self.routes.iter().map(|(p, _)| p.as_str()).collect();
                prefixes.sort_unstable();
                HttpResponse::text(
                    404,
                    format!(
                        "not found: {}; this server answers {}\n",
                        request.path(),
                        prefixes.join(", ")
                    ),
                )
            }
        }
    }
}

/// Whether route `prefix` takes `path`.
fn takes(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn named(name: &'static str) -> HttpHandler {
        Arc::new(move |_| HttpResponse::text(200, name))
    }

    #[test]
    fn the_longest_prefix_that_takes_a_path_answers() {
        let mut routes = Routes::default();
        routes.add("/metrics", named("metrics")).unwrap();
        routes.add("/counts/", named("counts")).unwrap();
        routes.add("/counts/special/", named("special")).unwrap();
        let body = |target: &str| {
            let answer = routes.answer(&HttpRequest::new("GET", target));
            (
                answer.status(),
                String::from_utf8_lossy(answer.body()).into_owned(),
            )
        };
        assert_eq!(body("/metrics"), (200, "metrics".into()));
        assert_eq!(body("/metrics/x?y"), (200, "metrics".into()));
        assert_eq!(body("/counts/a"), (200, "counts".into()));
        assert_eq!(body("/counts/"), (200, "counts".into()));
        assert_eq!(body("/counts/special/a"), (200, "special".into()));
        let (status, text) = body("/metricsfoo");
        assert_eq!(status, 404);
        assert!(
            text.contains("/counts/, /counts/special/, /metrics"),
            "{text}"
        );
        assert_eq!(body("/counts").0, 404);
        assert!(routes.add("/metrics", named("again")).is_err());
        assert!(routes.add("metrics", named("no slash")).is_err());
    }

    #[test]
    fn a_request_splits_its_target_and_finds_headers_in_any_case() {
        let r =
            HttpRequest::new("GET", "/counts/a%20b?redirected&x=1").with_header("Accept", "*/*");
        assert_eq!(r.path(), "/counts/a%20b");
        assert_eq!(r.query(), Some("redirected&x=1"));
        assert_eq!(r.header("accept"), Some("*/*"));
        assert!(r.is_read());
        assert!(!HttpRequest::new("POST", "/").is_read());
    }
}
