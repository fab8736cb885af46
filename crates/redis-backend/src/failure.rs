//! Failed store calls, as the core's [`StoreError`].
//!
//! | Redis says | [`StoreError`] | transient |
//! |---|---|---|
//! | I/O error: refused, reset, closed, broken pipe; no cluster node known for a slot | `Connection` | yes |
//! | a write script's `DEADLINE` reply (nothing was applied) | `Timeout` | yes |
//! | a connection attempt over its time limit | `Timeout` | yes |
//! | `LOADING`, `BUSY`, `TRYAGAIN`, `READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `NOREPLICAS`, and a `MOVED` or `ASK` left after the one redirect followed | `Busy` | yes |
//! | a reply of the wrong type or shape | `InvalidReply` | no |
//! | anything else (`WRONGTYPE`, `NOPERM`, `OOM`, bad auth, ...) | `Backend` | no |

use redis::{ErrorKind, RedisError, ServerError};
use tollgate_core::StoreError;

use crate::link::CONNECT_TIMEOUT;

/// Server error codes that a later attempt may get past.
/// `MOVED` and `ASK` reach a caller only from Redis Cluster, when a slot
/// moved again while its redirect was followed: the client refreshes its
/// slot map, so the next attempt finds the slot. `NOREPLICAS`: a primary
/// with `min-replicas-to-write` refuses writes while too few replicas are
/// in sync.
const BUSY_CODES: [&str; 9] = [
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    "NOREPLICAS",
];

fn is_busy_code(code: &str) -> bool {
    BUSY_CODES.contains(&code)
}

/// Converts a client error. The client has no response timeout, so an I/O
/// timeout is a connection attempt's.
pub(crate) fn from_redis(err: RedisError) -> StoreError {
    if err.is_timeout() {
        return StoreError::Timeout(CONNECT_TIMEOUT);
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

/// Converts an error reply found inside a pipeline's replies.
pub(crate) fn from_server(err: ServerError) -> StoreError {
    if is_busy_code(err.code()) {
        StoreError::Busy(Box::new(err))
    } else {
        StoreError::Backend(Box::new(err))
    }
}

/// Whether the server refused for a passing reason, looking inside aborted
/// transactions and pipelines too.
fn is_busy(err: &RedisError) -> bool {
    if err.code().is_some_and(is_busy_code) {
        return true;
    }
    err.clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, e)| is_busy_code(e.code())))
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
    fn server(text: &str) -> ServerError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(err)) => err,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn io_errors_are_connection_failures_and_timeouts_are_timeouts() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(from_redis(refused).kind(), "connection");
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(breaks_connection(&reset));
        let slow = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let err = from_redis(slow);
        assert!(matches!(err, StoreError::Timeout(d) if d == CONNECT_TIMEOUT));
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
            let err = RedisError::from(server(reply));
            assert!(!breaks_connection(&err), "a server's error reply: {reply}");
            assert!(is_reply(&err), "{reply}");
        }
    }

    #[test]
    fn passing_server_refusals_are_busy() {
        for code in BUSY_CODES {
            let reply = server(&format!("{code} try later"));
            assert_eq!(
                from_redis(RedisError::from(reply.clone())).kind(),
                "busy",
                "{code}"
            );
            assert_eq!(from_server(reply).kind(), "busy", "{code}");
        }
        let demoted = RedisError::from(server(
            "READONLY You can't write against a read only replica.",
        ));
        assert!(is_read_only(&demoted));
        assert!(!is_read_only(&RedisError::from(server("LOADING later"))));
    }

    #[test]
    fn a_cluster_without_a_node_for_a_slot_is_a_connection_failure() {
        let err = RedisError::from((ErrorKind::ClusterConnectionNotFound, "no node"));
        let err = from_redis(err);
        assert_eq!(err.kind(), "connection");
        assert!(err.is_transient());
        let moved = RedisError::from(server("MOVED 3999 127.0.0.1:7002"));
        assert_eq!(from_redis(moved).kind(), "busy");
    }

    #[test]
    fn wrong_reply_types_are_invalid_replies() {
        let err = RedisError::from((ErrorKind::UnexpectedReturnType, "not an integer"));
        assert_eq!(from_redis(err).kind(), "invalid-reply");
    }

    #[test]
    fn other_errors_are_backend_failures() {
        let err = RedisError::from((ErrorKind::Client, "no"));
        assert_eq!(from_redis(err).kind(), "backend");
        for text in [
            "WRONGTYPE wrong kind of value",
            "NOPERM no",
            "OOM full",
            "ERR syntax",
        ] {
            assert_eq!(from_redis(RedisError::from(server(text))).kind(), "backend");
            assert_eq!(from_server(server(text)).kind(), "backend");
        }
    }
}
