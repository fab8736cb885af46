//! [`Error`]: what can go wrong when a store is opened.

/// An Upstash store could not be opened: its configuration is missing or
/// invalid.
///
/// Only [`UpstashStore::open`](crate::UpstashStore::open) and
/// [`from_env`](crate::UpstashStore::from_env) return it; failed store calls
/// are [`StoreError`](tollgate_core::StoreError)s. No message includes the
/// token or the URL (a mistyped URL may hold the token).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable is not set (or is empty).
    #[error("{0} is not set")]
    MissingVar(&'static str),
    /// An environment variable is set but is not valid Unicode.
    #[error("{0} is not valid Unicode")]
    InvalidVar(&'static str),
    /// The URL cannot be read as an Upstash REST URL.
    #[error("invalid Upstash REST URL: {0}")]
    InvalidUrl(&'static str),
    /// The URL's scheme is not `https`, `http` or their `upstash+` forms.
    #[error("unsupported Upstash REST URL scheme `{0}`: expected https:// or http://")]
    UnsupportedScheme(String),
    /// An `https://` URL was given to a build without the `tls` feature.
    #[error("https:// needs the `tls` feature of tollgate-redis")]
    TlsNotEnabled,
    /// An `http://` URL to a host that is not loopback, without the opt-in
    /// for a trusted network: the token would cross the network in clear
    /// text. Use `https://`, or opt in with `?plain-http=trusted-network`
    /// or [`PlainHttp::TrustedNetwork`](super::PlainHttp::TrustedNetwork).
    #[error(
        "the token would travel in clear text to {address}: use https://, or, on a private \
         network trusted with the token, opt in with ?plain-http=trusted-network \
         (plain http is otherwise only for a loopback host: 127.0.0.0/8, ::1 or localhost)"
    )]
    PlainHttp {
        /// The endpoint's `host:port` (never its token).
        address: String,
    },
    /// The token is empty or holds characters an HTTP header cannot carry.
    #[error("invalid Upstash REST token: {0}")]
    InvalidToken(&'static str),
    /// The HTTP client could not be built (its TLS configuration failed).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}
