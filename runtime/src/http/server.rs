//! The server: hyper's HTTP/1.1 on a tokio runtime of one thread.
//!
//! That thread accepts on every listener and reads and writes every connection; a connection
//! is a task, not a thread, so idle clients cost a few kilobytes each. hyper's header-read
//! timeout bounds each connection's wait for a request head: from connecting, and again from
//! each answer on a kept-alive connection, so a client that sends half a request, or that
//! keeps a connection open and sends nothing, is disconnected after
//! [`HttpOptions::header_read_timeout`]. Handlers run on the runtime's blocking pool, at most
//! [`HttpOptions::handler_threads`] at once (started when needed, gone after 10 s idle), so a
//! slow one never stalls the connections. Stopping sends the accept loop a signal it awaits
//! beside the listeners (nothing polls on a timer); the runtime then drops every connection
//! and the thread ends.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::http::{HttpRequest, HttpResponse, Routes};

/// How long a stopping server waits for handlers still running (their answers have nowhere
/// to go by then) before it leaves them to finish on their own.
const STOP_GRACE: Duration = Duration::from_millis(100);

/// How long the accept loop waits after an error accepting (out of file descriptors) before
/// it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The largest request head the server reads (hyper's read buffer's bound), per connection.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// How the server treats its connections.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HttpOptions {
    /// How long a connection may take to send a complete request head, counted from when it
    /// connects or was last answered; then it is closed.
    pub(crate) header_read_timeout: Duration,
    /// Handlers running at once, at most; more requests wait for one to finish.
    pub(crate) handler_threads: usize,
}

/// A running server: its thread, and the signal that stops it.
#[derive(Debug)]
pub(crate) struct HttpServer {
    addrs: Vec<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Serves `routes` on `listeners` from a thread named `<name>-http`; the handlers' threads
    /// are `<name>-http-handler`.
    pub(crate) fn start(
        name: &str,
        listeners: Vec<std::net::TcpListener>,
        routes: Routes,
        options: HttpOptions,
    ) -> std::io::Result<HttpServer> {
        let mut addrs = Vec::with_capacity(listeners.len());
        for listener in &listeners {
            listener.set_nonblocking(true)?;
            addrs.push(listener.local_addr()?);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(options.handler_threads.max(1))
            .thread_name(format!("{name}-http-handler"))
            .build()?;
        let listeners = {
            let _inside = runtime.enter();
            listeners
                .into_iter()
                .map(TcpListener::from_std)
                .collect::<std::io::Result<Vec<_>>>()?
        };
        let (stop, stopped) = oneshot::channel();
        let handle = std::thread::Builder::new()
            .name(format!("{name}-http"))
            .spawn(move || {
                runtime.block_on(accept(listeners, Arc::new(routes), options, stopped));
                runtime.shutdown_timeout(STOP_GRACE);
            })?;
        Ok(HttpServer {
            addrs,
            stop: Some(stop),
            handle: Some(handle),
        })
    }

    /// The addresses it listens at, in the order of its listeners.
    pub(crate) fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting, closes every connection and joins the thread.
    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts on every listener until `stopped` fires (or its sender is dropped), each
/// connection a task of its own.
async fn accept(
    listeners: Vec<TcpListener>,
    routes: Arc<Routes>,
    options: HttpOptions,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        // `Content-Type`, `Location`: as the clients and tests that read them by name expect.
        .title_case_headers(true);
    loop {
        let accepted = poll_fn(|cx| {
            if Pin::new(&mut stopped).poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            for listener in &listeners {
                if let Poll::Ready(accepted) = listener.poll_accept(cx) {
                    return Poll::Ready(Some(accepted));
                }
            }
            Poll::Pending
        })
        .await;
        match accepted {
            None => return,
            Some(Ok((stream, _))) => {
                let _ = stream.set_nodelay(true);
                let routes = routes.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let routes = routes.clone();
                    async move { Ok::<_, Infallible>(answer(routes, request).await) }
                });
                let connection = http.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!(error = %e, "an HTTP connection ended");
                    }
                });
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the HTTP server cannot accept a connection");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// `request`'s answer from its route, computed on the blocking pool; 500 if the handler
/// panicked.
async fn answer(routes: Arc<Routes>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let uri = request.uri();
    let target = match uri.query() {
        Some(query) => format!("{}?{query}", uri.path()),
        None => uri.path().to_owned(),
    };
    let mut asked = HttpRequest::new(request.method().as_str(), &target);
    for (name, value) in request.headers() {
        if let Ok(value) = value.to_str() {
            asked = asked.with_header(name.as_str(), value);
        }
    }
    let answered = tokio::task::spawn_blocking(move || routes.answer(&asked))
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "an HTTP handler panicked");
            HttpResponse::text(500, "the handler failed\n")
        });
    into_hyper(answered)
}

fn into_hyper(answer: HttpResponse) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(answer.status()).unwrap_or_else(|_| {
        tracing::warn!(
            status = answer.status(),
            "an HTTP handler answered a bad status"
        );
        StatusCode::INTERNAL_SERVER_ERROR
    });
    let mut response = Response::builder().status(status);
    for (name, value) in answer.headers() {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(value)) => response = response.header(name, value),
            _ => tracing::debug!(name, value, "an HTTP header that cannot be sent, left out"),
        }
    }
    response
        .body(Full::new(answer.into_body()))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::from_static(b"bad answer\n"))))
}
