//! TLS settings for `rediss://` connections (the `tls` feature).
//!
//! A `rediss://host:port` URL connects over TLS (rustls, with the `ring` crypto provider) and
//! verifies the server's certificate against the system's trust store, or against the CA given
//! here ([`TlsOptions::ca_file`]); [`TlsOptions::client_auth_files`] adds a client certificate for
//! servers that require one (`tls-auth-clients yes`). The URL's fragment `#insecure`
//! (`rediss://host:port/#insecure`) accepts any certificate: for test servers only.
//!
//! A plain `redis://` URL never speaks TLS, whatever these options say: giving TLS options with
//! one is an [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) error rather than a
//! silently unencrypted connection.

use std::fmt;
use std::path::Path;

use super::url::{is_tls_url, redact};
use crate::error::{Error, Result};

/// The CA and client certificate of TLS connections. The default trusts the system's store and
/// presents no client certificate.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key is a secret; the certificates are just long.
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.as_ref().map(|_| "<pem>"))
            .field("client", &self.client.as_ref().map(|_| "<pem>"))
            .finish()
    }
}

impl TlsOptions {
    /// Trust exactly the CA certificates of this PEM file instead of the system's store.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the file cannot be read
    /// or holds no PEM certificate.
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<Self> {
        let pem = read(path.as_ref(), "CA certificate")?;
        self.ca_pem(pem)
    }

    /// Trust exactly the CA certificates of this PEM text instead of the system's store.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it holds no PEM
    /// certificate.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Result<Self> {
        let pem = pem.into();
        if !contains(&pem, b"-----BEGIN CERTIFICATE-----") {
            return Err(Error::invalid("the CA file holds no PEM certificate"));
        }
        self.ca = Some(pem);
        Ok(self)
    }

    /// Present this client certificate (PEM, the chain) and key (PEM) to the server, for mutual
    /// TLS.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a file cannot be read,
    /// the certificate file holds no PEM certificate or the key file no PEM private key.
    pub fn client_auth_files(self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self> {
        let cert = read(cert.as_ref(), "client certificate")?;
        let key = read(key.as_ref(), "client key")?;
        self.client_auth_pem(cert, key)
    }

    /// [`client_auth_files`](Self::client_auth_files) from PEM text.
    ///
    /// # Errors
    ///
    /// As [`client_auth_files`](Self::client_auth_files).
    pub fn client_auth_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Result<Self> {
        let (cert, key) = (cert.into(), key.into());
        if !contains(&cert, b"-----BEGIN CERTIFICATE-----") {
            return Err(Error::invalid(
                "the client certificate file holds no PEM certificate",
            ));
        }
        if !contains(&key, b"PRIVATE KEY-----") {
            return Err(Error::invalid(
                "the client key file holds no PEM private key",
            ));
        }
        self.client = Some((cert, key));
        Ok(self)
    }

    /// True when nothing was set: the system's trust store, no client certificate.
    pub fn is_default(&self) -> bool {
        self.ca.is_none() && self.client.is_none()
    }

    /// The trusted certificates (PEM), when given.
    #[cfg_attr(not(all(feature = "tls", unix)), allow(dead_code))]
    pub(crate) fn ca(&self) -> Option<&[u8]> {
        self.ca.as_deref()
    }

    /// The client certificate chain and key (PEM), when given.
    #[cfg_attr(not(all(feature = "tls", unix)), allow(dead_code))]
    pub(crate) fn client(&self) -> Option<(&[u8], &[u8])> {
        self.client
            .as_ref()
            .map(|(c, k)| (c.as_slice(), k.as_slice()))
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::invalid(format!("cannot read the {what} {}: {e}", path.display())))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a TLS refusal in `message` means and what to do about it, for the rustls errors whose
/// own names do not say it.
pub(crate) fn refusal_hint(message: &str) -> Option<&'static str> {
    // `openssl req -x509` makes a certificate with `CA:TRUE`, and servers are often given it
    // both as their certificate and as the CA clients should trust. OpenSSL (`redis-cli
    // --cacert`) accepts that; rustls's chain check refuses any CA certificate as a server's
    // own. tairlock accepts it when it is exactly one of the certificates given as trusted (the
    // pin of `store::pin`), so this refusal means none was given, or the platform has no pin.
    message.contains("CaUsedAsEndEntity").then_some(
        " (the server presents a CA certificate (CA:TRUE) as its own; tairlock accepts one that \
         is byte-for-byte a certificate given as trusted (`--tls-ca`, `TlsOptions::ca_file` or \
         SSL_CERT_FILE, on Unix), or give the server a certificate signed by a CA, e.g. \
         `openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
         -extfile san.ext -out server.crt`, and trust the CA)",
    )
}

/// A `redis` client for `url` with these TLS settings.
pub(crate) fn client(url: &str, tls: &TlsOptions) -> Result<redis::Client> {
    let redacted = redact(url);
    if is_tls_url(url) {
        return tls_client(url, tls, &redacted);
    }
    if !tls.is_default() {
        return Err(Error::invalid(format!(
            "TLS options were given, but {redacted} is not a rediss:// URL"
        )));
    }
    redis::Client::open(url).map_err(|e| Error::invalid(format!("bad redis url {redacted}: {e}")))
}

#[cfg(feature = "tls")]
fn tls_client(url: &str, tls: &TlsOptions, redacted: &str) -> Result<redis::Client> {
    install_provider();
    let bad = |e: redis::RedisError| Error::invalid(format!("bad redis url {redacted}: {e}"));
    if tls.is_default() {
        return redis::Client::open(url).map_err(bad);
    }
    redis::Client::build_with_tls(url, certificates(tls)).map_err(bad)
}

#[cfg(not(feature = "tls"))]
fn tls_client(_url: &str, _tls: &TlsOptions, redacted: &str) -> Result<redis::Client> {
    Err(Error::invalid(format!(
        "{redacted} asks for TLS, but tairlock was built without its `tls` feature"
    )))
}

/// The `redis` crate's form of these settings.
#[cfg(feature = "tls")]
pub(crate) fn certificates(tls: &TlsOptions) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.ca.clone(),
    }
}

/// rustls needs a process-wide crypto provider; install ring's unless the application already
/// chose one (then that one is used).
#[cfg(feature = "tls")]
pub(crate) fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err only when another thread installed one meanwhile: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
