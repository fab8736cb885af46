//! [`LinkError`]: why Redis gave the proxy no reply, or why the proxy will
//! not talk to it.

use std::time::Duration;

use redis::RedisError;

/// Why Redis gave no reply (an error reply is a reply, not a failure).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The call took longer than the configured bound.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Connecting, sending or reading failed.
    #[error("redis is unavailable: {0}")]
    Redis(#[from] RedisError),
    /// The proxy's Redis user may run commands outside the allow-list, so
    /// scripts sent through the proxy could too: the proxy serves nothing.
    #[error(
        "the proxy's Redis user {user:?} can run {probe}, which is not on the allow-list, \
         so scripts sent through the proxy could run any command: connect as a restricted \
         user (tollgate-rest-proxy --print-acl NAME, or --create-user NAME), or pass \
         --allow-unrestricted-user"
    )]
    Unrestricted {
        /// The Redis user's name.
        user: String,
        /// The command that user was allowed to run.
        probe: String,
    },
    /// Creating the proxy's Redis user failed.
    #[error("cannot set up the proxy's Redis user: {0}")]
    Setup(String),
}

impl LinkError {
    /// Whether Redis did not answer in time (the bound, or the client's
    /// own response timeout).
    pub(crate) fn is_timeout(&self) -> bool {
        match self {
            LinkError::Timeout(_) => true,
            LinkError::Redis(e) => e.is_timeout(),
            LinkError::Unrestricted { .. } | LinkError::Setup(_) => false,
        }
    }
}
