//! The exact certificate pin: a server whose certificate is byte-for-byte one of the certificates
//! the user trusts ([`TlsOptions::ca_file`](super::TlsOptions::ca_file), or else the file
//! `SSL_CERT_FILE` names) is accepted even when
//! that certificate is a CA certificate (`CA:TRUE`) serving as its own, which is what
//! `openssl req -x509` makes and what rustls's chain check refuses (`CaUsedAsEndEntity`).
//!
//! The `redis` crate builds its TLS configuration itself, with no way to verify a certificate
//! otherwise, so a pinned connection goes through a relay of this store's own: `redis` connects to
//! a Unix socket in a directory only this user can enter, and each connection accepted there is
//! relayed, byte for byte, over a TLS connection to the server that this module makes with the
//! pinning verifier. Everything above it (reconnects, timeouts, `WAIT`, pub/sub) is the `redis`
//! crate's as on any connection; a connection the server or the relay ends is ended on the
//! other side too.
//!
//! The pin is no weaker than the CA check: the certificate must be exactly one the user named, be
//! within its validity period and name the host of the URL; the handshake's signature is checked
//! against its key as on any connection. A certificate that is not pinned is verified against the
//! trusted certificates as usual.
//!
//! The relay costs one local hop each way (a copy through a Unix socket), which is why it is
//! used only after an ordinary connection was refused with `CaUsedAsEndEntity`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_name};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio_rustls::TlsConnector;

use super::tls::TlsOptions;
use crate::error::{Error, ErrorKind, Result};

/// True when a connection refused with `message` may be retried through a pin: the server's
/// certificate is a CA certificate, and the user named certificates to trust.
pub(crate) fn applies(tls: &TlsOptions, message: &str) -> bool {
    message.contains("CaUsedAsEndEntity") && trusted(tls).is_some()
}

/// The certificates the user named as trusted (PEM): the CA file of the options, or else the file
/// `SSL_CERT_FILE` names (which the system trust store is then read from).
fn trusted(tls: &TlsOptions) -> Option<Vec<u8>> {
    match tls.ca() {
        Some(pem) => Some(pem.to_vec()),
        None => std::fs::read(std::env::var_os("SSL_CERT_FILE")?).ok(),
    }
}

/// A client for the server of `info` through a pinned relay, and the relay (which stops when it
/// is dropped). One TLS handshake is made first, so that a certificate the pin refuses is
/// reported here, as a connection error naming the server, rather than as connections the relay
/// ends.
pub(crate) async fn pinned_client(
    info: &redis::ConnectionInfo,
    tls: &TlsOptions,
    url: &str,
    connect_timeout: Duration,
) -> Result<(redis::Client, Relay)> {
    let redis::ConnectionAddr::TcpTls { host, port, .. } = info.addr() else {
        return Err(Error::invalid(format!("{url} is not a TLS address")));
    };
    let upstream = Upstream::new(host, *port, tls, connect_timeout)?;
    upstream.connect().await.map_err(|e| {
        Error::new(
            ErrorKind::Connection,
            format!(
                "cannot connect to {url}: {e} (the server presents a CA certificate (CA:TRUE) as \
                 its own; it is accepted when it is byte-for-byte one of the certificates you \
                 trust, valid now and naming the host you connect to)"
            ),
        )
    })?;
    let relay = Relay::start(upstream).map_err(|e| {
        Error::new(
            ErrorKind::Connection,
            format!("cannot start the relay: {e}"),
        )
    })?;
    let client = redis::Client::open(
        info.clone()
            .set_addr(redis::ConnectionAddr::Unix(relay.socket.clone())),
    )
    .map_err(|e| Error::invalid(format!("cannot make a client for {url}: {e}")))?;
    Ok((client, relay))
}

/// Where and how the relay connects: the server's address and name, and the TLS configuration
/// with the pinning verifier.
#[derive(Clone)]
struct Upstream {
    host: String,
    port: u16,
    name: ServerName<'static>,
    connector: TlsConnector,
    timeout: Duration,
}

impl Upstream {
    fn new(host: &str, port: u16, tls: &TlsOptions, timeout: Duration) -> Result<Self> {
        super::tls::install_provider();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(bare.to_owned())
            .map_err(|e| Error::invalid(format!("{host} is not a server name: {e}")))?;
        let pem = trusted(tls).unwrap_or_default();
        let pins = CertificateDer::pem_slice_iter(&pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::invalid(format!("the CA file: {e}")))?;
        let verifier = Arc::new(ExactPin::new(pins)?);
        let builder = ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match tls.client() {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::invalid(format!("the client certificate: {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| Error::invalid(format!("the client key: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::invalid(format!("the client certificate: {e}")))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Upstream {
            host: bare.to_owned(),
            port,
            name,
            connector: TlsConnector::from(Arc::new(config)),
            timeout,
        })
    }

    /// One TLS connection to the server, within the connection timeout.
    async fn connect(&self) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let attempt = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
            tcp.set_nodelay(true)?;
            self.connector.connect(self.name.clone(), tcp).await
        };
        tokio::time::timeout(self.timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the TLS connection timed out",
                ))
            })
    }
}

/// The relay: a Unix socket in a private directory, and the task accepting on it. Dropping it
/// stops accepting and removes the directory; relayed connections end when their ends close.
pub(crate) struct Relay {
    dir: PathBuf,
    socket: PathBuf,
    accept: tokio::task::AbortHandle,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("socket", &self.socket)
            .finish()
    }
}

impl Relay {
    fn start(upstream: Upstream) -> std::io::Result<Relay> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!(
            "tairlock-pin-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        // Only this user may connect: the relay lends the connection (and any client
        // certificate) to whoever reaches its socket.
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let socket = dir.join("s");
        let listener = match UnixListener::bind(&socket) {
            Ok(listener) => listener,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let accept = tokio::spawn(async move {
            loop {
                let Ok((local, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                tokio::spawn(relay(local, upstream.clone()));
            }
        })
        .abort_handle();
        Ok(Relay {
            dir,
            socket,
            accept,
        })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Relay one accepted connection; a refused or failed TLS connection ends the local one, which
/// the `redis` crate sees as a connection error (and reconnects from).
async fn relay(mut local: UnixStream, upstream: Upstream) {
    match upstream.connect().await {
        Ok(mut remote) => {
            let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
        }
        Err(_e) => {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                target: "tairlock",
                error = %_e,
                "tairlock: the pinned TLS connection to {}:{} failed",
                upstream.host,
                upstream.port
            );
        }
    }
}

/// Accept a server certificate byte-for-byte equal to a pinned one (valid now, naming the
/// server); verify any other against the pinned certificates as CAs.
#[derive(Debug)]
struct ExactPin {
    pins: Vec<CertificateDer<'static>>,
    chain: Arc<WebPkiServerVerifier>,
    provider: Arc<CryptoProvider>,
}

impl ExactPin {
    fn new(pins: Vec<CertificateDer<'static>>) -> Result<Self> {
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let mut roots = RootCertStore::empty();
        // A certificate webpki cannot take as a trust anchor can still be pinned exactly.
        let (_added, _ignored) = roots.add_parsable_certificates(pins.iter().cloned());
        let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| Error::invalid(format!("the CA file: {e}")))?;
        Ok(ExactPin {
            pins,
            chain,
            provider,
        })
    }
}

impl ServerCertVerifier for ExactPin {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        if !self.pins.iter().any(|p| p.as_ref() == end_entity.as_ref()) {
            return self.chain.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            );
        }
        let (not_before, not_after) = validity(end_entity).ok_or_else(|| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        let now = now.as_secs();
        if now < not_before {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidYet,
            ));
        }
        if now > not_after {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired,
            ));
        }
        verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The validity period of an X.509 certificate (DER), as Unix seconds: `notBefore, notAfter`.
fn validity(der: &[u8]) -> Option<(u64, u64)> {
    let (cert, _) = tlv(der, 0x30)?;
    let (mut tbs, _) = tlv(cert, 0x30)?;
    if tbs.first() == Some(&0xa0) {
        tbs = tlv(tbs, 0xa0)?.1; // [0] version
    }
    let rest = tlv(tbs, 0x02)?.1; // serialNumber
    let rest = tlv(rest, 0x30)?.1; // signature
    let rest = tlv(rest, 0x30)?.1; // issuer
    let (validity, _) = tlv(rest, 0x30)?;
    let (not_before, rest) = time(validity)?;
    let (not_after, _) = time(rest)?;
    Some((not_before, not_after))
}

/// The contents of the DER element at the start of `input` if its tag is `tag`, and what follows.
fn tlv(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&t, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (t == tag && rest.len() >= len).then(|| (&rest[..len], &rest[len..]))
}

/// A DER `UTCTime` or `GeneralizedTime` (`...Z`) as Unix seconds, and what follows it.
fn time(input: &[u8]) -> Option<(u64, &[u8])> {
    let (digits, rest, year) = match input.first()? {
        0x17 => {
            let (t, rest) = tlv(input, 0x17)?;
            let yy = number(t.get(..2)?)?;
            (
                t.get(2..)?,
                rest,
                if yy < 50 { 2000 + yy } else { 1900 + yy },
            )
        }
        0x18 => {
            let (t, rest) = tlv(input, 0x18)?;
            (t.get(4..)?, rest, number(t.get(..4)?)?)
        }
        _ => return None,
    };
    if digits.len() != 11 || digits[10] != b'Z' {
        return None;
    }
    let field = |i: usize| number(&digits[i..i + 2]);
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    Some((days * 86_400 + hour * 3_600 + minute * 60 + second, rest))
}

fn number(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's algorithm);
/// `None` before 1970.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

    use super::{ExactPin, days_from_civil, time, tlv, validity};

    /// `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500
    /// -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost -addext
    /// basicConstraints=critical,CA:TRUE`: valid from 2026-11-27 18:58:08 (a `UTCTime`) to
    /// 2126-11-03 18:58:08 (a `GeneralizedTime`).
    const SELF_SIGNED: &str = "\
-----BEGIN CERTIFICATE-----
MIIBmzCCAUGgAwIBAgIUU8s+G472Llv6/ooe9RKNNi/fWDYwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEyNzE4NTgwOFoYDzIxMjYxMTAz
MTg1ODA4WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAATe4rm9Z5EgVGkpv/XZ/uVwVwL1N1KUwh80XElXvxtromjfX23oiKkn
/9/tJc0QeIsuPteZlTfxu75ZodDDXAdwo28wbTAdBgNVHQ4EFgQU7AZelCI+2Cp4
gsEui63BnV06H5cwHwYDVR0jBBgwFoAU7AZelCI+2Cp4gsEui63BnV06H5cwGgYD
VR0RBBMwEYcEfwAAAYIJbG9jYWxob3N0MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDSAAwRQIhAJSJqcDvqCzEvJfj8bpIqtFuPAtyS7d6mIKPzf80YPEsAiBm
HD9K8v1WLdg3aryfYrbu2nhY+1oM3ITmjDqwJQNS+w==
-----END CERTIFICATE-----";
    const NOT_BEFORE: u64 = 1_795_805_888;
    const NOT_AFTER: u64 = 4_949_405_888;

    fn verify(name: &str, at: u64) -> Result<(), rustls::Error> {
        crate::store::tls::install_provider();
        let cert = CertificateDer::from_pem_slice(SELF_SIGNED.as_bytes()).unwrap();
        let pin = ExactPin::new(vec![cert.clone()]).unwrap();
        let name = ServerName::try_from(name.to_owned()).unwrap();
        let now = UnixTime::since_unix_epoch(Duration::from_secs(at));
        pin.verify_server_cert(&cert, &[], &name, &[], now)
            .map(drop)
    }

    #[test]
    fn the_validity_period_is_read_from_the_certificate() {
        let cert = CertificateDer::from_pem_slice(SELF_SIGNED.as_bytes()).unwrap();
        assert_eq!(validity(&cert), Some((NOT_BEFORE, NOT_AFTER)));
        assert_eq!(validity(&cert[..cert.len() / 2]), None);
    }

    #[test]
    fn a_pinned_ca_certificate_is_accepted_for_its_names_while_valid() {
        assert_eq!(verify("127.0.0.1", NOT_BEFORE + 60), Ok(()));
        assert_eq!(verify("localhost", NOT_AFTER), Ok(()));
        assert!(
            matches!(
                verify("127.0.0.1", NOT_AFTER + 1),
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::Expired
                ))
            ),
            "an expired pin was accepted"
        );
        assert!(
            matches!(
                verify("127.0.0.1", NOT_BEFORE - 1),
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidYet
                ))
            ),
            "a pin not valid yet was accepted"
        );
        assert!(
            verify("redis.example.com", NOT_BEFORE + 60).is_err(),
            "a pin was accepted for a name it does not carry"
        );
    }

    #[test]
    fn civil_dates_count_days_from_the_epoch() {
        assert_eq!(days_from_civil(1970, 1, 1), Some(0));
        assert_eq!(days_from_civil(2000, 3, 1), Some(11_017));
        assert_eq!(days_from_civil(2026, 11, 27), Some(20_784));
        assert_eq!(days_from_civil(1969, 12, 31), None);
    }

    #[test]
    fn both_time_encodings_read_as_unix_seconds() {
        let utc = [b"\x17\x0d".as_slice(), b"261127120000Z"].concat();
        assert_eq!(time(&utc).map(|t| t.0), Some(20_784 * 86_400 + 12 * 3_600));
        let general = [b"\x18\x0f".as_slice(), b"20261127120000Z"].concat();
        assert_eq!(
            time(&general).map(|t| t.0),
            Some(20_784 * 86_400 + 12 * 3_600)
        );
        let year_1999 = [b"\x17\x0d".as_slice(), b"990101000000Z"].concat();
        assert_eq!(time(&year_1999).map(|t| t.0), Some(10_592 * 86_400));
        let local_time = [b"\x17\x0d".as_slice(), b"2611271200001"].concat();
        assert_eq!(time(&local_time), None);
    }

    #[test]
    fn a_length_past_the_input_is_refused() {
        assert_eq!(tlv(b"\x30\x05abc", 0x30), None);
        assert_eq!(
            tlv(b"\x30\x81\x03abcd", 0x30),
            Some((&b"abc"[..], &b"d"[..]))
        );
        assert_eq!(tlv(b"\x31\x01a", 0x30), None);
    }
}
