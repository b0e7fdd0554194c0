//! The instance's one HTTP server, on real sockets on loopback: `/metrics` and an
//! application's routes from one server and port; 200 idle clients with half-sent requests
//! delay neither by more than 100 ms and cost it no thread each; a client that does not finish
//! its request head within `riffle.http.header.read.timeout.ms` is disconnected, and so is a
//! kept-alive connection that asks nothing more; a kept-alive connection gets one answer per
//! request; `close` stops the server within a second with clients connected and a handler
//! still running; routes are checked and added before `start` only.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use riffle::http::{HttpRequest, HttpResponse};
use riffle::log::{Log, LogOptions};
use riffle::{EmbeddedBackend, StreamsApp, StreamsConfig};

mod common;

/// An app counting a small input, with `settings`, its HTTP server at 127.0.0.1:0, and the
/// routes `/hello/` (the path back) and `/slow` (answers after 3 s).
fn app(application_id: &str, settings: &[(&str, &str)]) -> (tempfile::TempDir, StreamsApp) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    let records: Vec<(String, String)> = (0..100)
        .map(|i| (format!("key-{}", i % 7), "v".to_owned()))
        .collect();
    common::produce(&log, "in", 2, &records);
    let mut config = StreamsConfig::new(application_id);
    config.state_dir = dir.path().join("state");
    config.poll = Duration::from_millis(5);
    config
        .set("metrics.http.addr", "127.0.0.1:0")
        .expect("metrics.http.addr");
    for (name, value) in settings {
        config.set(name, value).expect("a setting");
    }
    let mut app = StreamsApp::new(
        common::persistent_count_topology(),
        config,
        EmbeddedBackend::new(log).shared(),
    )
    .expect("app");
    app.add_http_route("/hello/", |r: &HttpRequest| {
        HttpResponse::text(200, format!("hello {}", r.path()))
    })
    .expect("route");
    app.add_http_route("/slow", |_: &HttpRequest| {
        std::thread::sleep(Duration::from_secs(3));
        HttpResponse::text(200, "late")
    })
    .expect("route");
    (dir, app)
}

/// Reads one response off `stream`: (status, body). Headers end at a blank line; the body is
/// `Content-Length` bytes, if it has one (not an answer to `HEAD`).
fn read_response(stream: &mut TcpStream, with_body: bool) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("a response head");
        assert_eq!(n, 1, "closed mid-head: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).expect("ASCII head");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("a Content-Length");
    let mut body = vec![0; if with_body { length } else { 0 }];
    stream.read_exact(&mut body).expect("the body");
    (status, String::from_utf8(body).expect("UTF-8 body"))
}

/// `method path` on a connection of its own (closed after the answer); a `HEAD` answer has no
/// body.
fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    read_response(&mut stream, method != "HEAD")
}

/// The median of five `GET path`s, each on a new connection.
fn latency(addr: SocketAddr, path: &str) -> Duration {
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let (status, _) = request(addr, "GET", path);
            assert_eq!(status, 200, "GET {path}");
            started.elapsed()
        })
        .collect();
    times.sort();
    times[2]
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// Waits for `stream` to be closed by the server: the time it took, or `None` if it was not
/// within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(_) => return Some(started.elapsed()),
        }
    }
}

#[test]
fn two_hundred_idle_clients_delay_no_answer_and_cost_no_thread_each() {
    // A short id: a thread's name is cut at 15 bytes (`ih-http-handler`).
    let (_dir, mut app) = app("ih", &[]);
    app.start().expect("start");
    let addr = app.metrics_addr().expect("listens");
    assert_eq!(app.http_addrs(), vec![addr]);
    common::wait_idle(&app);
    let (status, body) = request(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("kafka_streams_stream_thread_metrics_process_total"));
    assert_eq!(
        request(addr, "GET", "/hello/a%20b"),
        (200, "hello /hello/a%20b".to_owned()),
        "the application's route on the same server and port"
    );
    let metrics_alone = latency(addr, "/metrics");
    let route_alone = latency(addr, "/hello/x");

    // Half of them send half a request head, half connect and send nothing.
    let mut idle: Vec<TcpStream> = (0..200)
        .map(|i| {
            let mut s = TcpStream::connect(addr).expect("connect");
            if i % 2 == 0 {
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .expect("half a request");
            }
            s
        })
        .collect();
    let metrics_idle = latency(addr, "/metrics");
    let route_idle = latency(addr, "/hello/x");
    let server_threads = threads_named("ih-http");
    println!(
        "alone: /metrics {metrics_alone:?}, /hello/x {route_alone:?}; under 200 idle clients: \
         /metrics {metrics_idle:?}, /hello/x {route_idle:?}; the server's threads: {server_threads}"
    );
    let bound = Duration::from_millis(100);
    assert!(
        metrics_idle < metrics_alone + bound && route_idle < route_alone + bound,
        "held up by idle clients: /metrics {metrics_alone:?} → {metrics_idle:?}, \
         /hello/x {route_alone:?} → {route_idle:?}"
    );
    // The connections' thread and at most four handler threads, whatever the clients.
    assert!(
        (1..=5).contains(&server_threads),
        "{server_threads} threads"
    );

    // A handler is still running (3 s) and 200 clients are connected: close takes under 1 s,
    // and every client is disconnected.
    let slow = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("request");
        closed_within(&mut s, Duration::from_secs(10))
    });
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    app.close().expect("close");
    let stopped = started.elapsed();
    println!("closed with 200 idle clients and a handler running in {stopped:?}");
    assert!(stopped < Duration::from_secs(1), "close took {stopped:?}");
    assert!(TcpStream::connect(addr).is_err(), "the server stopped");
    for s in &mut idle {
        assert!(
            closed_within(s, Duration::from_secs(2)).is_some(),
            "an idle client still connected after close"
        );
    }
    let slow = slow.join().expect("slow client");
    assert!(
        slow.is_some_and(|t| t < Duration::from_secs(2)),
        "the slow request's connection was not closed at close: {slow:?}"
    );
}

#[test]
fn a_client_that_does_not_finish_its_request_head_is_disconnected() {
    let (_dir, mut app) = app("timeouts", &[("riffle.http.header.read.timeout.ms", "300")]);
    app.start().expect("start");
    let addr = app.metrics_addr().expect("listens");

    let connected = Instant::now();
    let mut half = TcpStream::connect(addr).expect("connect");
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .expect("half a request");
    let mut silent = TcpStream::connect(addr).expect("connect");
    // Counted from when they connected.
    let half_closed = closed_within(&mut half, Duration::from_secs(5)).map(|_| connected.elapsed());
    let silent_closed =
        closed_within(&mut silent, Duration::from_secs(5)).map(|_| connected.elapsed());
    println!(
        "header timeout 300 ms: half a request closed after {half_closed:?}, nothing sent {silent_closed:?}"
    );
    for (what, closed) in [("half a request", half_closed), ("nothing", silent_closed)] {
        let closed = closed.unwrap_or_else(|| panic!("a client that sent {what} still connected"));
        assert!(
            closed >= Duration::from_millis(200) && closed < Duration::from_secs(3),
            "a client that sent {what} closed after {closed:?}"
        );
    }

    // A head finished within the bound, though slowly, is answered.
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    slow.write_all(b"GET /hello/slowly HTTP/1.1\r\n")
        .expect("first half");
    std::thread::sleep(Duration::from_millis(100));
    slow.write_all(b"Host: x\r\n\r\n").expect("second half");
    assert_eq!(
        read_response(&mut slow, true),
        (200, "hello /hello/slowly".to_owned())
    );
    app.close().expect("close");
}

#[test]
fn a_kept_alive_connection_gets_an_answer_per_request_then_closes_when_idle() {
    let (_dir, mut app) = app(
        "keep-alive",
        &[("riffle.http.header.read.timeout.ms", "500")],
    );
    app.start().expect("start");
    let addr = app.metrics_addr().expect("listens");
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    for i in 0..3 {
        write!(stream, "GET /hello/{i} HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
        assert_eq!(
            read_response(&mut stream, true),
            (200, format!("hello /hello/{i}"))
        );
        // Each answer restarts the bound: 300 ms between requests keeps the connection.
        std::thread::sleep(Duration::from_millis(300));
    }
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    let (status, body) = read_response(&mut stream, true);
    assert_eq!(status, 200);
    assert!(body.contains("# TYPE kafka_streams_"), "{body}");
    // Two pipelined requests, two answers in order.
    stream
        .write_all(
            b"GET /hello/p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /hello/p2 HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .expect("pipelined");
    assert_eq!(read_response(&mut stream, true).1, "hello /hello/p1");
    assert_eq!(read_response(&mut stream, true).1, "hello /hello/p2");
    let closed = closed_within(&mut stream, Duration::from_secs(5));
    println!("an idle kept-alive connection closed after {closed:?} (bound 500 ms)");
    assert!(
        closed.is_some_and(|t| t >= Duration::from_millis(400) && t < Duration::from_secs(3)),
        "an idle kept-alive connection: {closed:?}"
    );
    app.close().expect("close");
}

#[test]
fn routes_are_checked_added_before_start_and_served_on_every_listener() {
    let (_dir, mut app) = app("routes", &[]);
    assert!(
        app.add_http_route("/metrics", |_: &HttpRequest| HttpResponse::text(200, ""))
            .is_err(),
        "/metrics is the metrics' route"
    );
    assert!(
        app.add_http_route("hello", |_: &HttpRequest| HttpResponse::text(200, ""))
            .is_err()
    );
    assert!(
        app.add_http_route("/hello/", |_: &HttpRequest| HttpResponse::text(200, ""))
            .is_err(),
        "taken"
    );
    app.add_http_route("/panics", |_: &HttpRequest| -> HttpResponse {
        panic!("a handler's bug")
    })
    .expect("route");
    app.add_http_route("/redirect", |_: &HttpRequest| {
        HttpResponse::text(307, "elsewhere\n")
            .with_header("Location", "http://127.0.0.1:1/x")
            .with_header("X-Bad", "line\r\nbreak")
    })
    .expect("route");
    let extra = TcpListener::bind("127.0.0.1:0").expect("bind");
    let extra_addr = extra.local_addr().expect("addr");
    app.add_http_listener(extra).expect("listener");
    app.start().expect("start");
    let addr = app.metrics_addr().expect("listens");
    assert_eq!(app.http_addrs(), vec![addr, extra_addr]);
    for at in [addr, extra_addr] {
        assert_eq!(request(at, "GET", "/metrics").0, 200);
        assert_eq!(request(at, "HEAD", "/metrics").0, 200);
        assert_eq!(request(at, "GET", "/hello/x").1, "hello /hello/x");
        assert_eq!(request(at, "POST", "/metrics").0, 405);
        let (status, body) = request(at, "GET", "/nothing");
        assert_eq!(status, 404);
        assert!(
            body.contains("/hello/, /metrics, /panics, /redirect, /slow"),
            "{body}"
        );
        assert_eq!(request(at, "GET", "/panics").0, 500, "a panic is a 500");
    }
    // A header the handler sets reaches the client under its usual spelling; one that cannot
    // be sent is left out.
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .write_all(b"GET /redirect HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    assert!(
        response.starts_with("HTTP/1.1 307 Temporary Redirect\r\n"),
        "{response}"
    );
    assert!(
        response.contains("\r\nLocation: http://127.0.0.1:1/x\r\n"),
        "{response}"
    );
    assert!(!response.contains("X-Bad"), "{response}");
    assert!(
        app.add_http_route("/late", |_: &HttpRequest| HttpResponse::text(200, ""))
            .is_err(),
        "after start"
    );
    app.close().expect("close");
    for at in [addr, extra_addr] {
        assert!(TcpStream::connect(at).is_err(), "stopped with the app");
    }

    // Routes with nowhere to serve them are an error at start.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path().join("log"), LogOptions::default()).expect("log");
    common::produce(&log, "in", 1, &[("k".to_owned(), "v".to_owned())]);
    let mut config = StreamsConfig::new("nowhere");
    config.state_dir = dir.path().join("state");
    let mut app = StreamsApp::new(
        common::persistent_count_topology(),
        config,
        EmbeddedBackend::new(log).shared(),
    )
    .expect("app");
    app.add_http_route("/x", |_: &HttpRequest| HttpResponse::text(200, ""))
        .expect("route");
    let err = app.start().expect_err("nowhere to listen").to_string();
    assert!(err.contains("listens nowhere"), "{err}");
}
