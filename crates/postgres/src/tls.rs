//! TLS to the server by `sslmode`, as libpq reads it: the rustls
//! configuration of each mode (which certificates are checked, against which
//! roots), and the pool's connector, which under `prefer` falls back to a
//! plain connection when TLS fails.
//!
//! The crypto provider is ring, named in each configuration rather than
//! taken from (or installed as) the process default, so that an application
//! building another provider too (aws-lc-rs) neither panics nor changes.

use std::fs;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use deadpool_postgres::Connect;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;

/// `sslmode`: whether a connection is encrypted and what of the server's
/// certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Plain.
    Disable,
    /// TLS when the server offers it, plain when it does not or when TLS
    /// fails; the certificate is not checked (unless `sslrootcert` names a
    /// file: then its chain is).
    Prefer,
    /// TLS or nothing; the certificate is not checked (unless `sslrootcert`
    /// names a file: then its chain is, as libpq does).
    Require,
    /// TLS, the certificate's chain checked against the roots; not its name.
    VerifyCa,
    /// TLS, the chain checked and the certificate valid for the host name.
    VerifyFull,
}

impl Mode {
    /// Reads an `sslmode` value (case matters, as in libpq).
    pub(crate) fn parse(value: &str) -> Result<Mode, String> {
        Ok(match value {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow (plain first, TLS only if plain is refused) is \
                            not supported: use prefer, require, verify-ca or verify-full"
                        .into(),
                );
            }
            _ => {
                return Err(
                    "sslmode must be disable, prefer, require, verify-ca or verify-full".into(),
                );
            }
        })
    }

    /// The value as written in a URL.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// The driver's mode: it knows whether to ask for TLS, not what to check.
    pub(crate) fn driver(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// Where the certificates that a checking mode trusts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Roots {
    /// The system's (`sslrootcert=system`, or no `sslrootcert`).
    System,
    /// A PEM file of one or more CA certificates (`sslrootcert=PATH`).
    File(PathBuf),
}

/// The rustls configuration for `mode`: `roots` are read (the file, or the
/// system's store) only when the mode checks certificates. The error is
/// for the user: what is wrong with the roots.
pub(crate) fn client_config(mode: Mode, roots: Option<&Roots>) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS cannot be set up: {e}"))?;
    let chain_roots = match (mode, roots) {
        (Mode::VerifyCa | Mode::VerifyFull, roots) => {
            Some(load_roots(roots.unwrap_or(&Roots::System))?)
        }
        // libpq: a root file makes require (and prefer) check the chain.
        (Mode::Prefer | Mode::Require, Some(file @ Roots::File(_))) => Some(load_roots(file)?),
        _ => None,
    };
    let mut config = match (mode, chain_roots) {
        (Mode::VerifyFull, Some(roots)) => {
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        (_, roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly {
                roots: roots.map(Arc::new),
                algorithms,
            }))
            .with_no_client_auth(),
    };
    // Postgres 17's direct negotiation (`sslnegotiation=direct`) needs it;
    // older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

/// The certificates of `roots`, at least one.
fn load_roots(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            let shown = path.display();
            let pem = fs::read(path).map_err(|e| format!("sslrootcert={shown}: {e}"))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("sslrootcert={shown}: not PEM: {e}"))?;
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert={shown}: {e}"))?;
            }
            if store.is_empty() {
                return Err(format!(
                    "sslrootcert={shown}: the file holds no PEM certificate"
                ));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err("no root certificates found on this system to check the \
                            server's certificate against: install them (ca-certificates) \
                            or name the server's CA with sslrootcert=/path/ca.pem"
                    .into());
            }
        }
    }
    Ok(store)
}

/// Checks the server's certificate chain against `roots` but not its name
/// (`verify-ca`), or nothing of the certificate when there are no roots
/// (`require`, `prefer`). The handshake's signatures are always checked: the
/// server holds the key of the certificate it shows.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<Arc<RootCertStore>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Opens the pool's connections: with TLS as the mode says; under `prefer`,
/// once more in plain when the TLS attempt failed (its handshake, or the
/// server refusing the login over TLS), as libpq does.
pub(crate) struct Connector {
    tls: MakeRustlsConnect,
    mode: Mode,
}

impl Connector {
    /// A connector for `mode` with `config` (from [`client_config`]).
    pub(crate) fn new(mode: Mode, config: ClientConfig) -> Connector {
        Connector {
            tls: MakeRustlsConnect::new(config),
            mode,
        }
    }
}

impl Connect for Connector {
    fn connect(
        &self,
        config: &Config,
    ) -> Pin<
        Box<
            dyn Future<Output = Result<(Client, JoinHandle<()>), tokio_postgres::Error>>
                + Send
                + '_,
        >,
    > {
        let config = config.clone();
        Box::pin(async move {
            let tried = Arc::new(AtomicU8::new(NO_TLS));
            let first = config.connect(self.track(&tried)).await;
            let (client, connection) = match first {
                Err(err) if self.mode == Mode::Prefer && worth_plain(&err, &tried) => {
                    tracing::debug!(error = %err, "TLS failed under sslmode=prefer; trying plain");
                    let mut plain = config;
                    plain.ssl_mode(SslMode::Disable);
                    plain.connect(self.track(&tried)).await?
                }
                other => other?,
            };
            let task = tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::warn!(target: "tollgate_postgres", error = %err, "connection error");
                }
            });
            Ok((client, task))
        })
    }
}

impl Connector {
    fn track(&self, tried: &Arc<AtomicU8>) -> Tracked<MakeRustlsConnect> {
        Tracked {
            inner: self.tls.clone(),
            tried: Arc::clone(tried),
        }
    }
}

/// No TLS handshake was attempted (the server said it has no TLS, or none was asked).
const NO_TLS: u8 = 0;
/// A TLS handshake failed.
const TLS_FAILED: u8 = 1;
/// A TLS handshake succeeded.
const TLS_UP: u8 = 2;

/// Whether a failed `prefer` attempt is tried again in plain: its TLS
/// handshake failed, or it was over TLS and the server refused it.
fn worth_plain(err: &tokio_postgres::Error, tried: &AtomicU8) -> bool {
    match tried.load(Ordering::Acquire) {
        TLS_FAILED => true,
        TLS_UP => err.as_db_error().is_some(),
        _ => false,
    }
}

/// A TLS connector that records how its handshake went.
#[derive(Clone)]
struct Tracked<T> {
    inner: T,
    tried: Arc<AtomicU8>,
}

impl<S, T> MakeTlsConnect<S> for Tracked<T>
where
    T: MakeTlsConnect<S>,
    <T::TlsConnect as TlsConnect<S>>::Future: Send + 'static,
{
    type Stream = T::Stream;
    type TlsConnect = Tracked<T::TlsConnect>;
    type Error = T::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        Ok(Tracked {
            inner: self.inner.make_tls_connect(domain)?,
            tried: Arc::clone(&self.tried),
        })
    }
}

impl<S, T> TlsConnect<S> for Tracked<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
{
    type Stream = T::Stream;
    type Error = T::Error;
    type Future = Pin<Box<dyn Future<Output = Result<T::Stream, T::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let tried = self.tried;
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            let result = handshake.await;
            let outcome = if result.is_ok() { TLS_UP } else { TLS_FAILED };
            tried.store(outcome, Ordering::Release);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn each_mode_reads_back_and_others_are_refused() {
        for mode in [
            Mode::Disable,
            Mode::Prefer,
            Mode::Require,
            Mode::VerifyCa,
            Mode::VerifyFull,
        ] {
            assert_eq!(Mode::parse(mode.as_str()), Ok(mode));
        }
        for bad in ["allow", "Require", "verify_full", "", "on"] {
            assert!(Mode::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_missing_or_empty_root_file_is_a_clear_error() {
        let missing = Roots::File(PathBuf::from("/nonexistent/tollgate/ca.pem"));
        let err = client_config(Mode::VerifyFull, Some(&missing)).unwrap_err();
        assert!(
            err.contains("sslrootcert=/nonexistent/tollgate/ca.pem"),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("tollgate-tls-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        fs::write(&empty, "not a certificate\n").unwrap();
        let err = client_config(Mode::VerifyCa, Some(&Roots::File(empty))).unwrap_err();
        assert!(err.contains("holds no PEM certificate"), "{err}");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn unchecked_modes_read_no_roots() {
        let missing = Roots::File(PathBuf::from("/nonexistent/ca.pem"));
        assert!(client_config(Mode::Disable, Some(&missing)).is_ok());
        assert!(client_config(Mode::Require, None).is_ok());
        assert!(client_config(Mode::Require, Some(&missing)).is_err());
    }
}
