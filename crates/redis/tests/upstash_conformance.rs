//! The REST store runs the whole conformance suite through
//! `tollgate-rest-proxy` over a private `redis-server`: one proxy and one
//! server for the whole test binary (every check uses unique keys).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use support::upstash::TOKEN;
use support::upstash::proxy::Proxy;
use tollgate_conformance::{Expiry, Harness, conformance_tests};
use tollgate_redis::upstash::UpstashStore;
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::relay::Relay;

/// The server and the proxy in front of it, shared by every check.
struct Shared {
    server: RedisServer,
    proxy: Proxy,
}

/// Statics are never dropped, so a watchdog process kills the private
/// server (and removes its directory) once this test process is gone.
/// The watchdog outlives this process by design, so it is never waited on.
#[allow(clippy::zombie_processes)]
fn watch(server: &RedisServer) {
    let (Some(pid), Some(dir)) = (server.pid(), server.dir()) else {
        return;
    };
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -9 {pid} 2>/dev/null; rm -rf '{dir}'",
        parent = std::process::id(),
        dir = dir.display(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the watchdog");
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let server = RedisServer::start();
        watch(&server);
        let proxy = Proxy::start(&server.url());
        Shared { server, proxy }
    })
}

struct RestHarness {
    /// Between the store's clients and the proxy.
    relay: Relay,
    /// A plain connection to the same server, reading lifetimes with `PTTL`.
    raw: MultiplexedConnection,
}

impl Harness for RestHarness {
    type Store = UpstashStore;

    async fn start() -> RestHarness {
        let shared = tokio::task::spawn_blocking(shared).await.unwrap();
        let raw = support::admin(&shared.server.url()).await;
        let relay = Relay::start(shared.proxy.port()).await;
        RestHarness { relay, raw }
    }

    async fn open(&self) -> UpstashStore {
        UpstashStore::open(&self.relay.http_url(), TOKEN).expect("open a REST store")
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

conformance_tests!(RestHarness);
tollgate_conformance::lease_conformance_tests!(RestHarness);
