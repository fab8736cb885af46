//! [`Error`]: what can go wrong when a store is opened.

/// A Redis store could not be opened: its URL is invalid.
///
/// Only [`RedisStore::open`](crate::RedisStore::open) and
/// [`RedisClusterStore::open`](crate::RedisClusterStore::open) return it;
/// failed store calls are [`StoreError`](tollgate_core::StoreError)s. No
/// message includes the URL, which may hold a password.
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
}
