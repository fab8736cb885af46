//! The private store of an experiment (a redis-server, a 3-master cluster,
//! or the REST proxy before a redis-server; never the machine's own
//! servers) and raw reads of its counters, past the library under test.

use std::path::Path;
use std::time::Duration;

use clap::ValueEnum;
use tollgate_test_support::redis_cluster::RedisCluster;
use tollgate_test_support::redis_server::{RedisServer, RedisServerOptions};

use crate::children::{Guard, LogDir, Target, start_proxy};

/// The REST proxy's token (a private proxy on loopback).
const PROXY_TOKEN: &str = "tollgate-burst";

/// Which store the demos count in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    /// One private redis-server.
    Redis,
    /// A private Redis Cluster: 3 primaries, 3 replicas.
    Cluster,
    /// The REST proxy (Upstash protocol) before a private redis-server.
    Rest,
}

/// A running private store; stopped when dropped.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) target: Target,
    /// `redis://` URLs of the nodes holding the counters.
    nodes: Vec<String>,
    // Dropped in this order: the proxy before the servers behind it.
    _proxy: Option<Guard>,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
}

impl Store {
    /// Starts a private store of `kind` (for `Rest`, the proxy binary at
    /// `proxy`, logging in `logs`).
    ///
    /// # Panics
    ///
    /// When a server does not start (a setup error).
    pub(crate) fn start(kind: Kind, proxy: &Path, logs: &LogDir) -> Store {
        match kind {
            Kind::Redis => {
                let redis = private_redis(RedisServerOptions::default());
                Store {
                    target: Target {
                        url: redis.url(),
                        env: Vec::new(),
                    },
                    nodes: vec![redis.url()],
                    _proxy: None,
                    _redis: Some(redis),
                    _cluster: None,
                }
            }
            Kind::Cluster => {
                let cluster = RedisCluster::start();
                Store {
                    target: Target {
                        url: cluster.url(),
                        env: Vec::new(),
                    },
                    nodes: cluster.seeds(),
                    _proxy: None,
                    _redis: None,
                    _cluster: Some(cluster),
                }
            }
            Kind::Rest => {
                let redis = private_redis(RedisServerOptions::default());
                let (guard, addr) = start_proxy(proxy, &redis.url(), PROXY_TOKEN, logs);
                Store {
                    target: Target {
                        url: format!("upstash+http://{addr}"),
                        env: vec![("UPSTASH_REDIS_REST_TOKEN".into(), PROXY_TOKEN.into())],
                    },
                    nodes: vec![redis.url()],
                    _proxy: Some(guard),
                    _redis: Some(redis),
                    _cluster: None,
                }
            }
        }
    }

    /// The count stored at `key` (0 when absent).
    pub(crate) fn read(&self, key: &str) -> Result<u64, String> {
        read(&self.nodes, key)
    }
}

/// A private redis-server with `options`.
///
/// # Panics
///
/// When it does not start, or the environment names a shared server
/// (`TOLLGATE_TEST_REDIS_URL`): the experiments never touch one.
pub(crate) fn private_redis(options: RedisServerOptions) -> RedisServer {
    let server = RedisServer::start_with(options);
    server.require_private("run an experiment on it");
    server
}

/// The count at `key` on whichever of `nodes` holds it (a cluster node
/// that does not answers `MOVED`); 0 when absent.
pub(crate) fn read(nodes: &[String], key: &str) -> Result<u64, String> {
    let mut last = String::from("no node");
    for url in nodes {
        let reply = connect(url).and_then(|mut connection| {
            redis::cmd("GET")
                .arg(key)
                .query::<Option<String>>(&mut connection)
        });
        match reply {
            Ok(None) => return Ok(0),
            Ok(Some(text)) => {
                return text
                    .parse()
                    .map_err(|_| format!("{key} holds {text:?}, not a count"));
            }
            Err(e) if e.redirect_node().is_some() => last = e.to_string(),
            Err(e) => return Err(format!("GET {key} on {url}: {e}")),
        }
    }
    Err(format!("GET {key}: {last}"))
}

/// Whether the server at `url` answers `PING` now.
pub(crate) fn ping(url: &str) -> bool {
    connect(url)
        .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection))
        .is_ok_and(|pong| pong == "PONG")
}

fn connect(url: &str) -> redis::RedisResult<redis::Connection> {
    let timeout = Duration::from_millis(500);
    let connection = redis::Client::open(url)?.get_connection_with_timeout(timeout)?;
    connection.set_read_timeout(Some(timeout))?;
    Ok(connection)
}
