//! The Redis store runs the whole conformance suite, each check against a
//! private `redis-server` of its own (or the one `TOLLGATE_TEST_REDIS_URL` names),
//! its clients talking to it through a relay that loses replies on the wire
//! for the checks of replies lost after the write.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tollgate_conformance::{Expiry, Harness, conformance_tests};
use tollgate_redis::RedisStore;
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::relay::Relay;

struct RedisHarness {
    /// Stopped when the check ends.
    _server: RedisServer,
    /// Between the store's clients and the server.
    relay: Relay,
    /// A plain connection to the same server, reading lifetimes with `PTTL`.
    raw: MultiplexedConnection,
}

impl Harness for RedisHarness {
    type Store = RedisStore;

    async fn start() -> RedisHarness {
        let server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let raw = client.get_multiplexed_async_connection().await.unwrap();
        let relay = Relay::start(server.port()).await;
        RedisHarness {
            _server: server,
            relay,
            raw,
        }
    }

    async fn open(&self) -> RedisStore {
        RedisStore::open(&self.relay.url()).expect("open a redis store")
    }

    fn relay(&self) -> Option<&Relay> {
        Some(&self.relay)
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

conformance_tests!(RedisHarness);
tollgate_conformance::lease_conformance_tests!(RedisHarness);
