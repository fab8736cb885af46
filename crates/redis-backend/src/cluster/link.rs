//! [`ClusterLink`]: the `redis` crate's async cluster client, set from
//! tollgate's one time budget, made on first use.
//!
//! The client keeps one multiplexed connection per node, learns the slot
//! map from `CLUSTER SLOTS`, refreshes it after a `MOVED` and reconnects a
//! node whose connection breaks. Its own retries (16 by default, at least
//! 1,280 ms apart) would outlive any check, so it makes none:
//! [`CLIENT_RETRIES`] is 0, and the store follows `MOVED` and `ASK` itself
//! (once per call, `ASKING` and the call in one write: the client sends
//! them apart, so on a shared connection another call could take the
//! `ASKING` flag). Every other wait is the caller's: the limiter's attempt
//! timer drops a call at its deadline, and the client then drops the
//! request.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use tokio::sync::watch;
use tollgate_core::StoreError;

use crate::link::{CONNECT_TIMEOUT, STALE_AFTER};

/// Retries the client makes on its own: none (it would count a redirect
/// as one). Retries are the limiter's: 2, 100 ms apart, by default.
pub(crate) const CLIENT_RETRIES: u32 = 0;

/// Limit on each connection attempt to a node, handshake included: the
/// default [`RetryPolicy::worst_case`](tollgate_core::RetryPolicy::worst_case)
/// (350 ms), as for one server. Attempts run in the client's own task.
pub(crate) const NODE_CONNECT_TIMEOUT: Duration = CONNECT_TIMEOUT;

/// How long a node may leave one request unanswered before the client
/// fails it: a whole check's budget (350 ms). It bounds what the client
/// keeps in flight for callers long gone; callers are cut off sooner by
/// their own deadline.
pub(crate) const NODE_RESPONSE_TIMEOUT: Duration = STALE_AFTER;

/// A cluster client and, once a call needed it, its connection. Not
/// `Debug`: the client holds the password.
pub(crate) struct ClusterLink {
    client: ClusterClient,
    live: Mutex<Option<Live>>,
}

struct Live {
    conn: ClusterConnection,
    /// Closed when the runtime that runs the connection's task shut down.
    runtime: watch::Receiver<()>,
}

impl ClusterLink {
    /// A link to the cluster that `seeds` (node URLs) belong to.
    pub(crate) fn new(seeds: &[String]) -> Result<ClusterLink, redis::RedisError> {
        let client = ClusterClient::builder(seeds.iter().map(String::as_str))
            .retries(CLIENT_RETRIES)
            .connection_timeout(NODE_CONNECT_TIMEOUT)
            .response_timeout(NODE_RESPONSE_TIMEOUT)
            .overall_response_timeout(None)
            .build()?;
        Ok(ClusterLink {
            client,
            live: Mutex::new(None),
        })
    }

    /// The connection, made now if there is none (or its runtime is gone).
    /// Making it sends nothing: the client connects to the seeds in its
    /// own task, and calls wait for that within their own deadline.
    pub(crate) fn connection(&self) -> Result<ClusterConnection, StoreError> {
        let mut live = lock(&self.live);
        if let Some(live) = live.as_ref()
            && live.runtime.has_changed().is_ok()
        {
            return Ok(live.conn.clone());
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Backend("tollgate-redis needs a tokio runtime".into()))?;
        let config = ClusterConfig::new()
            .set_connection_timeout(NODE_CONNECT_TIMEOUT)
            .set_response_timeout(NODE_RESPONSE_TIMEOUT);
        let conn = self.client.get_pending_async_connection_with_config(config);
        // A task on the same runtime, ended with it: then the connection's
        // own task is gone too, and the next call makes a new connection.
        let (alive, watched) = watch::channel(());
        runtime.spawn(async move { alive.closed().await });
        *live = Some(Live {
            conn: conn.clone(),
            runtime: watched,
        });
        Ok(conn)
    }
}

fn lock(live: &Mutex<Option<Live>>) -> MutexGuard<'_, Option<Live>> {
    // The state is one plain value, consistent even after a panic elsewhere.
    live.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::RetryPolicy;

    #[test]
    fn the_client_waits_within_one_check() {
        let policy = RetryPolicy::default();
        assert_eq!(CLIENT_RETRIES, 0, "no retries of its own");
        assert_eq!(NODE_CONNECT_TIMEOUT, policy.worst_case());
        assert_eq!(NODE_RESPONSE_TIMEOUT, policy.worst_case());
    }
}
