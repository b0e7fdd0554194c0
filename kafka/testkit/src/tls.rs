//! The certificates of a secure test broker, made in the test with `rcgen`: a CA, the broker's
//! certificate for 127.0.0.1 and `localhost` signed by it, a client certificate signed by it,
//! and a second CA that signed nothing the broker shows (for the untrusted-certificate case).

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::broker::{Error, Result};

fn rcgen_err(what: &str) -> impl FnOnce(rcgen::Error) -> Error {
    let what = what.to_owned();
    move |e| Error::Io {
        what: format!("making {what} with rcgen"),
        source: std::io::Error::other(e.to_string()),
    }
}

fn ca(name: &str) -> Result<(String, Issuer<'static, KeyPair>)> {
    let key = KeyPair::generate().map_err(rcgen_err("a CA key"))?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err("a CA"))?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).map_err(rcgen_err("a CA"))?;
    Ok((cert.pem(), Issuer::new(params, key)))
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    name: &str,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> Result<(String, String)> {
    let key = KeyPair::generate().map_err(rcgen_err("a key"))?;
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
            .map_err(rcgen_err("a certificate"))?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![usage];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = params
        .signed_by(&key, issuer)
        .map_err(rcgen_err("a certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

/// Writes into `dir`: `ca.pem`; `server.pem` (the broker's certificate, then its key, as
/// Kafka's PEM key store reads them); `client.pem` and `client-key.pem`; `other-ca.pem`.
pub(crate) fn write_certificates(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        what: format!("creating {}", dir.display()),
        source,
    })?;
    let (ca_pem, issuer) = ca("riffle test CA")?;
    let (server_cert, server_key) = leaf(
        &issuer,
        "riffle test broker",
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (client_cert, client_key) = leaf(
        &issuer,
        "riffle test client",
        &["riffle-client"],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    let (other_ca, _) = ca("a CA the broker does not use")?;
    write(&dir.join("ca.pem"), &ca_pem)?;
    write(
        &dir.join("server.pem"),
        &format!("{server_key}{server_cert}"),
    )?;
    write(&dir.join("client.pem"), &client_cert)?;
    write(&dir.join("client-key.pem"), &client_key)?;
    write(&dir.join("other-ca.pem"), &other_ca)?;
    Ok(())
}
