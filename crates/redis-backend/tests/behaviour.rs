//! What the Redis store sends and how it reads Redis: round trips per check,
//! key format, sharing one server between stores, error replies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use support::relay::Relay;
use support::{admin, limit, limits, run};
use tollgate_core::{Clock, Counter, CounterStore, Limiter, ManualClock, StoreError};
use tollgate_redis::{RedisOptions, RedisStore};
use tollgate_test_support::redis_server::RedisServer;

/// `INFO commandstats` as command → calls, leaving out the test's own commands.
async fn command_calls(admin: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, u64> {
    let Value::BulkString(info) = run(admin, &["INFO", "commandstats"]).await else {
        panic!("INFO is not a bulk string");
    };
    String::from_utf8(info)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().unwrap()))
        })
        .filter(|(name, _)| name != "config|resetstat" && name != "info")
        .collect()
}

fn calls(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs
        .iter()
        .map(|(name, n)| ((*name).to_owned(), *n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_of_four_limits_is_one_round_trip() {
    const CHECKS: u64 = 20;
    let server = RedisServer::start();
    server.require_private("reset the statistics of");
    let relay = Relay::start(server.port()).await;
    let store = RedisStore::open(&relay.url()).unwrap();
    let limiter = Limiter::with_parts(store, ManualClock::starting_now());
    let limits = limits(4);
    let mut admin = admin(&server.url()).await;
    // Warm up: connect, and load the script once.
    limiter.count(&limits).await.unwrap();
    limiter.reserve(&limits).await.unwrap();

    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let before = relay.turns();
    for _ in 0..CHECKS {
        assert!(limiter.count(&limits).await.unwrap().is_allowed());
    }
    let turns = relay.turns() - before;
    let stats = command_calls(&mut admin).await;
    println!("count × {CHECKS}: {turns} round trips, commands {stats:?}");
    assert_eq!(turns, CHECKS, "round trips for {CHECKS} counts");
    let n = CHECKS;
    assert_eq!(
        stats,
        calls(&[
            ("exec", n),
            ("incr", 4 * n),
            ("multi", n),
            ("pexpire", 4 * n)
        ])
    );

    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let before = relay.turns();
    for _ in 0..CHECKS {
        assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
    }
    let turns = relay.turns() - before;
    let stats = command_calls(&mut admin).await;
    println!("reserve × {CHECKS}: {turns} round trips, commands {stats:?}");
    assert_eq!(turns, CHECKS, "round trips for {CHECKS} reservations");
    assert_eq!(
        stats,
        calls(&[
            ("evalsha", n),
            ("get", 4 * n),
            ("incr", 4 * n),
            ("pexpire", 4 * n)
        ])
    );

    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let before = relay.turns();
    limiter.remaining(&limits).await.unwrap();
    let deliveries = limiter.deliveries();
    assert!(
        deliveries
            .first_delivery(&tollgate_test_support::unique())
            .await
            .unwrap()
    );
    assert!(limiter.reset(&limits[0]).await.unwrap());
    let turns = relay.turns() - before;
    let stats = command_calls(&mut admin).await;
    assert_eq!(
        turns, 3,
        "remaining, first_delivery and reset are one round trip each"
    );
    assert_eq!(stats, calls(&[("del", 1), ("mget", 1), ("set", 1)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_limit_key_window_unless_prefixed() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_now();
    let plain = Limiter::with_parts(RedisStore::open(&server.url()).unwrap(), clock.clone());
    let options = RedisOptions::default().key_prefix("tenant-a:");
    let prefixed = Limiter::with_parts(
        RedisStore::open_with(&server.url(), options).unwrap(),
        clock.clone(),
    );
    let limit = limit("ask", 15);
    let key = limit.counter_key(limit.rule().window().index(clock.now().as_secs()));
    assert!(key.starts_with("limit:ask:"));

    plain.count(std::slice::from_ref(&limit)).await.unwrap();
    for _ in 0..3 {
        prefixed.count(std::slice::from_ref(&limit)).await.unwrap();
    }
    let mut admin = admin(&server.url()).await;
    assert_eq!(
        run(&mut admin, &["GET", &key]).await,
        Value::BulkString(b"1".to_vec())
    );
    let other = format!("tenant-a:{key}");
    assert_eq!(
        run(&mut admin, &["GET", &other]).await,
        Value::BulkString(b"3".to_vec())
    );
    let left = prefixed
        .remaining(std::slice::from_ref(&limit))
        .await
        .unwrap();
    assert_eq!(left[0].remaining(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_server_never_allow_more_than_max() {
    const MAX: u64 = 10;
    const CALLERS: usize = 25;
    let server = RedisServer::start();
    let clock = ManualClock::starting_now();
    let stores = [
        RedisStore::open(&server.url()).unwrap(),
        RedisStore::open(&server.url()).unwrap(),
    ];
    let limiters: Vec<Limiter> = stores
        .iter()
        .map(|s| Limiter::with_parts(s.clone(), clock.clone()))
        .collect();
    for reserve in [false, true] {
        let limit = Arc::new(limit(if reserve { "reserved" } else { "counted" }, MAX));
        let mut calls = Vec::new();
        for i in 0..2 * CALLERS {
            let limiter = limiters[i % 2].clone();
            let limit = Arc::clone(&limit);
            calls.push(tokio::spawn(async move {
                let limits = [(*limit).clone()];
                let verdict = if reserve {
                    limiter.reserve(&limits).await
                } else {
                    limiter.count(&limits).await
                };
                verdict.unwrap().is_allowed()
            }));
        }
        let mut allowed = 0;
        for call in calls {
            allowed += u64::from(call.await.unwrap());
        }
        assert_eq!(
            allowed, MAX,
            "allowed calls across two stores (reserve: {reserve})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_is_busy_and_a_wrong_type_is_a_backend_failure() {
    let server = RedisServer::start();
    server.require_private("make a replica of");
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let counter = |key: &str| Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(60),
        max: 5,
    };
    let id = tollgate_test_support::unique();
    let batch = [
        counter(&format!("limit:a:{id}:1")),
        counter(&format!("limit:b:{id}:1")),
    ];
    assert_eq!(store.increment(&batch).await.unwrap(), vec![1, 1]);

    // A replica of a master that is not there: every write is READONLY.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    run(
        &mut admin,
        &["REPLICAOF", "127.0.0.1", &nowhere.to_string()],
    )
    .await;
    let err = store.increment(&batch).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Busy(_)),
        "increment on a replica: {err:?}"
    );
    let err = store.increment_within(&batch).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Busy(_)),
        "reserve on a replica: {err:?}"
    );
    let err = store
        .set_if_absent(&format!("dedup:{id}"), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Busy(_)),
        "set on a replica: {err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(
        store.get(&[batch[0].key.clone()]).await.unwrap(),
        vec![1],
        "reads still work"
    );
    run(&mut admin, &["REPLICAOF", "NO", "ONE"]).await;
    assert_eq!(store.increment(&batch).await.unwrap(), vec![2, 2]);

    // A counter key holding a list: a permanent failure, never a panic.
    run(&mut admin, &["DEL", &batch[1].key]).await;
    run(&mut admin, &["LPUSH", &batch[1].key, "x"]).await;
    for err in [
        store.increment(&batch).await.unwrap_err(),
        store.increment_within(&batch).await.unwrap_err(),
    ] {
        assert!(!err.is_transient(), "{err:?}");
        assert!(
            matches!(err, StoreError::Backend(_) | StoreError::InvalidReply(_)),
            "{err:?}"
        );
    }
    // MGET reads a list as nil, so 0; a counter holding text is an invalid reply.
    assert_eq!(store.get(&[batch[1].key.clone()]).await.unwrap(), vec![0]);
    run(&mut admin, &["SET", &batch[0].key, "twelve"]).await;
    let err = store.get(&[batch[0].key.clone()]).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidReply(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_over_a_malformed_counter_changes_nothing() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let counter = |key: String| Counter {
        key,
        ttl: Duration::from_secs(60),
        max: 5,
    };
    // Values Lua reads as numbers but INCR refuses: the refusal must come
    // before the first INCR, or the counters ahead of it stay incremented.
    for (i, text) in ["1.5", " 3", "07", "1e2", "-2", "0x10"]
        .into_iter()
        .enumerate()
    {
        let batch = [
            counter(format!("limit:fine:{id}:{i}")),
            counter(format!("limit:bad:{id}:{i}")),
        ];
        run(&mut admin, &["SET", &batch[1].key, text]).await;
        let err = store.increment_within(&batch).await.unwrap_err();
        assert!(!err.is_transient(), "{text:?}: {err:?}");
        assert_eq!(
            run(&mut admin, &["EXISTS", &batch[0].key]).await,
            Value::Int(0),
            "a reservation refused over {text:?} incremented another counter"
        );
    }
}
