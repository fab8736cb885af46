//! The Redis store when Redis misbehaves: killed, frozen, restarted, not yet
//! started, scripts flushed, connections gone silent. Each test runs its own
//! private `redis-server`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use redis::Value;
use support::frozen::Frozen;
use support::{
    BOUND, SHORT, SHORT_BOUND, admin, assert_a_short_check_gives_up_in_time, deadline, limits, run,
};
use tollgate_core::{CheckId, Clock, CounterStore, Deliveries, Error, Limiter, ManualClock};
use tollgate_redis::RedisStore;
use tollgate_test_support::Logs;
use tollgate_test_support::redis_server::{RedisServer, RedisServerOptions};
use tollgate_test_support::relay::Relay;

fn start(options: RedisServerOptions) -> RedisServer {
    RedisServer::start_with(options)
}

/// Runs `check`, asserting it returns within [`BOUND`]; returns its output and time.
async fn timed<F: std::future::Future>(what: &str, check: F) -> (F::Output, Duration) {
    let started = Instant::now();
    let output = check.await;
    let took = started.elapsed();
    println!("{what}: {took:?}");
    assert!(
        took < BOUND,
        "{what} took {took:?}, over the stated bound of {BOUND:?}"
    );
    (output, took)
}

/// Fail-open allows and logs (the core logs one line per rule list per
/// second, so only the first failure of a run is looked for), fail-closed
/// counts and reserves are `Unavailable`, each within the bound.
async fn assert_bounded_failure(limiter: &Limiter, situation: &str) {
    assert_bounded(limiter, situation, true).await;
}

async fn assert_bounded(limiter: &Limiter, situation: &str, logged: bool) {
    let limits = limits(4);
    let logs = Logs::default();
    let (verdict, _) = timed(
        &format!("{situation}: within"),
        logs.capture(limiter.within(&limits)),
    )
    .await;
    assert!(
        verdict.is_allowed() && verdict.is_degraded(),
        "{situation}: {verdict:?}"
    );
    let text = logs.text();
    assert!(
        !logged || text.contains("WARN") && text.contains("fail-open"),
        "{situation}: not logged: {text:?}"
    );
    let (counted, _) = timed(&format!("{situation}: count"), limiter.count(&limits)).await;
    assert!(
        matches!(counted, Err(Error::Unavailable(_))),
        "{situation}: {counted:?}"
    );
    let (reserved, _) = timed(&format!("{situation}: reserve"), limiter.reserve(&limits)).await;
    assert!(
        matches!(reserved, Err(Error::Unavailable(_))),
        "{situation}: {reserved:?}"
    );
}

/// A check that must succeed, not degraded.
async fn assert_healthy(limiter: &Limiter, situation: &str) {
    let limits = limits(4);
    support::until_answered(limiter, &support::limits(1), situation).await;
    let verdict = limiter.count(&limits).await;
    assert!(
        verdict.as_ref().is_ok_and(|v| v.is_allowed()),
        "{situation}: {verdict:?}"
    );
    let reserved = limiter.reserve(&limits).await;
    assert!(
        reserved.as_ref().is_ok_and(|v| v.is_allowed()),
        "{situation}: {reserved:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_fails_within_the_bound_and_recovers() {
    let mut server = start(RedisServerOptions::default());
    let limiter = Limiter::new(RedisStore::open(&server.url()).unwrap());
    assert_healthy(&limiter, "before the kill").await;

    server.stop();
    for round in 0..3 {
        assert_bounded(&limiter, &format!("killed, round {round}"), round == 0).await;
    }
    let (kind, _) = timed("killed: store call", async {
        let store = RedisStore::open(&server.url()).unwrap();
        store
            .get(&["k".into()], deadline())
            .await
            .unwrap_err()
            .kind()
    })
    .await;
    assert_eq!(kind, "connection");

    server.restart();
    assert_healthy(&limiter, "after the restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_fails_within_the_bound_and_recovers_when_thawed() {
    let mut server = start(RedisServerOptions::default());
    let limiter = Limiter::new(RedisStore::open(&server.url()).unwrap());
    assert_healthy(&limiter, "before the freeze").await;

    server.freeze(); // if an assertion fails, dropping the server kills it frozen
    for round in 0..2 {
        assert_bounded(&limiter, &format!("frozen, round {round}"), round == 0).await;
    }
    server.thaw();
    assert_healthy(&limiter, "after the thaw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_server_serves_the_same_store() {
    let mut server = start(RedisServerOptions::default());
    let store = RedisStore::open(&server.url()).unwrap();
    let limiter = Limiter::new(store.clone());
    assert_healthy(&limiter, "before the restart").await;
    for round in 0..3 {
        server.restart();
        assert_healthy(&limiter, &format!("after restart {round}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_opens_while_redis_is_down_and_connects_when_it_appears() {
    let mut server = start(RedisServerOptions::default());
    server.stop();
    let limiter = Limiter::new(RedisStore::open(&server.url()).unwrap());
    assert_bounded_failure(&limiter, "not started yet").await;
    server.restart();
    assert_healthy(&limiter, "once started").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_dead_server_fail_at_once_and_reconnect_once_per_delay() {
    let mut server = start(RedisServerOptions::default());
    server.stop();
    let store = RedisStore::open(&server.url()).unwrap();
    let c = [support::counter("dead", 1, 10)];
    // A refused connection fails in well under the 50 ms between attempts:
    // the calls in between fail with its error, trying nothing.
    let started = Instant::now();
    for _ in 0..5 {
        assert_eq!(
            store
                .count(&c, CheckId::new(), deadline())
                .await
                .unwrap_err()
                .kind(),
            "connection"
        );
    }
    let elapsed = started.elapsed().as_millis() as u64;
    let made = store.connections_made();
    assert!(made <= 1 + elapsed / 50, "{made} attempts in {elapsed} ms");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(store.count(&c, CheckId::new(), deadline()).await.is_err());
    assert_eq!(
        store.connections_made(),
        made + 1,
        "no new attempt after the delay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_runs_again_after_script_flush() {
    let server = start(RedisServerOptions::default());
    let store = RedisStore::open(&server.url()).unwrap();
    // No retry wrapper: the store itself must get past NOSCRIPT.
    let deliveries = Deliveries::new(store.clone(), "github-delivery:").unwrap();
    let limiter = Limiter::builder(store)
        .clock(ManualClock::starting_now())
        .build();
    let limits = limits(2);
    assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
    let mut admin = admin(&server.url()).await;
    for round in 1..=3_i64 {
        run(&mut admin, &["SCRIPT", "FLUSH"]).await;
        let verdict = limiter.reserve(&limits).await.unwrap();
        assert!(verdict.is_allowed(), "after flush {round}");
        assert_eq!(verdict.usage()[0].remaining(), 1_000 - 2 * round);
        run(&mut admin, &["SCRIPT", "FLUSH"]).await;
        let verdict = limiter.count(&limits).await.unwrap();
        assert!(verdict.is_allowed(), "after flush {round}");
        assert_eq!(verdict.usage()[0].remaining(), 1_000 - 1 - 2 * round);
        run(&mut admin, &["SCRIPT", "FLUSH"]).await;
        let delivery = deliveries.begin(&tollgate_test_support::unique()).await;
        run(&mut admin, &["SCRIPT", "FLUSH"]).await;
        delivery
            .unwrap()
            .expect("a first delivery")
            .complete()
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_survive_a_crash_with_appendfsync_always() {
    let mut server = start(RedisServerOptions::durable());
    let clock = ManualClock::starting_now();
    let counted = limits(4);
    let reserved = limits(2);
    {
        let limiter = Limiter::builder(RedisStore::open(&server.url()).unwrap())
            .clock(clock.clone())
            .build();
        for _ in 0..5 {
            limiter.count(&counted).await.unwrap();
        }
        for _ in 0..3 {
            limiter.reserve(&reserved).await.unwrap();
        }
    }
    server.restart(); // SIGKILL, then the same directory: the AOF is replayed.

    let store = RedisStore::open(&server.url()).unwrap();
    let limiter = Limiter::builder(store.clone()).clock(clock.clone()).build();
    let left = limiter.remaining(&counted).await.unwrap();
    assert!(left.iter().all(|u| u.remaining() == 1_000 - 5), "{left:?}");
    let left = limiter.remaining(&reserved).await.unwrap();
    assert!(left.iter().all(|u| u.remaining() == 1_000 - 3), "{left:?}");
    let now = clock.now().as_secs();
    let mut admin = admin(&server.url()).await;
    for limit in &counted {
        let key = limit.counter_key(limit.rule().window().index(now));
        let ttl = run(&mut admin, &["PTTL", &key]).await;
        assert!(
            matches!(ttl, Value::Int(ms) if ms > 0 && ms <= 86_400_000),
            "{ttl:?}"
        );
    }
    let verdict = limiter.count(&counted).await.unwrap();
    assert!(verdict.usage().iter().all(|u| u.remaining() == 1_000 - 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connection_is_replaced() {
    let server = start(RedisServerOptions::default());
    let relay = Relay::start(server.port()).await;
    let limiter = Limiter::new(RedisStore::open(&relay.url()).unwrap());
    assert_healthy(&limiter, "before the silence").await;
    assert_eq!(relay.connections(), 1);

    relay.silence_open_connections();
    let started = Instant::now();
    let mut checks = 0;
    loop {
        let limits = limits(4);
        let (verdict, _) = timed("silent connection: within", limiter.within(&limits)).await;
        checks += 1;
        if !verdict.is_degraded() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still degraded after {checks} checks"
        );
    }
    println!(
        "reconnected after {:?} and {checks} checks",
        started.elapsed()
    );
    assert_eq!(relay.connections(), 2);
    assert_healthy(&limiter, "after the reconnect").await;
}

/// The store waits for nothing longer than the limiter's policy allows: a
/// limiter of one 25 ms attempt, against a server that accepts connections
/// and never answers, gives up the connection attempt its check started
/// within that budget (the default policy's would hold it 350 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_policy_bounds_the_connection_attempt_its_check_starts() {
    let frozen = Frozen::start(0).await;
    let url = format!("redis://127.0.0.1:{}", frozen.port());
    let store = RedisStore::open(&url).unwrap();
    assert_a_short_check_gives_up_in_time(store, &limits(2), &frozen, "redis").await;
}

/// A connection that stops answering is remade after the check budget of
/// the call that found it silent: under a limiter of one 25 ms attempt,
/// checks made every 10 ms succeed again through a new connection within
/// that budget (the default policy's would keep the silent one 350 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_policy_bounds_how_long_a_silent_connection_is_kept() {
    let server = start(RedisServerOptions::default());
    let relay = Relay::start(server.port()).await;
    let limiter = Limiter::builder(RedisStore::open(&relay.url()).unwrap())
        .retry(SHORT)
        .build();
    assert_healthy(&limiter, "before the silence").await;
    relay.silence_open_connections();
    let started = Instant::now();
    let mut checks = 0;
    while limiter.count(&limits(2)).await.is_err() {
        checks += 1;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still failing after {checks} checks"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    println!("reconnected after {took:?} and {checks} failed checks");
    assert!(relay.connections() >= 2, "never reconnected");
    assert!(
        took < SHORT_BOUND,
        "the silent connection was kept {took:?}"
    );
}
