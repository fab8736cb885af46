//! [`Error`], for opening a store, and the mapping of Postgres and pool
//! failures into the core's [`StoreError`].

use std::time::Instant;

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;
use tollgate_core::{BoxError, StoreError};

use crate::tls::TlsThenPlain;

/// The SQLSTATE the store's own guard raises when a statement reaches its
/// end after the call's deadline: everything it wrote is rolled back.
pub(crate) const DEADLINE_PASSED: &str = "TG001";

/// Why a store could not be opened. No message or `Debug` output of this
/// type holds the password of the URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is not a `postgres://` or `postgresql://` URL Postgres
    /// clients accept.
    #[error("invalid Postgres URL: {0}")]
    InvalidUrl(String),
    /// The schema name is not an identifier: 1 to 63 ASCII letters, digits
    /// and `_`, not starting with a digit.
    #[error(
        "invalid schema name `{0}`: use 1 to 63 ASCII letters, digits or '_', not starting with a digit"
    )]
    InvalidSchema(String),
    /// An option is out of range (a pool of no connections).
    #[error("invalid option: {0}")]
    InvalidOption(&'static str),
    /// The server could not be reached, refused the connection or the
    /// login, or did not answer in time.
    #[error("cannot connect to Postgres")]
    Connect(#[source] BoxError),
    /// The schema holds tables of this store written by another version of
    /// this crate, which this version does not know.
    #[error(
        "schema `{schema}` has counter store version {found}; this version reads version {supported}"
    )]
    UnknownSchemaVersion {
        /// The schema's name.
        schema: String,
        /// The version found in the schema.
        found: i32,
        /// The version this crate reads and writes.
        supported: i32,
    },
    /// The schema holds a table of the store's name (`counters` or `marks`)
    /// that this store did not create.
    #[error("schema `{schema}` holds a table `{table}` that is not a counter store's")]
    ForeignSchema {
        /// The schema's name.
        schema: String,
        /// The table found.
        table: String,
    },
    /// The schema is a counter store's, of this version, but one of its
    /// tables is gone (dropped by hand, say): refused rather than recreated,
    /// since the counts or marks it held are lost.
    #[error("schema `{schema}` is a counter store's but lacks its table `{table}`")]
    IncompleteSchema {
        /// The schema's name.
        schema: String,
        /// The table missing (`counters` when both are).
        table: String,
    },
    /// Any other failure while checking or creating the schema (no
    /// privilege to create it, for example).
    #[error("cannot prepare the counter store's schema `{schema}`")]
    Schema {
        /// The schema's name.
        schema: String,
        /// The server's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Whether trying to open again later may succeed (the server was
    /// unreachable or busy); false for a URL, option or schema refused.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Connect(_) => true,
            Error::Schema { source, .. } => source
                .downcast_ref::<tokio_postgres::Error>()
                .is_some_and(|e| class(e) != Class::Backend),
            _ => false,
        }
    }
}

/// What kind of failure a driver error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Connection,
    Busy,
    Timeout,
    Backend,
}

/// Classifies a driver error: connection failures are `Connection`;
/// conflicts, overload and shutdowns `Busy`; a cancelled statement or the
/// store's deadline guard `Timeout`; anything else `Backend`.
pub(crate) fn class(err: &tokio_postgres::Error) -> Class {
    let Some(code) = err.code() else {
        // No server error: the socket, the protocol or a closed connection.
        return Class::Connection;
    };
    let busy = [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::LOCK_NOT_AVAILABLE,
    ];
    if code.code() == DEADLINE_PASSED || *code == SqlState::QUERY_CANCELED {
        Class::Timeout
    } else if busy.contains(code) {
        Class::Busy
    } else if code.code().starts_with("08") {
        Class::Connection
    } else {
        Class::Backend
    }
}

/// A failure of a store call as a [`StoreError`], by its [`class`].
/// `started` is when the call began.
pub(crate) fn from_pg(err: tokio_postgres::Error, started: Instant) -> StoreError {
    match class(&err) {
        Class::Connection => StoreError::Connection(Box::new(err)),
        Class::Busy => StoreError::Busy(Box::new(err)),
        Class::Timeout => StoreError::Timeout(started.elapsed()),
        Class::Backend => StoreError::Backend(Box::new(err)),
    }
}

/// A failure to get a connection from the pool within the call's deadline.
pub(crate) fn from_pool(err: PoolError, started: Instant) -> StoreError {
    match err {
        // Every connection was still busy at the call's deadline: no
        // answer by then, as for a statement still running (a frozen
        // server holds them all), so the limiter's breaker counts it.
        PoolError::Timeout(_) => StoreError::Timeout(started.elapsed()),
        PoolError::Backend(e) => match from_pg(e, started) {
            StoreError::Backend(source) => StoreError::Connection(source),
            other => other,
        },
        PoolError::Closed => StoreError::Connection("the connection pool is closed".into()),
        other => StoreError::Connection(Box::new(Message(other.to_string()))),
    }
}

/// A new pool connection under `sslmode=prefer` that failed over TLS
/// (`tls`), then in plain (`plain`, the pool's error): classified by the
/// plain attempt's error, as [`from_pool`] does, both in the source.
pub(crate) fn from_tls_then_plain(
    tls: tokio_postgres::Error,
    plain: tokio_postgres::Error,
    started: Instant,
) -> StoreError {
    let class = class(&plain);
    let source = Box::new(TlsThenPlain::new(tls, plain));
    match class {
        Class::Busy => StoreError::Busy(source),
        Class::Timeout => StoreError::Timeout(started.elapsed()),
        Class::Connection | Class::Backend => StoreError::Connection(source),
    }
}

/// A deadline already passed before anything was sent.
pub(crate) fn passed(started: Instant) -> StoreError {
    StoreError::Timeout(started.elapsed())
}

/// A reply of the wrong shape.
pub(crate) fn invalid(what: impl Into<String>) -> StoreError {
    StoreError::InvalidReply(what.into())
}

/// An error kept as its message, for errors shared by several calls.
#[derive(Clone, Debug)]
pub(crate) struct Message(pub(crate) String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

#[cfg(test)]
mod tests {
    use deadpool_postgres::TimeoutType;

    use super::*;

    #[test]
    fn pool_waits_and_creation_timeouts_are_timeouts() {
        let now = Instant::now();
        assert_eq!(
            from_pool(PoolError::Timeout(TimeoutType::Wait), now).kind(),
            "timeout"
        );
        assert_eq!(
            from_pool(PoolError::Timeout(TimeoutType::Create), now).kind(),
            "timeout"
        );
        assert_eq!(from_pool(PoolError::Closed, now).kind(), "connection");
        assert!(from_pool(PoolError::Timeout(TimeoutType::Wait), now).is_transient());
    }

    #[test]
    fn another_pool_failure_is_a_connection_failure_that_says_what_it_was() {
        let err = from_pool(PoolError::NoRuntimeSpecified, Instant::now());
        assert_eq!(err.kind(), "connection");
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source, Some(PoolError::NoRuntimeSpecified.to_string()));
    }

    #[test]
    fn open_errors_say_whether_a_retry_may_help() {
        assert!(Error::Connect("refused".into()).is_transient());
        assert!(!Error::InvalidUrl("x".into()).is_transient());
        assert!(
            !Error::UnknownSchemaVersion {
                schema: "s".into(),
                found: 9,
                supported: 1
            }
            .is_transient()
        );
    }
}
