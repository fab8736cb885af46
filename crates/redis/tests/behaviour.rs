//! What the Redis store sends and how it reads Redis: round trips per check,
//! key format, sharing one server between stores, error replies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use support::{admin, command_calls, counter, deadline, info_field, limit, limits, run, stored};
use tollgate_core::{
    CheckId, Claim, Clock, Counter, CounterStore, Deliveries, Limiter, ManualClock, MarkStore,
    Prefixed, StoreError,
};
use tollgate_redis::RedisStore;
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::relay::Relay;

/// Command counts as `INFO commandstats` shows them: a command never
/// called is not there.
fn calls(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| ((*name).to_owned(), *n))
        .collect()
}

/// The hashes of records on the server.
async fn record_hashes(admin: &mut redis::aio::MultiplexedConnection) -> BTreeSet<String> {
    let pattern = format!("{}*", tollgate_redis::RECORD_PREFIX);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(admin)
        .await
        .unwrap();
    keys.into_iter().collect()
}

/// Every hash of records on the server has a lifetime: none is left to
/// live for ever.
async fn assert_every_hash_expires(admin: &mut redis::aio::MultiplexedConnection) {
    let hashes = record_hashes(admin).await;
    assert!(!hashes.is_empty(), "no hash of records to look at");
    for hash in hashes {
        let left = run(admin, &["PTTL", &hash]).await;
        assert!(
            matches!(left, Value::Int(ms) if ms > 0),
            "{hash} has no lifetime: {left:?}"
        );
    }
}

/// How many hashes of records are in `after` and not in `before`: each
/// got its lifetime (`PEXPIRE`) once, when the script created it. (A hash
/// takes writes for at most a call's budget and 100 ms, and lives over a
/// second: none of `before` expires and comes back within a test.)
fn new_hashes(before: &BTreeSet<String>, after: &BTreeSet<String>) -> u64 {
    after.difference(before).count() as u64
}

/// The commands of `times` refunds of `n` counters, one script call each:
/// each counter read and written, and the call's record looked up in its
/// hash and written there; `hashes` of the hashes new.
fn script_calls(times: u64, n: u64, hashes: u64) -> BTreeMap<String, u64> {
    calls(&[
        ("evalsha", times),
        ("get", n * times),
        ("hmget", times),
        ("hset", times),
        ("pexpire", hashes),
        ("set", n * times),
        ("time", times),
    ])
}

/// The commands of `times` counts or reservations of `n` counters, one
/// script call each, `created` of the counters and hashes of records new:
/// one `INCRBY` per counter (and a `PEXPIRE` for a new one), the call's
/// record looked up in its hash and written there (and a `PEXPIRE` for a
/// new hash).
fn lean_calls(times: u64, n: u64, created: u64) -> BTreeMap<String, u64> {
    calls(&[
        ("evalsha", times),
        ("hmget", times),
        ("hset", times),
        ("incrby", n * times),
        ("pexpire", created),
        ("time", times),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_of_four_limits_is_one_round_trip() {
    const CHECKS: u64 = 20;
    let server = RedisServer::start();
    server.require_private("reset the statistics of");
    let relay = Relay::start(server.port()).await;
    let store = RedisStore::open(&relay.url()).unwrap();
    let clock = ManualClock::starting_now();
    let limiter = Limiter::builder(store.clone()).clock(clock.clone()).build();
    let deliveries = Deliveries::new(store.clone(), "github-delivery:").unwrap();
    let limits = limits(4);
    let mut admin = admin(&server.url()).await;
    // Warm up: connect, and load each script once.
    limiter.count(&limits).await.unwrap();
    limiter.reserve(&limits).await.unwrap();
    let now = clock.now().as_secs();
    let counters: Vec<Counter> = limits.iter().map(|l| l.counter(now)).collect();
    store
        .refund(&counters, CheckId::new(), deadline())
        .await
        .unwrap();
    let warm = deliveries.begin("warm-up").await.unwrap().unwrap();
    warm.complete().await.unwrap();
    limiter.reset(&limits[3]).await.unwrap();

    let hashes = record_hashes(&mut admin).await;
    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let before = relay.turns();
    for _ in 0..CHECKS {
        assert!(limiter.count(&limits).await.unwrap().is_allowed());
    }
    let turns = relay.turns() - before;
    let stats = command_calls(&mut admin).await;
    let new = new_hashes(&hashes, &record_hashes(&mut admin).await);
    println!("count × {CHECKS}: {turns} round trips, {new} new hashes, commands {stats:?}");
    assert_eq!(turns, CHECKS, "round trips for {CHECKS} counts");
    // The reset counter is created again, and given its lifetime, once.
    assert_eq!(stats, lean_calls(CHECKS, 4, 1 + new));

    let hashes = record_hashes(&mut admin).await;
    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let before = relay.turns();
    for _ in 0..CHECKS {
        assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
    }
    let turns = relay.turns() - before;
    let stats = command_calls(&mut admin).await;
    let new = new_hashes(&hashes, &record_hashes(&mut admin).await);
    println!("reserve × {CHECKS}: {turns} round trips, {new} new hashes, commands {stats:?}");
    assert_eq!(turns, CHECKS, "round trips for {CHECKS} reservations");
    assert_eq!(stats, lean_calls(CHECKS, 4, new));

    let hashes = record_hashes(&mut admin).await;
    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let before = relay.turns();
    for _ in 0..CHECKS {
        store
            .refund(&counters, CheckId::new(), deadline())
            .await
            .unwrap();
    }
    let turns = relay.turns() - before;
    let stats = command_calls(&mut admin).await;
    let new = new_hashes(&hashes, &record_hashes(&mut admin).await);
    println!("refund × {CHECKS}: {turns} round trips, {new} new hashes, commands {stats:?}");
    assert_eq!(turns, CHECKS, "round trips for {CHECKS} refunds");
    assert_eq!(stats, script_calls(CHECKS, 4, new));
    assert_every_hash_expires(&mut admin).await;

    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let before = relay.turns();
    limiter.remaining(&limits).await.unwrap();
    let delivery = deliveries
        .begin(&tollgate_test_support::unique())
        .await
        .unwrap()
        .expect("a first delivery");
    assert!(limiter.reset(&limits[0]).await.unwrap());
    let turns = relay.turns() - before;
    let stats = command_calls(&mut admin).await;
    assert_eq!(
        turns, 3,
        "remaining, begin and reset are one round trip each"
    );
    assert_eq!(
        stats,
        calls(&[
            ("del", 1),
            ("evalsha", 2),
            ("get", 1),
            ("mget", 1),
            ("set", 1),
            ("time", 2)
        ])
    );
    delivery.complete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_limit_key_window_unless_prefixed() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_now();
    let plain = Limiter::builder(RedisStore::open(&server.url()).unwrap())
        .clock(clock.clone())
        .build();
    let tenant = Prefixed::new("tenant-a:", RedisStore::open(&server.url()).unwrap());
    let prefixed = Limiter::builder(tenant).clock(clock.clone()).build();
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
        .map(|s| Limiter::builder(s.clone()).clock(clock.clone()).build())
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
async fn a_demoted_server_is_busy_its_connection_is_replaced_and_writes_resume_when_promoted() {
    let server = RedisServer::start();
    server.require_private("make a replica of");
    let primary = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let batch = [counter("a", 1, 5), counter("b", 1, 5)];
    assert_eq!(
        store
            .count(&batch, CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![1, 1]
    );
    let connections = |admin: &mut redis::aio::MultiplexedConnection| {
        let mut admin = admin.clone();
        async move { info_field(&mut admin, "stats", "total_connections_received").await }
    };
    let accepted = connections(&mut admin).await;
    assert_eq!(store.connections_made(), 1);

    // A failover demotes this server: it replicates another, every write is READONLY.
    let port = primary.port().to_string();
    run(&mut admin, &["REPLICAOF", "127.0.0.1", &port]).await;
    let id = tollgate_test_support::unique();
    let mark = format!("github-delivery:{id}");
    let mut made = store.connections_made();
    for what in ["count", "reserve", "refund", "claim", "delete"] {
        let err = match what {
            "count" => store
                .count(&batch, CheckId::new(), deadline())
                .await
                .map(drop),
            "reserve" => store
                .reserve(&batch, CheckId::new(), deadline())
                .await
                .map(drop),
            "refund" => store
                .refund(&batch, CheckId::new(), deadline())
                .await
                .map(drop),
            "claim" => store
                .claim(&mark, "token", Duration::from_secs(5), deadline())
                .await
                .map(drop),
            _ => store.delete(&batch[0].key, deadline()).await.map(drop),
        }
        .unwrap_err();
        assert!(
            matches!(err, StoreError::Busy(_)),
            "{what} on a replica: {err:?}"
        );
        assert!(err.is_transient());
        // Each READONLY reply drops the connection, so every later call
        // makes a new one (the first was answered on the old one).
        let expected = if what == "count" { made } else { made + 1 };
        assert_eq!(
            store.connections_made(),
            expected,
            "{what}: connections made"
        );
        made = expected;
    }
    assert!(
        connections(&mut admin).await >= accepted + 4,
        "the server saw no new connections"
    );
    assert!(
        store.get(&[batch[0].key.clone()], deadline()).await.is_ok(),
        "reads still work"
    );

    // Promoted again: the same store writes, on a connection made after the failover.
    run(&mut admin, &["REPLICAOF", "NO", "ONE"]).await;
    let counts = store
        .count(&batch, CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(counts.iter().all(|&n| n >= 1), "{counts:?}");
    assert_eq!(
        store
            .claim(&mark, "token", Duration::from_secs(5), deadline())
            .await
            .unwrap(),
        Claim::Acquired
    );
    assert!(
        store.connections_made() > made,
        "no connection made after the promotion"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_of_another_type_is_a_backend_failure_never_a_panic() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let batch = [counter("a", 1, 5), counter("b", 1, 5)];
    // A counter key holding a list: GET fails with WRONGTYPE before any write.
    run(&mut admin, &["LPUSH", &batch[1].key, "x"]).await;
    for err in [
        store
            .count(&batch, CheckId::new(), deadline())
            .await
            .unwrap_err(),
        store
            .reserve(&batch, CheckId::new(), deadline())
            .await
            .unwrap_err(),
        store
            .refund(&batch, CheckId::new(), deadline())
            .await
            .unwrap_err(),
    ] {
        assert!(!err.is_transient(), "{err:?}");
        assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
    }
    assert_eq!(
        stored(&mut admin, &batch[0].key).await,
        None,
        "a write before the refusal"
    );
    // MGET reads a list as nil, so 0; a counter holding text is an invalid reply.
    assert_eq!(
        store
            .get(&[batch[1].key.clone()], deadline())
            .await
            .unwrap(),
        vec![0]
    );
    run(&mut admin, &["SET", &batch[0].key, "twelve"]).await;
    let err = store
        .get(&[batch[0].key.clone()], deadline())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidReply(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_over_a_malformed_counter_changes_nothing() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    // Values Lua reads as numbers (some that INCRBY accepts) but no count can
    // be: the call must leave every counter as it was, though the counters
    // ahead of it were incremented first. The last two are over 2^53.
    for text in [
        "1.5",
        " 3",
        "07",
        "1e2",
        "-2",
        "0x10",
        "9007199254740993",
        "18446744073709551616",
    ] {
        // A counter that exists, one that does not (an increment would
        // create it), then the bad one: both are taken back.
        let batch = [
            counter("fine", 1, 5),
            counter("fresh", 1, 5),
            counter("bad", 1, 5),
        ];
        run(&mut admin, &["SET", &batch[0].key, "2"]).await;
        run(&mut admin, &["SET", &batch[2].key, text]).await;
        for (what, err) in [
            (
                "count",
                store
                    .count(&batch, CheckId::new(), deadline())
                    .await
                    .unwrap_err(),
            ),
            (
                "reserve",
                store
                    .reserve(&batch, CheckId::new(), deadline())
                    .await
                    .unwrap_err(),
            ),
            (
                "refund",
                store
                    .refund(&batch, CheckId::new(), deadline())
                    .await
                    .unwrap_err(),
            ),
        ] {
            assert!(!err.is_transient(), "{what} over {text:?}: {err:?}");
            assert_eq!(
                stored(&mut admin, &batch[0].key).await.as_deref(),
                Some("2"),
                "a {what} refused over {text:?} changed another counter"
            );
            assert_eq!(
                stored(&mut admin, &batch[1].key).await,
                None,
                "a {what} refused over {text:?} left a counter it created"
            );
            assert_eq!(
                stored(&mut admin, &batch[2].key).await.as_deref(),
                Some(text)
            );
        }
    }
    // 2^53 itself is a count.
    let top = counter("top", 1, 5);
    run(&mut admin, &["SET", &top.key, "9007199254740992"]).await;
    assert_eq!(
        store
            .count(std::slice::from_ref(&top), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![1 << 53]
    );
}

/// Under attack, a caller already over its limit costs no store command:
/// `INFO commandstats` sees nothing for 1,000 refused reservations answered
/// by the limiter's cache, and exactly one script run per allowed call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_callers_under_attack_cost_the_server_nothing() {
    let server = RedisServer::start();
    server.require_private("reset the statistics of");
    let store = RedisStore::open(&server.url()).unwrap();
    let limiter = Limiter::new(store);
    let mut admin = admin(&server.url()).await;
    let attacker = [limit("ask", 15), limit("ask-all", 1_000_000)];
    for _ in 0..15 {
        assert!(limiter.reserve(&attacker).await.unwrap().is_allowed());
    }
    let first = limiter.reserve(&attacker).await.unwrap();
    assert!(
        !first.is_allowed() && !first.is_local(),
        "the store refuses first"
    );
    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    for _ in 0..1_000 {
        let verdict = limiter.reserve(&attacker).await.unwrap();
        assert!(!verdict.is_allowed() && verdict.is_local());
    }
    assert_eq!(
        command_calls(&mut admin).await,
        BTreeMap::new(),
        "refused calls reached the server"
    );
    let visitor = [limit("ask", 15), limit("ask-all", 1_000_000)];
    let hashes = record_hashes(&mut admin).await;
    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    assert!(limiter.reserve(&visitor).await.unwrap().is_allowed());
    let stats = command_calls(&mut admin).await;
    let new = new_hashes(&hashes, &record_hashes(&mut admin).await);
    assert_eq!(stats, lean_calls(1, 2, 2 + new));
    assert_every_hash_expires(&mut admin).await;
}

/// A counter with `floor` (a time in µs), of max 2^53: a GCRA limit's.
fn floored(name: &str, cost: u64, floor: u64) -> Counter {
    Counter {
        floor,
        prior: None,
        lease: false,
        ..counter(name, cost, tollgate_core::MAX_COUNT)
    }
}

/// A count or reservation with a floored counter runs the exact path
/// (`GET`, then `SET` each counter), a floored counter living its ttl past
/// the time it holds, and a counter without a floor in the same call
/// keeping the lifetime it has; a call without floors stays one `INCRBY`
/// per counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_a_floor_is_exact_and_one_without_stays_lean() {
    let server = RedisServer::start();
    server.require_private("reset the statistics of");
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let pttl = |admin: &mut redis::aio::MultiplexedConnection, key: String| {
        let mut admin = admin.clone();
        async move {
            match run(&mut admin, &["PTTL", &key]).await {
                Value::Int(ms) => ms,
                other => panic!("PTTL {key}: {other:?}"),
            }
        }
    };
    let floor = 1_781_524_989_000_000;
    let (time, plain, fresh) = (
        floored("time", 2_000_000, floor),
        counter("plain", 1, 10),
        counter("fresh", 1, 10),
    );
    run(&mut admin, &["SET", &plain.key, "4", "PX", "5000"]).await;
    // Warm up: load the script.
    store
        .count(
            std::slice::from_ref(&counter("warm", 1, 10)),
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();

    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    let batch = [time.clone(), plain.clone(), fresh.clone()];
    let counts = store
        .count(&batch, CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(counts, [floor + 2_000_000, 5, 1]);
    let stats = command_calls(&mut admin).await;
    assert_eq!(stats.get("incrby"), None, "{stats:?}");
    assert_eq!((stats.get("get"), stats.get("set")), (Some(&3), Some(&3)));
    // 60 s and the 2 s the time is ahead of the floor.
    let left = pttl(&mut admin, time.key.clone()).await;
    assert!((61_000..=62_000).contains(&left), "{left} ms");
    let left = pttl(&mut admin, plain.key.clone()).await;
    assert!(
        (1..=5_000).contains(&left),
        "the plain counter's lifetime changed: {left} ms"
    );
    let left = pttl(&mut admin, fresh.key.clone()).await;
    assert!((59_000..=60_000).contains(&left), "{left} ms");

    // A reservation: the floor raised to a later time, the time renewed.
    let later = Counter {
        floor: floor + 10_000_000,
        prior: None,
        lease: false,
        cost: 1_500,
        ..time.clone()
    };
    let reservation = store
        .reserve(&[later.clone(), plain.clone()], CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(reservation.applied);
    assert_eq!(reservation.counts, [floor + 10_001_500, 6]);
    let left = pttl(&mut admin, time.key.clone()).await;
    assert!((59_000..=60_002).contains(&left), "{left} ms");
    let left = pttl(&mut admin, plain.key.clone()).await;
    assert!(
        (1..=5_000).contains(&left),
        "the plain counter's lifetime changed: {left} ms"
    );

    // Without floors: one INCRBY per counter, nothing read or set.
    run(&mut admin, &["CONFIG", "RESETSTAT"]).await;
    store
        .count(&[plain.clone(), fresh.clone()], CheckId::new(), deadline())
        .await
        .unwrap();
    let stats = command_calls(&mut admin).await;
    assert_eq!(stats.get("incrby"), Some(&2), "{stats:?}");
    assert_eq!(
        (stats.get("get"), stats.get("set")),
        (None, None),
        "{stats:?}"
    );
}

/// A call with a floored counter over a value no count can be changes
/// nothing, the counters ahead of it included, and a refund of a floored
/// counter raises it to its floor, leaving an absent one absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floored_write_over_a_malformed_counter_changes_nothing() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    for text in ["1.5", "-2", "07", "9007199254740993", "soon"] {
        let batch = [
            counter("fine", 1, 5),
            floored("fresh", 1_000, 1_000_000),
            floored("bad", 1_000, 1_000_000),
        ];
        run(&mut admin, &["SET", &batch[0].key, "2"]).await;
        run(&mut admin, &["SET", &batch[2].key, text]).await;
        let errors = [
            store
                .count(&batch, CheckId::new(), deadline())
                .await
                .map(drop),
            store
                .reserve(&batch, CheckId::new(), deadline())
                .await
                .map(drop),
            store
                .refund(&batch, CheckId::new(), deadline())
                .await
                .map(drop),
        ];
        for err in errors {
            let err = err.unwrap_err();
            assert!(!err.is_transient(), "over {text:?}: {err:?}");
            assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
            assert_eq!(
                stored(&mut admin, &batch[0].key).await.as_deref(),
                Some("2")
            );
            assert_eq!(stored(&mut admin, &batch[1].key).await, None);
            assert_eq!(
                stored(&mut admin, &batch[2].key).await.as_deref(),
                Some(text)
            );
        }
    }
    // A refund: a floored counter holding 0 is raised to its floor, an
    // absent one stays absent, and the lifetime stays.
    let (zero, absent) = (floored("zero", 5, 700), floored("absent", 5, 700));
    run(&mut admin, &["SET", &zero.key, "0", "PX", "5000"]).await;
    let counts = store
        .refund(&[zero.clone(), absent.clone()], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(counts, [700, 0]);
    assert_eq!(stored(&mut admin, &zero.key).await.as_deref(), Some("700"));
    assert_eq!(stored(&mut admin, &absent.key).await, None);
    let Value::Int(left) = run(&mut admin, &["PTTL", &zero.key]).await else {
        panic!("PTTL");
    };
    assert!(
        (1..=5_000).contains(&left),
        "the refund changed the lifetime: {left}"
    );
}
