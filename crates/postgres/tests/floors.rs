//! Floors on the server: a counter with a floor is raised to it before a
//! cost is added, checked or given back, and gets its lifetime afresh
//! (`Counter::lifetime_at` its new count, by the server's clock) from every
//! count or reservation, while a counter without one in the same batch
//! keeps its own; a refund keeps either's. Through both the plain and the
//! purging statements.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use tokio_postgres::Client;
use tollgate_conformance::Expiry;
use tollgate_core::{CheckId, Counter, CounterStore, Deadline, MAX_COUNT};

/// A floor (a time in µs, as a GCRA limit's).
const FLOOR: u64 = 1_000_000_000;

fn counter(key: &str, ttl_secs: u64, cost: u64, max: u64, floor: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(ttl_secs),
        cost,
        max,
        floor,
        prior: None,
        lease: false,
    }
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(5))
}

/// The expiry of `key` in µs since the epoch, exactly as stored.
async fn expires_at(client: &Client, schema: &str, key: &str) -> i64 {
    let sql = format!(
        "SELECT (extract(epoch FROM expires_at) * 1000000)::bigint \
         FROM \"{schema}\".counters WHERE key = $1"
    );
    client
        .query_one(&sql, &[&key.as_bytes()])
        .await
        .unwrap()
        .get(0)
}

/// Asserts that `key`, just written, lives `ttl` (within what the test's
/// own round trips take).
async fn assert_lives(client: &Client, schema: &str, key: &str, ttl: Duration) {
    match support::expiry(client, schema, key).await {
        Expiry::In(left) => assert!(
            left <= ttl && left + Duration::from_secs(2) >= ttl,
            "{key} lives {left:?}, not {ttl:?}"
        ),
        other => panic!("{key} has no lifetime: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floored_counter_gets_its_lifetime_afresh_and_a_plain_one_beside_it_keeps_its_own() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let client = support::client(&url).await;
    let id = tollgate_test_support::unique();
    let (g, p) = (format!("limit:g:{id}"), format!("limit:p:{id}"));
    let floored = |ttl, cost, floor| counter(&g, ttl, cost, MAX_COUNT, floor);
    let plain = || counter(&p, 60, 1, 100, 0);

    // New: the floor plus the cost, living 60 s past the 5 s it holds ahead.
    let counts = store
        .count(
            &[floored(60, 5_000_000, FLOOR), plain()],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(counts, [FLOOR + 5_000_000, 1]);
    assert_lives(&client, &schema, &g, Duration::from_secs(65)).await;
    assert_lives(&client, &schema, &p, Duration::from_secs(60)).await;
    let plain_expiry = expires_at(&client, &schema, &p).await;

    // A later floor: raised to it, and renewed.
    let later = FLOOR + 10_000_000;
    let counts = store
        .count(
            &[floored(3_600, 5_000_000, later), plain()],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(counts, [later + 5_000_000, 2]);
    assert_lives(&client, &schema, &g, Duration::from_secs(3_605)).await;
    assert_eq!(expires_at(&client, &schema, &p).await, plain_expiry, "kept");

    // A shorter lifetime is set, not only extended; a part of a ms rounds up.
    let reserved = store
        .reserve(
            &[floored(600, 1_500, later), plain()],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert!(reserved.applied);
    assert_eq!(reserved.counts, [later + 5_001_500, 3]);
    assert_lives(&client, &schema, &g, Duration::from_millis(605_002)).await;
    assert_eq!(expires_at(&client, &schema, &p).await, plain_expiry, "kept");

    // A refused reservation changes nothing; a refund keeps the lifetime
    // and stops at the floor.
    let floored_expiry = expires_at(&client, &schema, &g).await;
    let refused = store
        .reserve(
            &[counter(&g, 60, 1, later, later), plain()],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert!(!refused.applied);
    assert_eq!(refused.counts, [later + 5_001_500, 3]);
    let refunded = store
        .refund(
            &[floored(60, 10_000_000, later), counter(&p, 60, 1, 0, 0)],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(refunded, [later, 2]);
    assert_eq!(expires_at(&client, &schema, &g).await, floored_expiry);
    assert_eq!(expires_at(&client, &schema, &p).await, plain_expiry);
    assert_eq!(
        support::stored(&client, &schema, &g).await,
        Some(later as i64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_saturated_floored_counters_and_every_statement_variant() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let client = support::client(&url).await;
    let id = tollgate_test_support::unique();

    // Saturated: the count stays 2^53, the lifetime is still renewed.
    let top = format!("limit:top:{id}");
    let at_top = |ttl| counter(&top, ttl, 5, MAX_COUNT, MAX_COUNT - 1);
    store
        .count(&[at_top(60)], CheckId::new(), deadline())
        .await
        .unwrap();
    let counts = store
        .count(&[at_top(600)], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(counts, [MAX_COUNT]);
    assert_lives(&client, &schema, &top, Duration::from_millis(600_001)).await;

    // Expired, counted or reserved: started again from the floor, as new.
    for (n, reserve) in [(0, false), (1, true)] {
        let key = format!("limit:expired:{n}:{id}");
        let g = |floor| counter(&key, 60, 2_000, MAX_COUNT, floor);
        store
            .count(&[g(FLOOR)], CheckId::new(), deadline())
            .await
            .unwrap();
        client
            .execute(
                &format!(
                    "UPDATE \"{schema}\".counters SET expires_at = now() - interval '1 second' \
                     WHERE key = $1"
                ),
                &[&key.as_bytes()],
            )
            .await
            .unwrap();
        let batch = [g(FLOOR - 1_000_000)];
        let counts = if reserve {
            let reserved = store
                .reserve(&batch, CheckId::new(), deadline())
                .await
                .unwrap();
            assert!(reserved.applied);
            reserved.counts
        } else {
            store
                .count(&batch, CheckId::new(), deadline())
                .await
                .unwrap()
        };
        assert_eq!(counts, [FLOOR - 998_000]);
        assert_lives(&client, &schema, &key, Duration::from_millis(60_002)).await;
    }

    // 96 calls in a row, counts, reservations and refunds in turn: one in
    // 32 runs its statement's purging variant, and 32 is 2 modulo 3, so
    // those three are one of each.
    let (g, p) = (format!("limit:g:{id}"), format!("limit:p:{id}"));
    let (mut tat, mut plain) = (FLOOR, 0);
    for n in 0..96 {
        let batch = [
            counter(&g, 60, 1_000, MAX_COUNT, FLOOR),
            counter(&p, 60, 1, MAX_COUNT, 0),
        ];
        let counts = match n % 3 {
            0 => {
                (tat, plain) = (tat + 1_000, plain + 1);
                store.count(&batch, CheckId::new(), deadline()).await
            }
            1 => {
                (tat, plain) = (tat + 1_000, plain + 1);
                let reserved = store.reserve(&batch, CheckId::new(), deadline()).await;
                assert!(reserved.as_ref().unwrap().applied);
                reserved.map(|r| r.counts)
            }
            _ => {
                (tat, plain) = (tat - 1_000, plain - 1);
                store.refund(&batch, CheckId::new(), deadline()).await
            }
        };
        assert_eq!(counts.unwrap(), [tat, plain], "call {n}");
    }
}
