//! The redis crate's errors, as the core's [`StoreError`]: failing to
//! reach a server or to read it. (A server's error reply is read once for
//! every transport, in [`crate::failure`].)
//!
//! | the redis crate says | [`StoreError`] | transient |
//! |---|---|---|
//! | I/O error: refused, reset, closed, broken pipe; no cluster node known for a slot | `Connection` | yes |
//! | a connection attempt or a cluster node's reply over its time limit | `Timeout` | yes |
//! | an error reply it turned into an error (in a pipeline, a redirect left over): see [`crate::failure`] | `Busy` or `Backend` | as its code |
//! | a reply it could not read | `InvalidReply` | no |
//! | anything else (bad auth, ...) | `Backend` | no |

use std::time::Duration;

use redis::{ErrorKind, RedisError};
use tollgate_core::StoreError;

/// Converts a client error; `waited` is how long the client waited, for a
/// timeout's message.
pub(crate) fn from_redis(err: RedisError, waited: Duration) -> StoreError {
    if err.is_timeout() {
        return StoreError::Timeout(waited);
    }
    match err.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => {
            StoreError::Connection(Box::new(err))
        }
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
            StoreError::InvalidReply(err.to_string())
        }
        _ if is_busy(&err) => StoreError::Busy(Box::new(err)),
        _ => StoreError::Backend(Box::new(err)),
    }
}

/// Whether the server refused for a passing reason, looking inside aborted
/// transactions and pipelines too.
fn is_busy(err: &RedisError) -> bool {
    if err.code().is_some_and(crate::failure::is_busy) {
        return true;
    }
    err.clone().into_server_errors().is_some_and(|errors| {
        errors
            .iter()
            .any(|(_, e)| crate::failure::is_busy(e.code()))
    })
}

/// Whether the connection that returned `err` is broken and must be replaced.
pub(crate) fn breaks_connection(err: &RedisError) -> bool {
    err.is_unrecoverable_error() || err.is_connection_dropped()
}

/// Whether `err` is the server's error reply: the server answered.
pub(crate) fn is_reply(err: &RedisError) -> bool {
    err.code().is_some()
}

/// Whether `err` says the server is a replica now (a failover demoted it):
/// the connection must be replaced, so that the next call reaches whatever
/// server the address names now.
pub(crate) fn is_read_only(err: &RedisError) -> bool {
    err.code() == Some("READONLY")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a server sends as `-<text>`.
    fn server(text: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(err)) => RedisError::from(err),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn io_errors_are_connection_failures_and_timeouts_are_timeouts() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(from_redis(refused, Duration::ZERO).kind(), "connection");
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(breaks_connection(&reset));
        let slow = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let waited = Duration::from_millis(20);
        let err = from_redis(slow, waited);
        assert!(matches!(err, StoreError::Timeout(d) if d == waited));
    }

    #[test]
    fn a_connection_is_replaced_when_it_broke_or_its_stream_is_out_of_step_only() {
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(breaks_connection(&reset), "a dropped connection");
        let garbled = RedisError::from((redis::ErrorKind::Parse, "unexpected reply"));
        assert!(
            breaks_connection(&garbled),
            "a reply that could not be read"
        );
        assert!(!is_reply(&reset) && !is_reply(&garbled));
        for reply in [
            "ERR value is not an integer",
            "LOADING later",
            "NOSCRIPT run EVAL",
        ] {
            let err = server(reply);
            assert!(!breaks_connection(&err), "a server's error reply: {reply}");
            assert!(is_reply(&err), "{reply}");
        }
    }

    #[test]
    fn passing_server_refusals_left_in_errors_are_busy() {
        for code in crate::failure::BUSY_CODES {
            let err = server(&format!("{code} try later"));
            assert_eq!(from_redis(err, Duration::ZERO).kind(), "busy", "{code}");
        }
        let demoted = server("READONLY You can't write against a read only replica.");
        assert!(is_read_only(&demoted));
        assert!(!is_read_only(&server("LOADING later")));
    }

    #[test]
    fn a_cluster_without_a_node_for_a_slot_is_a_connection_failure() {
        let err = RedisError::from((ErrorKind::ClusterConnectionNotFound, "no node"));
        let err = from_redis(err, Duration::ZERO);
        assert_eq!(err.kind(), "connection");
        assert!(err.is_transient());
    }

    #[test]
    fn wrong_reply_types_are_invalid_replies_and_the_rest_backend_failures() {
        let err = RedisError::from((ErrorKind::UnexpectedReturnType, "not an integer"));
        assert_eq!(from_redis(err, Duration::ZERO).kind(), "invalid-reply");
        let err = RedisError::from((ErrorKind::Client, "no"));
        assert_eq!(from_redis(err, Duration::ZERO).kind(), "backend");
        for text in ["WRONGTYPE wrong kind of value", "NOPERM no", "OOM full"] {
            assert_eq!(from_redis(server(text), Duration::ZERO).kind(), "backend");
        }
    }
}
