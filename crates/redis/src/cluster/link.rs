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
//! request. What the client waits for on its own (connecting to a node, a
//! node's reply to a request whose caller is gone) is bounded by the
//! longest check budget ([`Deadline::check_budget`]) among the store's
//! calls when the connection is made ([`Longest`]).

use std::sync::{Mutex, MutexGuard};

use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use tokio::sync::watch;
use tollgate_core::{Deadline, StoreError};

use crate::tcp::Longest;

/// Retries the client makes on its own: none (it would count a redirect
/// as one). Retries are the limiter's: 2, 100 ms apart, by default.
const CLIENT_RETRIES: u32 = 0;

/// A cluster client and, once a call needed it, its connection. Not
/// `Debug`: the client holds the password.
pub(crate) struct ClusterLink {
    client: ClusterClient,
    live: Mutex<Option<Live>>,
    /// What bounds the client's own waits.
    budget: Longest,
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
            .overall_response_timeout(None)
            .build()?;
        Ok(ClusterLink {
            client,
            live: Mutex::new(None),
            budget: Longest::default(),
        })
    }

    /// The connection, made now if there is none (or its runtime is gone),
    /// its own waits bounded by the longest check budget so far. Making it sends
    /// nothing: the client connects to the seeds in its own task, and calls
    /// wait for that within their own deadline.
    pub(crate) fn connection(&self, deadline: Deadline) -> Result<ClusterConnection, StoreError> {
        let budget = self.budget.note(deadline);
        let mut live = lock(&self.live);
        if let Some(live) = live.as_ref()
            && live.runtime.has_changed().is_ok()
        {
            return Ok(live.conn.clone());
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Backend("tollgate-redis needs a tokio runtime".into()))?;
        // A connection attempt to a node (handshake included) and a node's
        // reply may take a whole check, never more.
        let config = ClusterConfig::new()
            .set_connection_timeout(budget)
            .set_response_timeout(budget);
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
