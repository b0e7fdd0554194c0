//! One blocking TCP connection to one broker: frames requests, matches responses by
//! correlation id. Typed requests go through `kafka-protocol`'s codecs; the streams-group
//! messages are sent as raw bodies with a request header v2.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteRecordsRequest, DeleteRecordsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, EndTxnRequest, EndTxnResponse, FetchRequest, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    ProduceRequest, ProduceResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::error::{Error, Result};
use crate::security::{Connector, Transport};

/// Responses larger than this are refused before allocating for them.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// A request `kafka-protocol` can encode, with its API key and response type. (The crate's own
/// `Request` trait needs its `broker` feature, which doubles its build for nothing riffle uses.)
pub(crate) trait KafkaRequest: Encodable + HeaderVersion {
    const KEY: i16;
    type Response: Decodable + HeaderVersion;
}

macro_rules! requests {
    ($($req:ty => $resp:ty, $key:literal;)*) => {
        $(impl KafkaRequest for $req {
            const KEY: i16 = $key;
            type Response = $resp;
        })*
    };
}

requests! {
    ProduceRequest => ProduceResponse, 0;
    FetchRequest => FetchResponse, 1;
    ListOffsetsRequest => ListOffsetsResponse, 2;
    DeleteRecordsRequest => DeleteRecordsResponse, 21;
    MetadataRequest => MetadataResponse, 3;
    OffsetCommitRequest => OffsetCommitResponse, 8;
    OffsetFetchRequest => OffsetFetchResponse, 9;
    FindCoordinatorRequest => FindCoordinatorResponse, 10;
    ApiVersionsRequest => ApiVersionsResponse, 18;
    CreateTopicsRequest => CreateTopicsResponse, 19;
    DeleteTopicsRequest => DeleteTopicsResponse, 20;
    InitProducerIdRequest => InitProducerIdResponse, 22;
    AddPartitionsToTxnRequest => AddPartitionsToTxnResponse, 24;
    AddOffsetsToTxnRequest => AddOffsetsToTxnResponse, 25;
    EndTxnRequest => EndTxnResponse, 26;
    TxnOffsetCommitRequest => TxnOffsetCommitResponse, 28;
    SaslHandshakeRequest => SaslHandshakeResponse, 17;
    SaslAuthenticateRequest => SaslAuthenticateResponse, 36;
}

/// A connection to one broker. Not shared: callers put it behind a mutex.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: Transport,
    broker: String,
    correlation_id: i32,
    buf: Vec<u8>,
}

impl Connection {
    /// Connects to `broker` (`host:port`): TCP, then TLS and SASL as `connector` says.
    pub(crate) fn connect(
        broker: &str,
        connector: &Connector,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Connection> {
        let io = |what: &str| {
            let what = what.to_owned();
            let broker = broker.to_owned();
            move |source| Error::Io {
                broker,
                what,
                source,
            }
        };
        let addr = broker
            .to_socket_addrs()
            .map_err(io("resolving the address"))?
            .next()
            .ok_or_else(|| Error::Io {
                broker: broker.to_owned(),
                what: "resolving the address".into(),
                source: std::io::Error::other("no address"),
            })?;
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(io("connecting"))?;
        stream
            .set_nodelay(true)
            .map_err(io("setting TCP_NODELAY"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(io("setting the read timeout"))?;
        stream
            .set_write_timeout(Some(Duration::from_secs(60)))
            .map_err(io("setting the write timeout"))?;
        let mut conn = Connection {
            stream: connector.wrap(broker, stream)?,
            broker: broker.to_owned(),
            correlation_id: 0,
            buf: Vec::new(),
        };
        connector.authenticate(&mut conn, client_id)?;
        Ok(conn)
    }

    /// The broker's `host:port`.
    pub(crate) fn broker(&self) -> &str {
        &self.broker
    }

    fn io(&self, what: &str) -> impl FnOnce(std::io::Error) -> Error {
        let broker = self.broker.clone();
        let what = what.to_owned();
        move |source| Error::Io {
            broker,
            what,
            source,
        }
    }

    fn next_correlation_id(&mut self) -> i32 {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        self.correlation_id
    }

    /// Writes the frame in `self.buf` (size prefix reserved) and reads the response frame.
    fn round_trip(&mut self, api: &'static str) -> Result<Bytes> {
        let size = (self.buf.len() - 4) as i32;
        self.buf[..4].copy_from_slice(&size.to_be_bytes());
        let what = format!("sending {api}");
        self.stream.write_all(&self.buf).map_err(self.io(&what))?;
        let mut len = [0u8; 4];
        let what = format!("reading the {api} response");
        self.stream.read_exact(&mut len).map_err(self.io(&what))?;
        // A TLS record (handshake 0x16 or alert 0x15, version 3.x) where a frame length should
        // be: a TLS listener spoken to in plain Kafka.
        let tls = matches!(len, [0x15 | 0x16, 3, _, _]);
        let len = i32::from_be_bytes(len);
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| (4..=MAX_RESPONSE_BYTES).contains(&l))
            .ok_or_else(|| Error::Decode {
                api,
                reason: if tls {
                    format!(
                        "{} answered with TLS: it is an SSL or SASL_SSL listener (set security.protocol)",
                        self.broker
                    )
                } else {
                    format!("response frame of {len} bytes from {}", self.broker)
                },
            })?;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).map_err(self.io(&what))?;
        Ok(Bytes::from(body))
    }

    fn check_correlation(&self, api: &'static str, got: i32) -> Result<()> {
        if got != self.correlation_id {
            return Err(Error::Decode {
                api,
                reason: format!(
                    "correlation id {got} from {}, expected {}",
                    self.broker, self.correlation_id
                ),
            });
        }
        Ok(())
    }

    /// Sends a typed request at `version` and decodes its response.
    pub(crate) fn send<R: KafkaRequest>(
        &mut self,
        api: &'static str,
        client_id: &str,
        request: &R,
        version: i16,
    ) -> Result<R::Response> {
        let correlation_id = self.next_correlation_id();
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_string(client_id.to_owned()));
        let encode_err = |e: String| Error::Decode {
            api,
            reason: format!("encoding v{version}: {e}"),
        };
        self.buf.clear();
        self.buf.extend_from_slice(&[0; 4]);
        header
            .encode(&mut self.buf, R::header_version(version))
            .map_err(|e| encode_err(e.to_string()))?;
        request
            .encode(&mut self.buf, version)
            .map_err(|e| encode_err(e.to_string()))?;
        let mut body = self.round_trip(api)?;
        let decode_err = |e: String| Error::Decode {
            api,
            reason: format!("decoding the v{version} response: {e}"),
        };
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| decode_err(e.to_string()))?;
        self.check_correlation(api, header.correlation_id)?;
        R::Response::decode(&mut body, version).map_err(|e| decode_err(e.to_string()))
    }

    /// Sends a raw flexible request body (request header v2) and returns the response body
    /// (after the response header v1).
    pub(crate) fn send_raw(
        &mut self,
        api: &'static str,
        client_id: &str,
        api_key: i16,
        version: i16,
        body: &[u8],
    ) -> Result<Bytes> {
        let correlation_id = self.next_correlation_id();
        self.buf.clear();
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.extend_from_slice(&api_key.to_be_bytes());
        self.buf.extend_from_slice(&version.to_be_bytes());
        self.buf.extend_from_slice(&correlation_id.to_be_bytes());
        let id = client_id.as_bytes();
        let id = id
            .get(..id.len().min(i16::MAX as usize))
            .unwrap_or_default();
        self.buf.extend_from_slice(&(id.len() as i16).to_be_bytes());
        self.buf.extend_from_slice(id);
        self.buf.push(0); // header tagged fields
        self.buf.extend_from_slice(body);
        let response = self.round_trip(api)?;
        let mut r = crate::wire::Reader::new(&response, api);
        let got = r.i32("CorrelationId")?;
        self.check_correlation(api, got)?;
        r.tags("response header tags")?;
        let consumed = response.len() - r.remaining();
        Ok(response.slice(consumed..))
    }
}
