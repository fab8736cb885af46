//! [`Error`]: what can go wrong when a store is opened.

/// A Redis store could not be opened: its URL or options are invalid.
///
/// Only [`RedisStore::open`](crate::RedisStore::open) and
/// [`open_with`](crate::RedisStore::open_with) return it; failed store calls
/// are [`StoreError`](tollgate_core::StoreError)s. No message includes the
/// URL, which may hold a password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL cannot be read as a Redis URL.
    #[error("invalid redis url: {0}")]
    InvalidUrl(String),
    /// The URL's scheme is not one this build supports.
    #[error("unsupported redis url scheme `{0}`: expected redis:// or rediss://")]
    UnsupportedScheme(String),
    /// A `rediss://` URL was given to a build without the `tls` feature.
    #[error("rediss:// needs the `tls` feature of tollgate-redis")]
    TlsNotEnabled,
    /// An option is out of range.
    #[error("invalid option `{name}`: {reason}")]
    InvalidOption {
        /// The option's name.
        name: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}
