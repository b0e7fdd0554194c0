//! `riffle sample group-by-key-count --serve ADDR`: `GET /counts/<key>` from the running
//! application's store, as a route of the instance's one HTTP server (the runtime's, which
//! also answers `/metrics`). The server listens at ADDR, and at `--metrics-addr` too when that
//! names another address; every address answers both routes.

use std::net::{SocketAddr, TcpListener};

use anyhow::Context;
use riffle::http::{HttpRequest, HttpResponse};
use riffle::query::{HostInfo, MetadataHandle, ReadOnlyKeyValueStore};
use riffle::{SerdeRef, StreamsApp, StreamsConfig};

/// `--serve ADDR`: listens at `addr` before the application exists, so that the address it
/// got (port 0 picks one) becomes the application's `application_server`. A `--metrics-addr`
/// naming the same address is left to this listener (the server answers `/metrics` on it).
pub(crate) fn bind_serve(addr: &str, config: &mut StreamsConfig) -> anyhow::Result<TcpListener> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("--serve {addr}: cannot listen"))?;
    let bound = listener.local_addr()?;
    if bound.ip().is_unspecified() {
        anyhow::bail!(
            "--serve {addr}: other instances cannot reach {}; name the address they reach this one at",
            bound.ip()
        );
    }
    config.application_server = Some(bound.to_string());
    let same = config
        .metrics_http_addr
        .as_deref()
        .and_then(|m| m.parse::<SocketAddr>().ok())
        .is_some_and(|m| m.port() != 0 && m == bound);
    if same {
        config.metrics_http_addr = None;
        println!("metrics at http://{bound}/metrics");
    }
    Ok(listener)
}

/// What a key keeps unencoded in a `/counts/<key>` URL: RFC 3986's unreserved characters.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `--serve`: has `app`'s HTTP server listen on `listener` (from [`bind_serve`]) and answer
/// `GET /counts/<key>` (the key percent-decoded, as UTF-8) from `app`'s store `counts` (an
/// interactive query over every local task) when this instance runs the key's task; else with
/// a redirect (307) to the instance that does, as the group names it; 503 while no instance
/// is known to have it (a rebalance) or the store migrates.
pub(crate) fn serve_counts(app: &mut StreamsApp, listener: TcpListener) -> anyhow::Result<()> {
    let counts = Counts {
        store: app.store(riffle::query::StoreQueryParameters::from_name_and_type(
            "counts",
            riffle::query::QueryableStoreTypes::key_value::<String, i64>(),
        ))?,
        metadata: app.metadata_handle(),
        serde: riffle::Serdes::string(),
        me: listener.local_addr()?.to_string().parse()?,
    };
    let bound = listener.local_addr()?;
    app.add_http_listener(listener)?;
    app.add_http_route("/counts/", move |request| counts.answer(request))?;
    println!("serving counts at http://{bound}/counts/<key>");
    Ok(())
}

/// What answers `/counts/<key>`.
struct Counts {
    store: ReadOnlyKeyValueStore<String, i64>,
    metadata: MetadataHandle,
    serde: SerdeRef<String>,
    /// This instance, as the group names it.
    me: HostInfo,
}

impl Counts {
    fn answer(&self, request: &HttpRequest) -> HttpResponse {
        let Some(raw) = request.path().strip_prefix("/counts/") else {
            return HttpResponse::text(404, "GET /counts/<key>\n");
        };
        if !request.is_read() {
            return HttpResponse::text(405, "GET /counts/<key>\n")
                .with_header("Allow", "GET, HEAD");
        }
        let Ok(key) = percent_encoding::percent_decode_str(raw).decode_utf8() else {
            return HttpResponse::text(400, "the key is not UTF-8 once percent-decoded\n");
        };
        // A request another instance sent here is answered here, never sent on.
        let redirected = request
            .query()
            .is_some_and(|q| q.split('&').any(|q| q == "redirected"));
        let meta =
            match self
                .metadata
                .query_metadata_for_key("counts", &key.to_string(), &self.serde)
            {
                Ok(meta) => meta,
                Err(e) => return HttpResponse::text(503, format!("{e}\n")),
            };
        match meta.active_host {
            Some(host) if host != self.me && !redirected => {
                let encoded = percent_encoding::utf8_percent_encode(&key, PATH_SEGMENT);
                let url = format!("http://{host}/counts/{encoded}?redirected");
                let body = format!(
                    "{key} is counted by the instance at {host} (partition {}): {url}\n",
                    meta.partition
                );
                // The URL is ASCII (the key percent-encoded), so the header can be sent.
                HttpResponse::text(307, body).with_header("Location", url)
            }
            _ => match self.store.get(&key.to_string()) {
                Ok(Some(count)) => HttpResponse::text(200, format!("{count}\n")),
                Ok(None) if meta.active_host.is_none() => HttpResponse::text(
                    503,
                    format!(
                        "no instance is known to run partition {} of {key} now (rebalancing?)\n",
                        meta.partition
                    ),
                ),
                Ok(None) => HttpResponse::text(404, format!("no count for {key}\n")),
                Err(e) => HttpResponse::text(503, format!("{e}\n")),
            },
        }
    }
}
