//! TLS to the server by `sslmode`, as libpq reads it: the rustls
//! configuration of each mode (which certificates are checked, against which
//! roots), and the pool's connector, which under `prefer` falls back to a
//! plain connection when TLS itself fails or the server refuses the login
//! for its encryption, never after a refused password.
//!
//! The crypto provider is ring, named in each configuration rather than
//! taken from (or installed as) the process default, so that an application
//! building another provider too (aws-lc-rs) neither panics nor changes.

use std::cell::RefCell;
use std::fmt;
use std::fs;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use deadpool_postgres::Connect;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::{Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;

/// `sslmode`: whether a connection is encrypted and what of the server's
/// certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Plain.
    Disable,
    /// TLS when the server offers it, plain when it does not, when the
    /// TLS handshake fails, or when the server refuses the login over TLS
    /// for its encryption (see [`worth_plain`]); the certificate is not
    /// checked (unless `sslrootcert` names a file: then its chain is).
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
/// once more in plain when the TLS attempt failed in a way plain may mend
/// ([`worth_plain`]). When that retry fails too, the TLS attempt's error is
/// noted for the caller taking the connection ([`noting_tls_failure`]).
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
                Err(tls) if self.mode == Mode::Prefer && worth_plain(&tls, &tried) => {
                    tracing::debug!(
                        error = %Causes(&tls),
                        "TLS failed under sslmode=prefer; trying plain"
                    );
                    let mut plain = config;
                    plain.ssl_mode(SslMode::Disable);
                    match plain.connect(self.track(&tried)).await {
                        Ok(connected) => connected,
                        Err(err) => {
                            note_tls_failure(tls);
                            return Err(err);
                        }
                    }
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
/// A TLS handshake succeeded (and the server's first message over it, if
/// any came, was not an error).
const TLS_UP: u8 = 2;
/// A TLS handshake succeeded and the server's first message over it was an
/// error: it refused the login before asking for any credential.
const TLS_REFUSED_AT_ONCE: u8 = 3;

/// Whether a failed `prefer` attempt is tried again in plain: when TLS
/// itself failed (the handshake: the certificate, the protocol), or when
/// the server, over TLS, refused the connection for its encryption:
/// SQLSTATE 28000 `invalid_authorization_specification` as its first
/// answer, before any authentication exchange, which is pg_hba's refusal
/// (`no pg_hba.conf entry …, SSL encryption`, or a `hostssl … reject`
/// line).
///
/// Never after any other server error: a refused password (28P01
/// `invalid_password`) tried again in plain would send it again, in clear
/// when the server asks for it by `password`, and hide the real cause
/// behind the plain attempt's answer. Nor after a 28000 that follows the
/// authentication (a role that may not log in, or does not exist): the
/// password, if asked, has been sent already. libpq retries in plain after
/// any server error; this connector does not.
fn worth_plain(err: &tokio_postgres::Error, tried: &AtomicU8) -> bool {
    match tried.load(Ordering::Acquire) {
        TLS_FAILED => true,
        TLS_REFUSED_AT_ONCE => err.code() == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
        _ => false,
    }
}

tokio::task_local! {
    /// The TLS attempt's error of a `prefer` connection whose plain retry
    /// failed too, for the caller taking a connection from the pool (the
    /// pool's error type is the driver's, which cannot carry it).
    static TLS_FAILURE: RefCell<Option<tokio_postgres::Error>>;
}

/// Runs `taking` (taking a connection from the pool, which opens new ones
/// in the same task) and returns its output with the TLS attempt's error
/// noted by the [`Connector`] when a `prefer` connection failed over TLS
/// and then in plain: the plain attempt's error is the pool's.
pub(crate) async fn noting_tls_failure<F: Future>(
    taking: F,
) -> (F::Output, Option<tokio_postgres::Error>) {
    TLS_FAILURE
        .scope(RefCell::new(None), async {
            let output = taking.await;
            (output, TLS_FAILURE.with(|noted| noted.borrow_mut().take()))
        })
        .await
}

/// Notes `tls` for [`noting_tls_failure`]; outside it, only logs it.
fn note_tls_failure(tls: tokio_postgres::Error) {
    let shown = Causes(&tls).to_string();
    if TLS_FAILURE
        .try_with(|noted| *noted.borrow_mut() = Some(tls))
        .is_err()
    {
        tracing::debug!(error = %shown, "under sslmode=prefer, TLS failed, then plain");
    }
}

/// A `prefer` connection that failed over TLS, then in plain. Its message
/// is the TLS attempt's cause; its source, the plain attempt's error (the
/// server's last answer). Neither holds the password: the driver's errors
/// never do.
#[derive(Debug)]
pub(crate) struct TlsThenPlain {
    tls: tokio_postgres::Error,
    plain: tokio_postgres::Error,
}

impl TlsThenPlain {
    pub(crate) fn new(tls: tokio_postgres::Error, plain: tokio_postgres::Error) -> TlsThenPlain {
        TlsThenPlain { tls, plain }
    }
}

impl fmt::Display for TlsThenPlain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sslmode=prefer: the TLS attempt failed ({}), and so did the plain retry",
            Causes(&self.tls)
        )
    }
}

impl std::error::Error for TlsThenPlain {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.plain)
    }
}

/// An error and its sources, `: ` between them (the driver's own message
/// is only its kind, "db error", "error performing TLS handshake").
struct Causes<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(next) = source {
            write!(f, ": {next}")?;
            source = next.source();
        }
        Ok(())
    }
}

/// A TLS connector that records how its handshake went, and whether the
/// server's first message after it was an error ([`Observed`]).
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
    type Stream = Observed<T::Stream>;
    type TlsConnect = Tracked<T::TlsConnect>;
    type Error = T::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        // A new attempt (the driver asks once per address it reached): what
        // an earlier one's handshake did says nothing of this one.
        self.tried.store(NO_TLS, Ordering::Release);
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
    type Stream = Observed<T::Stream>;
    type Error = T::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, T::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let tried = self.tried;
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            let result = handshake.await;
            let outcome = if result.is_ok() { TLS_UP } else { TLS_FAILED };
            tried.store(outcome, Ordering::Release);
            result.map(|inner| Observed {
                inner,
                tried,
                first_read: false,
            })
        })
    }
}

/// A TLS stream that notes (as [`TLS_REFUSED_AT_ONCE`]) when the first
/// message the server sends over it is an error (`E`): the server refused
/// the login before any authentication request (`R`).
struct Observed<T> {
    inner: T,
    tried: Arc<AtomicU8>,
    first_read: bool,
}

impl<T: AsyncRead + Unpin> AsyncRead for Observed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if !this.first_read && buf.filled().len() > before {
            this.first_read = true;
            if buf.filled()[before] == b'E' {
                this.tried.store(TLS_REFUSED_AT_ONCE, Ordering::Release);
            }
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Observed<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: TlsStream + Unpin> TlsStream for Observed<T> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
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
        // libpq's `allow` is a mode this store does not have: said so.
        let allow = Mode::parse("allow").unwrap_err();
        assert!(
            allow.contains("sslmode=allow") && allow.contains("not supported"),
            "{allow}"
        );
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

    /// What [`Observed`] notes when the server's first bytes are `first`.
    async fn noted_after(first: &[u8]) -> u8 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (client, mut server) = tokio::io::duplex(64);
        let tried = Arc::new(AtomicU8::new(TLS_UP));
        let mut observed = Observed {
            inner: client,
            tried: Arc::clone(&tried),
            first_read: false,
        };
        server.write_all(first).await.unwrap();
        let mut buf = [0u8; 1];
        observed.read_exact(&mut buf).await.unwrap();
        // Later messages change nothing.
        server.write_all(b"E").await.unwrap();
        observed.read_exact(&mut buf).await.unwrap();
        tried.load(Ordering::Acquire)
    }

    #[tokio::test]
    async fn only_an_error_as_the_first_message_is_a_refusal_at_once() {
        // ErrorResponse first: pg_hba refused before any authentication.
        assert_eq!(noted_after(b"E").await, TLS_REFUSED_AT_ONCE);
        // An authentication request first: the login went on.
        assert_eq!(noted_after(b"R").await, TLS_UP);
    }

    #[test]
    fn unchecked_modes_read_no_roots() {
        let missing = Roots::File(PathBuf::from("/nonexistent/ca.pem"));
        assert!(client_config(Mode::Disable, Some(&missing)).is_ok());
        assert!(client_config(Mode::Require, None).is_ok());
        assert!(client_config(Mode::Require, Some(&missing)).is_err());
    }
}
