//! TLS and SASL, configured as Kafka's clients are (`security.protocol`, `sasl.mechanism`,
//! `sasl.username`/`sasl.password` or `sasl.jaas.config`, PEM trust and key files), and done
//! when a connection opens: the TLS handshake ([`rustls`], the server verified against the CA
//! file, a client certificate if one is configured), then SaslHandshake and SaslAuthenticate
//! with PLAIN or SCRAM-SHA-256/512 (RFC 5802, as Kafka's `ScramSaslClient`). A failure is an
//! error naming the broker and what failed, never a hang: rustls refuses an untrusted
//! certificate during the handshake, the broker answers wrong credentials with
//! SASL_AUTHENTICATION_FAILED, and every read has a timeout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sha2::{Digest, Sha256, Sha512};

use crate::conn::Connection;
use crate::error::{Error, ErrorCode, Result};

/// Kafka's `security.protocol`: how riffle talks to the brokers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// Neither TLS nor authentication.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL authentication without TLS.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(Error::Config(format!(
                "security.protocol {s:?}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            ))),
        }
    }
}

/// Kafka's `sasl.mechanism`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN`: the username and password in the clear (use it over TLS).
    #[default]
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl SaslMechanism {
    fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl std::str::FromStr for SaslMechanism {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            _ => Err(Error::Config(format!(
                "sasl.mechanism {s:?}: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
            ))),
        }
    }
}

/// The security settings of a [`crate::KafkaConfig`]. `Debug` leaves the password out.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Security {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    /// `sasl.mechanism`.
    pub sasl_mechanism: SaslMechanism,
    /// `sasl.username` (or the `username` of `sasl.jaas.config`).
    pub sasl_username: Option<String>,
    /// `sasl.password` (or the `password` of `sasl.jaas.config`).
    pub sasl_password: Option<String>,
    /// The CA certificates (PEM) the brokers' certificates must chain to: `ssl.ca.location`,
    /// or `ssl.truststore.location` with `ssl.truststore.type=PEM`.
    pub ssl_ca_location: Option<PathBuf>,
    /// A client certificate chain (PEM), for brokers that ask for one: `ssl.certificate.location`.
    pub ssl_certificate_location: Option<PathBuf>,
    /// The client certificate's private key (PEM, PKCS#8, PKCS#1 or SEC1): `ssl.key.location`.
    pub ssl_key_location: Option<PathBuf>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("protocol", &self.protocol)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field(
                "sasl_password",
                &self.sasl_password.as_ref().map(|_| "<redacted>"),
            )
            .field("ssl_ca_location", &self.ssl_ca_location)
            .field("ssl_certificate_location", &self.ssl_certificate_location)
            .field("ssl_key_location", &self.ssl_key_location)
            .finish()
    }
}

impl Security {
    /// Sets one Kafka client property of security; `Ok(false)` if `name` is not one.
    pub(crate) fn set(&mut self, name: &str, value: &str) -> Result<bool> {
        match name {
            "security.protocol" => self.protocol = value.parse()?,
            "sasl.mechanism" => self.sasl_mechanism = value.parse()?,
            "sasl.username" => self.sasl_username = Some(value.to_owned()),
            "sasl.password" => self.sasl_password = Some(value.to_owned()),
            "sasl.jaas.config" => {
                let (username, password) = parse_jaas(value)?;
                self.sasl_username = Some(username);
                self.sasl_password = Some(password);
            }
            "ssl.ca.location" | "ssl.truststore.location" => {
                self.ssl_ca_location = Some(PathBuf::from(value));
            }
            "ssl.truststore.type" | "ssl.keystore.type" => {
                if !value.eq_ignore_ascii_case("PEM") {
                    return Err(Error::Config(format!(
                        "{name} {value:?}: riffle reads PEM files only"
                    )));
                }
            }
            "ssl.certificate.location" => {
                self.ssl_certificate_location = Some(PathBuf::from(value));
            }
            "ssl.key.location" => self.ssl_key_location = Some(PathBuf::from(value)),
            "ssl.endpoint.identification.algorithm" => {
                if !value.eq_ignore_ascii_case("https") {
                    return Err(Error::Config(format!(
                        "{name} {value:?}: riffle always checks the broker's host name (https)"
                    )));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// What connections need, built once: the TLS configuration (files read and checked now)
    /// and the SASL credentials.
    pub(crate) fn connector(&self) -> Result<Connector> {
        let tls = if self.protocol.tls() {
            Some(Arc::new(self.tls_config()?))
        } else {
            None
        };
        let sasl = if self.protocol.sasl() {
            let missing = |what: &str| {
                Error::Config(format!(
                    "security.protocol {:?} needs {what} (or sasl.jaas.config)",
                    self.protocol
                ))
            };
            Some(SaslCredentials {
                mechanism: self.sasl_mechanism,
                username: self
                    .sasl_username
                    .clone()
                    .ok_or_else(|| missing("sasl.username"))?,
                password: self
                    .sasl_password
                    .clone()
                    .ok_or_else(|| missing("sasl.password"))?,
            })
        } else {
            None
        };
        Ok(Connector { tls, sasl })
    }

    fn tls_config(&self) -> Result<rustls::ClientConfig> {
        let ca = self.ssl_ca_location.as_deref().ok_or_else(|| {
            Error::Config(format!(
                "security.protocol {:?} needs ssl.ca.location: the CA certificates (PEM) to trust the brokers by",
                self.protocol
            ))
        })?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in read_certs(ca, "ssl.ca.location")? {
            roots.add(cert).map_err(|e| {
                Error::Config(format!(
                    "ssl.ca.location {}: not a usable CA certificate: {e}",
                    ca.display()
                ))
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        match (&self.ssl_certificate_location, &self.ssl_key_location) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "ssl.certificate.location")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    Error::Config(format!(
                        "ssl.key.location {}: no private key read: {e}",
                        key.display()
                    ))
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::Config(format!(
                        "ssl.certificate.location {} with ssl.key.location: {e}",
                        cert.display()
                    ))
                })
            }
            (None, None) => Ok(builder.with_no_client_auth()),
            _ => Err(Error::Config(
                "ssl.certificate.location and ssl.key.location go together".into(),
            )),
        }
    }
}

fn read_certs(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::Config(format!("{setting} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "{setting} {}: no certificate in the file",
            path.display()
        )));
    }
    Ok(certs)
}

/// The `username` and `password` options of a JAAS line for Kafka's PLAIN or SCRAM login
/// module: `org.apache.kafka.common.security.plain.PlainLoginModule required username="u"
/// password="p";`.
fn parse_jaas(jaas: &str) -> Result<(String, String)> {
    let err = |why: &str| Error::Config(format!("sasl.jaas.config: {why}"));
    let body = jaas.trim().trim_end_matches(';');
    let mut words = body.split_whitespace();
    let module = words.next().ok_or_else(|| err("empty"))?;
    if !module.ends_with("LoginModule") {
        return Err(err(&format!("{module:?} is not a login module")));
    }
    let rest = body[module.len()..].trim_start();
    let rest = rest
        .strip_prefix("required")
        .or_else(|| rest.strip_prefix("requisite"))
        .or_else(|| rest.strip_prefix("sufficient"))
        .or_else(|| rest.strip_prefix("optional"))
        .ok_or_else(|| err("a control flag (required) must follow the module"))?;
    let (mut username, mut password) = (None, None);
    let mut rest = rest.trim_start();
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| err(&format!("expected key=\"value\" at {rest:?}")))?;
        let after = after.trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted
                    .find('"')
                    .ok_or_else(|| err(&format!("unterminated value of {}", key.trim())))?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => after.split_at(after.find(char::is_whitespace).unwrap_or(after.len())),
        };
        match key.trim() {
            "username" => username = Some(value.to_owned()),
            "password" => password = Some(value.to_owned()),
            _ => {}
        }
        rest = tail.trim_start();
    }
    Ok((
        username.ok_or_else(|| err("no username"))?,
        password.ok_or_else(|| err("no password"))?,
    ))
}

#[derive(Clone)]
struct SaslCredentials {
    mechanism: SaslMechanism,
    username: String,
    password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// What opening a connection takes beyond TCP: TLS, SASL, or neither.
#[derive(Clone, Debug, Default)]
pub(crate) struct Connector {
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<SaslCredentials>,
}

/// A connection's byte stream: plain TCP or TLS over it.
#[derive(Debug)]
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(s) => s.flush(),
        }
    }
}

impl Connector {
    /// Wraps a fresh TCP connection to `broker` (`host:port`) in TLS if configured, with the
    /// handshake done (so an untrusted certificate fails here, by name).
    pub(crate) fn wrap(&self, broker: &str, tcp: TcpStream) -> Result<Transport> {
        let Some(config) = &self.tls else {
            return Ok(Transport::Plain(tcp));
        };
        let host = broker
            .rsplit_once(':')
            .map_or(broker, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            Error::Config(format!(
                "broker {broker}: {host:?} is not a TLS server name: {e}"
            ))
        })?;
        let conn = rustls::ClientConnection::new(config.clone(), name)
            .map_err(|e| Error::Config(format!("TLS to {broker}: {e}")))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|source| Error::Io {
                    broker: broker.to_owned(),
                    what: "the TLS handshake".into(),
                    source,
                })?;
        }
        Ok(Transport::Tls(Box::new(stream)))
    }

    /// Authenticates `conn` with SASL if configured.
    pub(crate) fn authenticate(&self, conn: &mut Connection, client_id: &str) -> Result<()> {
        let Some(sasl) = &self.sasl else {
            return Ok(());
        };
        let mechanism = sasl.mechanism.name();
        let mut handshake = SaslHandshakeRequest::default();
        handshake.mechanism = StrBytes::from_static_str(mechanism);
        let response = conn.send("SaslHandshake", client_id, &handshake, 1)?;
        if response.error_code != 0 {
            let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(Error::Broker {
                api: "SaslHandshake",
                context: format!(
                    "{mechanism} with {} (the broker enables {enabled:?})",
                    conn.broker()
                ),
                code: ErrorCode(response.error_code),
                message: None,
            });
        }
        match sasl.mechanism {
            SaslMechanism::Plain => {
                let mut token = Vec::new();
                token.push(0);
                token.extend_from_slice(sasl.username.as_bytes());
                token.push(0);
                token.extend_from_slice(sasl.password.as_bytes());
                authenticate_round(conn, client_id, &sasl.username, mechanism, token)?;
            }
            SaslMechanism::ScramSha256 => scram(conn, client_id, sasl, ScramHash::Sha256)?,
            SaslMechanism::ScramSha512 => scram(conn, client_id, sasl, ScramHash::Sha512)?,
        }
        Ok(())
    }
}

/// One SaslAuthenticate exchange; the server's bytes.
fn authenticate_round(
    conn: &mut Connection,
    client_id: &str,
    username: &str,
    mechanism: &str,
    token: Vec<u8>,
) -> Result<Vec<u8>> {
    let mut request = SaslAuthenticateRequest::default();
    request.auth_bytes = token.into();
    let response = conn.send("SaslAuthenticate", client_id, &request, 2)?;
    if response.error_code != 0 {
        return Err(Error::Broker {
            api: "SaslAuthenticate",
            context: format!("{mechanism} as {username:?} with {}", conn.broker()),
            code: ErrorCode(response.error_code),
            message: response.error_message.as_ref().map(|m| m.to_string()),
        });
    }
    Ok(response.auth_bytes.to_vec())
}

/// The hash of a SCRAM mechanism.
#[derive(Clone, Copy)]
enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            // HMAC takes keys of any length.
            match <M as hmac::digest::KeyInit>::new_from_slice(key) {
                Ok(mut m) => {
                    m.update(data);
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        }
        match self {
            ScramHash::Sha256 => mac::<Hmac<Sha256>>(key, data),
            ScramHash::Sha512 => mac::<Hmac<Sha512>>(key, data),
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// Hi(password, salt, i) of RFC 5802: PBKDF2 with this hash's HMAC.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// The client's proof for `auth_message` and the server signature to expect, both base64
/// (RFC 5802, section 3).
fn scram_proof(
    hash: ScramHash,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
    auth_message: &str,
) -> (String, String) {
    let salted = hash.salted_password(password, salt, iterations);
    let client_key = hash.hmac(&salted, b"Client Key");
    let stored_key = hash.digest(&client_key);
    let signature = hash.hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let server_key = hash.hmac(&salted, b"Server Key");
    let server_signature = hash.hmac(&server_key, auth_message.as_bytes());
    (BASE64.encode(proof), BASE64.encode(server_signature))
}

/// SCRAM (RFC 5802) with `hash`, as Kafka's `ScramSaslClient`: no channel binding, the
/// username escaped, the server's signature checked.
fn scram(
    conn: &mut Connection,
    client_id: &str,
    sasl: &SaslCredentials,
    hash: ScramHash,
) -> Result<()> {
    let mechanism = sasl.mechanism.name();
    let broker = conn.broker().to_owned();
    let fail = |why: String| Error::Broker {
        api: "SaslAuthenticate",
        context: format!("{mechanism} as {:?} with {broker}", sasl.username),
        code: ErrorCode(58),
        message: Some(why),
    };
    let nonce: String = {
        use rand::Rng;
        let bytes: [u8; 24] = rand::rng().random();
        BASE64.encode(bytes)
    };
    let user = sasl.username.replace('=', "=3D").replace(',', "=2C");
    let client_first_bare = format!("n={user},r={nonce}");
    let server_first = authenticate_round(
        conn,
        client_id,
        &sasl.username,
        mechanism,
        format!("n,,{client_first_bare}").into_bytes(),
    )?;
    let server_first = String::from_utf8(server_first)
        .map_err(|_| fail("the server's first message is not UTF-8".into()))?;
    let field = |name: &str| {
        server_first
            .split(',')
            .find_map(|f| f.strip_prefix(name))
            .map(str::to_owned)
    };
    let server_nonce = field("r=").ok_or_else(|| fail(format!("no nonce in {server_first:?}")))?;
    if !server_nonce.starts_with(&nonce) {
        return Err(fail("the server's nonce does not extend riffle's".into()));
    }
    let salt = field("s=")
        .and_then(|s| BASE64.decode(s).ok())
        .ok_or_else(|| fail(format!("no salt in {server_first:?}")))?;
    let iterations: u32 = field("i=")
        .and_then(|i| i.parse().ok())
        .filter(|&i| i > 0)
        .ok_or_else(|| fail(format!("no iteration count in {server_first:?}")))?;
    let client_final_bare = format!("c=biws,r={server_nonce}");
    let auth_message = format!("{client_first_bare},{server_first},{client_final_bare}");
    let (proof, expected) = scram_proof(
        hash,
        sasl.password.as_bytes(),
        &salt,
        iterations,
        &auth_message,
    );
    let server_final = authenticate_round(
        conn,
        client_id,
        &sasl.username,
        mechanism,
        format!("{client_final_bare},p={proof}").into_bytes(),
    )?;
    let server_final = String::from_utf8_lossy(&server_final).into_owned();
    if let Some(error) = server_final.strip_prefix("e=") {
        return Err(fail(error.to_owned()));
    }
    match server_final.strip_prefix("v=") {
        Some(v) if v == expected => Ok(()),
        _ => Err(fail(
            "the server's signature is wrong: it does not know the password".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn scram_sha_256_matches_rfc_7677s_example() {
        let client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final_bare = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let salt = BASE64
            .decode("W22ZaJ0SNY7soEsUEjb6gQ==")
            .unwrap_or_default();
        let auth = format!("{client_first_bare},{server_first},{client_final_bare}");
        let (proof, server) = scram_proof(ScramHash::Sha256, b"pencil", &salt, 4096, &auth);
        assert_eq!(proof, "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        assert_eq!(server, "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn jaas_lines_give_their_credentials() {
        let line = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="a b=c";"#;
        assert_eq!(
            parse_jaas(line).ok(),
            Some(("alice".to_owned(), "a b=c".to_owned()))
        );
        let scram = "org.apache.kafka.common.security.scram.ScramLoginModule required\n  password=pw username=bob";
        assert_eq!(
            parse_jaas(scram).ok(),
            Some(("bob".to_owned(), "pw".to_owned()))
        );
        for bad in [
            "",
            "username=\"x\" password=\"y\"",
            "x.PlainLoginModule username=\"a\" password=\"b\";",
            "x.PlainLoginModule required username=\"a;",
            "x.PlainLoginModule required username=\"a\";",
        ] {
            assert!(parse_jaas(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn security_settings_are_read_kafka_style_and_checked() {
        let mut s = Security::default();
        assert!(s.set("security.protocol", "sasl_ssl").unwrap_or(false));
        assert!(s.set("sasl.mechanism", "SCRAM-SHA-512").unwrap_or(false));
        assert_eq!(s.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(s.sasl_mechanism, SaslMechanism::ScramSha512);
        assert!(s.set("security.protocol", "TLS").is_err());
        assert!(s.set("ssl.truststore.type", "JKS").is_err());
        assert!(matches!(s.set("linger.ms", "5"), Ok(false)));
        s.sasl_password = Some("secret".into());
        assert!(!format!("{s:?}").contains("secret"));
        // SASL without credentials, TLS without a CA: clear errors before any connection.
        let err = s.connector().map(drop).unwrap_err().to_string();
        assert!(err.contains("ssl.ca.location"), "{err}");
        s.protocol = SecurityProtocol::SaslPlaintext;
        let err = s.connector().map(drop).unwrap_err().to_string();
        assert!(err.contains("sasl.username"), "{err}");
    }
}
