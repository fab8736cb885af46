//! Helpers of the Redis Cluster tests: raw access to the cluster, limits
//! placed on chosen slots, a store wrapper that counts failed attempts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tollgate_core::observe::Op;
use tollgate_core::{Deadline, Hook, Hooked, Limit, Rule, StoreError, Window, async_trait};
use tollgate_test_support::redis_cluster::RedisCluster;
use tollgate_test_support::unique;

/// A cluster client of the test's own (default settings), for raw commands.
pub async fn raw(cluster: &RedisCluster) -> ClusterConnection {
    ClusterClient::new(cluster.seeds())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

/// `CLUSTER KEYSLOT key`, as the cluster computes it.
pub async fn slot(raw: &mut ClusterConnection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap()
}

/// The stored count of `key` (0 when absent), read from its slot's primary.
pub async fn stored(raw: &mut ClusterConnection, key: &str) -> u64 {
    let value: Option<u64> = redis::cmd("GET").arg(key).query_async(raw).await.unwrap();
    value.unwrap_or(0)
}

/// `PTTL key` from its slot's primary.
pub async fn pttl(raw: &mut ClusterConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(raw).await.unwrap()
}

/// Now, in whole seconds (the limiters of these tests use the system clock).
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The stored key of `limit`'s counter now.
pub fn key_of(limit: &Limit) -> String {
    limit.counter_key(limit.rule().window().index(now()))
}

/// A daily limit named `name` with `max`, on a key no other test uses,
/// whose counter's slot satisfies `wanted`.
pub async fn limit_where(
    raw: &mut ClusterConnection,
    name: &str,
    max: u64,
    wanted: impl Fn(u16) -> bool,
) -> (Limit, u16) {
    let rule = Rule::new(name, max, Window::DAY)
        .and_then(|r| r.with_key(&["id"]))
        .unwrap();
    for _ in 0..100_000 {
        let limit = rule.limit(&[unique()]).unwrap();
        let slot = slot(raw, &key_of(&limit)).await;
        if wanted(slot) {
            return (limit, slot);
        }
    }
    panic!("no key of {name} on a wanted slot");
}

/// A daily limit whose key part holds `{tag}`: its counter is on `tag`'s slot.
pub fn tagged(name: &str, max: u64, tag: &str) -> Limit {
    Rule::new(name, max, Window::DAY)
        .and_then(|r| r.with_key(&["id"]))
        .unwrap()
        .limit(&[format!("{{{tag}}}")])
        .unwrap()
}

/// A deadline for a store call made directly by a test: one second.
pub fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(1))
}

/// Failed attempts seen by [`Counting`], by kind.
#[derive(Debug, Default)]
pub struct Failures {
    pub busy: AtomicU64,
    pub timeout: AtomicU64,
    pub connection: AtomicU64,
    pub other: AtomicU64,
    /// Failed attempts by the first word of their cause (`TRYAGAIN`, ...).
    pub causes: Mutex<BTreeMap<String, u64>>,
}

impl Failures {
    fn note(&self, err: &StoreError) {
        let counter = match err.kind() {
            "busy" => &self.busy,
            "timeout" => &self.timeout,
            "connection" => &self.connection,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let cause = std::error::Error::source(err)
            .map(|source| source.to_string())
            .unwrap_or_else(|| err.to_string());
        let word = cause
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_end_matches(':');
        *self
            .causes
            .lock()
            .unwrap()
            .entry(format!("{}:{word}", err.kind()))
            .or_default() += 1;
    }

    /// (busy, timeout, connection, other).
    pub fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.busy.load(Ordering::Relaxed),
            self.timeout.load(Ordering::Relaxed),
            self.connection.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
        )
    }

    /// Every failed attempt.
    pub fn total(&self) -> u64 {
        let (a, b, c, d) = self.get();
        a + b + c + d
    }
}

/// A store that counts the attempts that failed (which the limiter then
/// retries, or answers by its policy) in its hook.
pub type Counting<S> = Hooked<S, Arc<Failures>>;

#[async_trait]
impl Hook for Failures {
    async fn after(&self, _: Op, error: Option<&StoreError>) -> Result<(), StoreError> {
        if let Some(err) = error {
            self.note(err);
        }
        Ok(())
    }
}
