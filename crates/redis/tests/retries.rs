//! Exact under pressure, on real servers (TCP and the REST path): a reply
//! held back past an attempt's share of the budget is awaited and applied
//! once; a connection broken after the server applied a call is recognised
//! on retry by the call's id; a breaker opens on a killed server and
//! closes when it is back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::upstash::TOKEN;
use support::upstash::proxy::Proxy;
use support::{admin, limit, stored};
use tollgate_core::{BreakerPolicy, CounterStore, Error, Limit, Limiter, RetryPolicy};
use tollgate_redis::{RedisStore, UpstashStore};
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::relay::Relay;

/// What a check under the default policy found, and the stored count of
/// its limit.
async fn reserve_once(
    store: impl CounterStore,
    limit: &Limit,
    server: &RedisServer,
) -> (bool, String) {
    let limiter = Limiter::new(store);
    let verdict = limiter.reserve(std::slice::from_ref(limit)).await.unwrap();
    let key = limit.counter_key(limit.rule().window().index(now()));
    let count = stored(&mut admin(&server.url()).await, &key).await;
    (verdict.is_allowed(), count.unwrap_or_default())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Held back 150 ms, three times an attempt's 50 ms: the old limiter
/// retried at 50 ms, and the retry found the counter full (max 1).
const HELD: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_held_past_an_attempts_share_is_awaited_and_applied_once() {
    let server = RedisServer::start();
    let relay = Relay::start(server.port()).await;
    let store = RedisStore::open(&relay.url()).unwrap();
    // Connect and load the script first, then hold replies back.
    let warm = limit("warm", 10);
    reserve_once(store.clone(), &warm, &server).await;
    relay.delay_replies(HELD);
    let one = limit("held", 1);
    let before = relay.turns();
    let (allowed, count) = reserve_once(store, &one, &server).await;
    assert!(
        allowed,
        "a slow reply was retried and refused by its own first attempt"
    );
    assert_eq!(count, "1");
    assert_eq!(relay.turns() - before, 1, "a slow reply was retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_broken_after_the_write_is_recognised_on_retry() {
    let server = RedisServer::start();
    let relay = Relay::start(server.port()).await;
    let store = RedisStore::open(&relay.url()).unwrap();
    let warm = limit("warm", 10);
    reserve_once(store.clone(), &warm, &server).await;
    relay.break_next_reply();
    let one = limit("broken", 1);
    let before = relay.turns();
    let (allowed, count) = reserve_once(store, &one, &server).await;
    assert!(allowed, "the retry of an applied reservation was refused");
    assert_eq!(count, "1", "the retry applied the reservation again");
    assert!(
        relay.turns() - before >= 2,
        "the broken call was not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_rest_a_held_reply_is_applied_once_and_a_broken_one_recognised() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.url());
    let relay = Relay::start(proxy.port()).await;
    let store = UpstashStore::open(&relay.http_url(), TOKEN).unwrap();
    let warm = limit("warm", 10);
    reserve_once(store.clone(), &warm, &server).await;

    relay.delay_replies(HELD);
    let held = limit("held", 1);
    let (allowed, count) = reserve_once(store.clone(), &held, &server).await;
    assert!(allowed, "a slow REST reply was retried and refused");
    assert_eq!(count, "1");
    relay.delay_replies(Duration::ZERO);

    relay.break_next_reply();
    let broken = limit("broken", 1);
    let (allowed, count) = reserve_once(store, &broken, &server).await;
    assert!(
        allowed,
        "the retry of an applied REST reservation was refused"
    );
    assert_eq!(count, "1", "the REST retry applied the reservation again");
}

/// Checks fail-closed until one is refused as unavailable by the breaker,
/// each within `bound`; how many it took.
async fn until_the_breaker_opens(limiter: &Limiter, limit: &Limit) -> usize {
    for n in 1..=100 {
        match limiter.reserve(std::slice::from_ref(limit)).await {
            Err(Error::Unavailable(err)) if err.kind() == "breaker-open" => return n,
            Err(Error::Unavailable(_)) => {}
            other => panic!("a check against a dead store: {other:?}"),
        }
    }
    panic!("the breaker never opened")
}

/// While open: answered at once, without the store.
async fn assert_answered_at_once(limiter: &Limiter, limit: &Limit) {
    let started = Instant::now();
    for _ in 0..50 {
        let result = limiter.reserve(std::slice::from_ref(limit)).await;
        assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
        let within = limiter.within(std::slice::from_ref(limit)).await;
        assert!(within.is_degraded(), "fail-open is not allowed degraded");
    }
    let took = started.elapsed();
    println!("100 checks with the breaker open: {took:?}");
    assert!(
        took < Duration::from_millis(200),
        "checks waited for a dead store: {took:?}"
    );
}

/// Checks until one reaches the store again (a probe goes every 200 ms).
async fn until_the_store_answers(limiter: &Limiter, limit: &Limit) -> Duration {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if limiter.reserve(std::slice::from_ref(limit)).await.is_ok() {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the breaker never closed")
}

fn short() -> RetryPolicy {
    RetryPolicy {
        retries: 2,
        delay: Duration::from_millis(20),
        timeout: Duration::from_millis(50),
    }
}

/// A limiter over `store` under [`short`] and the default breaker: allowed,
/// then, once `stop` took the store away, the breaker opens within a second
/// and answers at once; once `restart` brought it back, checks reach it
/// again and are allowed.
async fn breaker_round_trip(store: impl CounterStore, stop: impl FnOnce(), restart: impl FnOnce()) {
    let limiter = Limiter::builder(store)
        .retry(short())
        .breaker(BreakerPolicy::default())
        .build();
    let one = limit("breaker", 100);
    let allowed = |limiter: &Limiter| {
        let one = one.clone();
        let limiter = limiter.clone();
        async move { limiter.reserve(&[one]).await.unwrap().is_allowed() }
    };
    assert!(allowed(&limiter).await);
    stop();
    let stopped = Instant::now();
    let checks = until_the_breaker_opens(&limiter, &one).await;
    let took = stopped.elapsed();
    println!("the breaker opened at check {checks}, {took:?} after the store went");
    assert!(
        took < Duration::from_secs(1),
        "failures over 500 ms open it, not {took:?}"
    );
    assert_answered_at_once(&limiter, &one).await;
    restart();
    let back = until_the_store_answers(&limiter, &one).await;
    println!("the first check through after the restart: {back:?}");
    assert!(allowed(&limiter).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_on_a_killed_server_and_closes_when_it_is_back() {
    let server = std::cell::RefCell::new(RedisServer::start());
    server.borrow().require_private("kill");
    let store = RedisStore::open(&server.borrow().url()).unwrap();
    let (stop, restart) = (
        || server.borrow_mut().stop(),
        || server.borrow_mut().restart(),
    );
    breaker_round_trip(store, stop, restart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_on_a_killed_rest_proxy_and_closes_when_it_is_back() {
    let server = RedisServer::start();
    let proxy = std::cell::RefCell::new(Proxy::start(&server.url()));
    let store = UpstashStore::open(&proxy.borrow().url(), TOKEN).unwrap();
    let (stop, restart) = (
        || proxy.borrow_mut().stop(),
        || proxy.borrow_mut().restart(),
    );
    breaker_round_trip(store, stop, restart).await;
}

/// A call's record is its id's field in the hash of its deadline's 100 ms
/// and its lifetime (twice the check's budget and four skew margins: 780
/// ms under the default policy), which lives twice that lifetime and 100
/// ms after the write that made it: the whole time any attempt of the
/// check, or a give-back of it, can look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_record_is_kept_twice_the_check_budget_and_the_skew_margin() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let id = tollgate_core::CheckId::new();
    let counter = support::counter("record", 1, 10);
    let budget = tollgate_core::Deadline::after(Duration::from_millis(350));
    store
        .count(std::slice::from_ref(&counter), id, budget)
        .await
        .unwrap();
    let key = format!(
        "{}780.{}",
        tollgate_redis::RECORD_PREFIX,
        budget.unix_millis() / 100
    );
    let mut admin = admin(&server.url()).await;
    let redis::Value::Int(left) = support::run(&mut admin, &["PTTL", &key]).await else {
        panic!("PTTL is not a number")
    };
    // Kept from this first write: 1,660 ms, less the time to read it.
    assert!(
        (1_560..=1_660).contains(&left),
        "the record lives {left} ms"
    );
    let field = id.to_string();
    let recorded = support::run(&mut admin, &["HGET", &key, &field]).await;
    assert_eq!(recorded, redis::Value::BulkString(b"1".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_past_the_deadline_is_answered_its_record_and_writes_nothing() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let key = support::counter("late-retry", 1, 10).key;
    // The hash of records, and the call's field there.
    let hash = format!(
        "{}780.{}",
        tollgate_redis::RECORD_PREFIX,
        tollgate_test_support::unique()
    );
    let record = tollgate_core::CheckId::new().to_string();
    let eval = |id: &str, cutoff: u64| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(tollgate_redis::scripts::CHECK)
            .arg(2)
            .arg(&key)
            .arg(&hash)
            .arg(1)
            .arg(1_560)
            .arg(1)
            .arg(id)
            .arg("c1.1")
            .arg(cutoff)
            .arg("60000:3");
        cmd
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let first: Vec<Vec<u64>> = eval(&record, now + 10_000)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(first, [[3]]);
    let late: redis::Value = eval(&record, now - 1)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        late,
        redis::Value::Array(vec![redis::Value::Array(vec![redis::Value::Int(3)])]),
        "a late retry of an applied call is not answered its record"
    );
    assert_eq!(stored(&mut admin, &key).await.as_deref(), Some("3"));
    let fresh = tollgate_core::CheckId::new().to_string();
    let refused: redis::Value = eval(&fresh, now - 1).query_async(&mut admin).await.unwrap();
    assert_eq!(
        refused,
        redis::Value::Array(vec![redis::Value::SimpleString("DEADLINE".into())])
    );
    assert_eq!(stored(&mut admin, &key).await.as_deref(), Some("3"));
}
