//! [`RedisClusterStore`]: counters and marks on Redis Cluster.

mod link;
mod ops;
mod reserve;
mod slots;
mod url;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use tollgate_core::{Deadline, StoreError};

use crate::Error;
use crate::reply::Reply;
use crate::tcp::{Resp, failure, value};
use link::ClusterLink;

/// Counters and marks on Redis Cluster: per check, one script call per hash
/// slot, all slots at once, so a check waits one round trip (two with
/// priors in other slots than their counters').
///
/// A check's keys (`limit:<key>:<window>`) usually hash to different slots,
/// and Redis runs a script only on keys of one slot. So each call groups
/// its counters by slot and runs the same script on each group, all
/// concurrently; an all-or-nothing reservation whose keys span slots
/// reserves on each slot and gives back what it took when any slot
/// refuses. A counter's prior (a sliding window's previous window) in
/// another slot is read first (one `MGET` per slot, all at once) and its
/// count sent to its counter's slot; one in the counter's own slot is read
/// by the script. See the [crate docs](crate#redis-cluster).
///
/// Cheap to clone; clones share one cluster connection.
#[derive(Clone)]
pub struct RedisClusterStore {
    cluster: Arc<Cluster>,
}

/// The transport of a [`RedisClusterStore`]: the redis crate's cluster
/// client. Not `Debug`: the client holds the password.
struct Cluster {
    link: ClusterLink,
    /// `host:port,…` of the seed nodes, never the password.
    seeds: String,
}

impl fmt::Debug for RedisClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClusterStore")
            .field("seeds", &self.cluster.seeds)
            .finish_non_exhaustive()
    }
}

impl RedisClusterStore {
    /// A store on the cluster that the seed nodes of `url` belong to.
    ///
    /// Connects lazily: this succeeds while the cluster is down, and the
    /// first call connects (to every seed at once, then to every node that
    /// `CLUSTER SLOTS` names). URLs are
    /// `redis-cluster://[user:password@]host:port[,host:port…]`, or
    /// `rediss-cluster://…` (TLS, with the `tls` feature); one seed is
    /// enough, more survive a seed being down. A
    /// [`Prefixed`](tollgate_core::Prefixed) store's prefix is part of
    /// every key it hashes: a prefix holding a hash tag (`{tenant}:`) puts
    /// all its keys in one slot.
    ///
    /// ```
    /// let store = tollgate_redis::RedisClusterStore::open(
    ///     "redis-cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000",
    /// )?;
    /// # let _ = store;
    /// # Ok::<(), tollgate_redis::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error`] when the URL cannot be read, or is `rediss-cluster://`
    /// without the `tls` feature.
    pub fn open(url: &str) -> Result<RedisClusterStore, Error> {
        let seeds = url::seeds(url)?;
        slots::find_tags();
        let link = ClusterLink::new(&seeds.urls).map_err(|err| {
            Error::InvalidUrl(format!("the cluster URL cannot be used: {:?}", err.kind()))
        })?;
        Ok(RedisClusterStore {
            cluster: Arc::new(Cluster {
                link,
                seeds: seeds.addresses,
            }),
        })
    }
}

impl Resp for Cluster {
    type Route = Target;

    /// Sends `cmd` to `target` in one round trip, following one `MOVED` or
    /// `ASK` redirect (then `target` is the node it named, for a second
    /// call of the same check, such as an `EVAL` after `NOSCRIPT`).
    async fn send(
        &self,
        cmd: &Cmd,
        target: &mut Target,
        deadline: Deadline,
    ) -> Result<Reply, StoreError> {
        let started = Instant::now();
        let mut conn = self.link.connection(deadline)?;
        if deadline.has_passed() {
            // Nobody waits for the reply any more; the server would refuse it.
            return Err(StoreError::Timeout(started.elapsed()));
        }
        let mut result = target.query(&mut conn, cmd).await;
        // The client follows no redirect itself (it refreshes its slot map
        // after a `MOVED`, in the background); the store follows one.
        if let Err(err) = &result
            && let Some(redirected) = Target::redirect(err)
        {
            *target = redirected;
            result = target.query(&mut conn, cmd).await;
        }
        match result {
            Ok(value) => Ok(value::reply(value)),
            Err(err) => match value::error_reply(&err) {
                Some(reply) => Ok(reply),
                None => Err(failure::from_redis(err, started.elapsed())),
            },
        }
    }
}

/// Where one call goes: its slot's primary, or the node a redirect named.
pub(crate) enum Target {
    Slot(Slot),
    Node {
        host: String,
        port: u16,
        /// After `ASK`: the call is preceded by `ASKING`, in one write, so
        /// that no other call on the shared connection takes the flag.
        asking: bool,
    },
}

impl Target {
    /// The node a `MOVED` or `ASK` error names.
    fn redirect(err: &redis::RedisError) -> Option<Target> {
        let asking = match err.kind() {
            ErrorKind::Server(ServerErrorKind::Moved) => false,
            ErrorKind::Server(ServerErrorKind::Ask) => true,
            _ => return None,
        };
        let (address, _slot) = err.redirect_node()?;
        let (host, port) = address.rsplit_once(':')?;
        Some(Target::Node {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: port.parse().ok()?,
            asking,
        })
    }

    async fn query(&self, conn: &mut ClusterConnection, cmd: &Cmd) -> redis::RedisResult<Value> {
        let value = match self {
            Target::Slot(slot) => conn.route_command(cmd.clone(), slots::route(*slot)).await?,
            Target::Node {
                host,
                port,
                asking: false,
            } => {
                let route = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                conn.route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                    .await?
            }
            Target::Node {
                host,
                port,
                asking: true,
            } => {
                let route = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING").add_command(cmd.clone());
                let mut replies = conn.route_pipeline(pipe, 1, 1, route).await?;
                replies.pop().unwrap_or(Value::Nil)
            }
        };
        value.extract_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_without_a_cluster() {
        // Nothing listens on port 1; opening is lazy, so it still succeeds.
        let store = RedisClusterStore::open("redis-cluster://127.0.0.1:1,127.0.0.1:2");
        assert!(store.is_ok());
    }

    #[test]
    fn its_metrics_and_logs_name_it_redis_cluster() {
        use tollgate_core::Named as _;
        let store = RedisClusterStore::open("redis-cluster://127.0.0.1:1")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.name(), "redis-cluster");
    }

    #[test]
    fn never_shows_the_password() {
        let store = RedisClusterStore::open("redis-cluster://u:hunter2@127.0.0.1:1,127.0.0.1:2")
            .unwrap_or_else(|e| panic!("{e}"));
        let text = format!("{store:?}");
        assert!(
            text.contains("127.0.0.1:1,127.0.0.1:2") && !text.contains("hunter2"),
            "{text}"
        );
    }

    /// The error a node's reply `reply` (RESP) is.
    fn server_error(reply: &str) -> redis::RedisError {
        let value = redis::parse_redis_value(reply.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        match value.extract_error() {
            Err(err) => err,
            Ok(other) => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn follows_moved_and_ask_to_the_node_they_name_and_nothing_else() {
        let target = |reply: &str| match Target::redirect(&server_error(reply)) {
            Some(Target::Node { host, port, asking }) => Some((host, port, asking)),
            Some(Target::Slot(_)) => panic!("a redirect to a slot"),
            None => None,
        };
        assert_eq!(
            target("-MOVED 3999 127.0.0.1:6381\r\n"),
            Some(("127.0.0.1".to_owned(), 6381, false))
        );
        assert_eq!(
            target("-ASK 3999 [::1]:6382\r\n"),
            Some(("::1".to_owned(), 6382, true))
        );
        assert_eq!(
            target("-TRYAGAIN Multiple keys request during rehashing\r\n"),
            None
        );
        assert_eq!(target("-MOVED 3999 127.0.0.1:port\r\n"), None);
    }

    #[test]
    fn refuses_single_node_urls() {
        let err = RedisClusterStore::open("redis://127.0.0.1:7000").map(|_| ());
        assert!(matches!(err, Err(Error::UnsupportedScheme(_))), "{err:?}");
    }
}
