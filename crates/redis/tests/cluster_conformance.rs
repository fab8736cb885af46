//! The Redis Cluster store runs the whole conformance suite on one private
//! cluster (3 primaries, 3 replicas) shared by every check of this binary;
//! every check uses keys of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tollgate_conformance::{Expiry, Harness, conformance_tests};
use tollgate_redis::RedisClusterStore;
use tollgate_test_support::redis_cluster::RedisCluster;

struct ClusterHarness {
    cluster: &'static RedisCluster,
    /// A cluster client of its own, reading lifetimes with `PTTL` from the
    /// node that owns each key (not through the store under test).
    raw: ClusterConnection,
}

impl Harness for ClusterHarness {
    type Store = RedisClusterStore;

    async fn start() -> ClusterHarness {
        let cluster = tokio::task::spawn_blocking(RedisCluster::shared)
            .await
            .unwrap();
        let raw = ClusterClient::new(cluster.seeds())
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        ClusterHarness { cluster, raw }
    }

    async fn open(&self) -> RedisClusterStore {
        RedisClusterStore::open(&self.cluster.url()).expect("open a redis cluster store")
    }

    async fn expiry(&self, key: &str) -> Expiry {
        let mut raw = self.raw.clone();
        let ms: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut raw)
            .await
            .expect("PTTL");
        match ms {
            -2 => Expiry::Absent,
            -1 => Expiry::Never,
            ms => Expiry::In(Duration::from_millis(u64::try_from(ms).expect("a PTTL"))),
        }
    }
}

conformance_tests!(ClusterHarness);
tollgate_conformance::lease_conformance_tests!(ClusterHarness);
