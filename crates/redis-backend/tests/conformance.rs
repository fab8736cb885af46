//! The Redis store runs the whole conformance suite, each check against a
//! private `redis-server` of its own (or the one `TOLLGATE_TEST_REDIS_URL` names).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_test_support::redis_server::RedisServer;
use tollgate_conformance::{Harness, conformance_tests};
use tollgate_redis::RedisStore;

struct RedisHarness {
    server: RedisServer,
}

impl Harness for RedisHarness {
    type Store = RedisStore;

    async fn start() -> RedisHarness {
        let server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .unwrap();
        RedisHarness { server }
    }

    async fn open(&self) -> RedisStore {
        RedisStore::open(&self.server.url()).expect("open a redis store")
    }
}

conformance_tests!(RedisHarness);
