//! Racing callers on counters that do not exist yet, across several stores
//! (pools) on the binary's shared server: READ COMMITTED, row locks and
//! `ON CONFLICT` must never over-admit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;
use tollgate_core::{CheckId, Counter, CounterStore, Deadline};
use tollgate_postgres::PostgresStore;

const STORES: usize = 4;
const TASKS_PER_STORE: usize = 12;

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(10))
}

fn counters(keys: &[String], max: u64, cost: u64) -> Vec<Counter> {
    keys.iter()
        .map(|key| Counter {
            key: key.clone(),
            ttl: Duration::from_secs(600),
            cost,
            max,
            floor: 0,
            prior: None,
            lease: false,
        })
        .collect()
}

async fn stores(schema: &str) -> Vec<PostgresStore> {
    let url = support::server().url();
    let mut stores = Vec::new();
    for _ in 0..STORES {
        stores.push(support::open(&url, schema).await);
    }
    stores
}

/// Runs `call` once on every task of every store, all released together.
async fn race<T, F, Fut>(stores: &[PostgresStore], call: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, PostgresStore) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let tasks = STORES * TASKS_PER_STORE;
    let start = Arc::new(Barrier::new(tasks));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let run = call(i, stores[i % stores.len()].clone());
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                run.await
            })
        })
        .collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_reservations_on_new_counters_admit_exactly_max() {
    let schema = support::unique_schema();
    let stores = stores(&schema).await;
    const MAX: u64 = 7;
    for round in 0..6 {
        // Four counters, none of them stored yet: every caller inserts.
        let keys: Vec<String> = (0..4)
            .map(|i| format!("limit:new:{}:{i}", tollgate_test_support::unique()))
            .collect();
        let batch = counters(&keys, MAX, 1);
        let results = race(&stores, move |_, store| {
            let batch = batch.clone();
            async move { store.reserve(&batch, CheckId::new(), deadline()).await }
        })
        .await;
        let mut applied = 0;
        for result in results {
            let reservation = result.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(
                reservation.counts.iter().all(|&c| c <= MAX),
                "{reservation:?}"
            );
            applied += u64::from(reservation.applied);
        }
        assert_eq!(applied, MAX, "round {round}: reservations applied");
        let counts = stores[0].get(&keys, deadline()).await.unwrap();
        assert_eq!(counts, [MAX; 4], "round {round}: every counter holds max");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_counts_on_a_new_counter_lose_no_increment() {
    let schema = support::unique_schema();
    let stores = stores(&schema).await;
    let key = format!("limit:new:{}", tollgate_test_support::unique());
    let batch = counters(std::slice::from_ref(&key), 10, 3);
    let results = race(&stores, move |_, store| {
        let batch = batch.clone();
        async move {
            store
                .count(&batch, CheckId::new(), deadline())
                .await
                .unwrap()[0]
        }
    })
    .await;
    let calls = (STORES * TASKS_PER_STORE) as u64;
    let mut seen = results.clone();
    seen.sort_unstable();
    let expected: Vec<u64> = (1..=calls).map(|n| 3 * n).collect();
    assert_eq!(seen, expected, "every caller saw its own new count, once");
    let stored = stores[0].get(&[key], deadline()).await.unwrap();
    assert_eq!(stored, [3 * calls]);
}

/// Counts racing reservations on the same new counters: a reservation is
/// applied only onto counts that leave it within max, whatever the counts
/// did meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_racing_counts_never_go_past_max() {
    let schema = support::unique_schema();
    let stores = stores(&schema).await;
    const MAX: u64 = 20;
    for round in 0..4 {
        let keys: Vec<String> = (0..3)
            .map(|i| format!("limit:mixed:{}:{i}", tollgate_test_support::unique()))
            .collect();
        let reserve = counters(&keys, MAX, 2);
        let count = counters(&keys[1..2], MAX, 1);
        let results = race(&stores, move |i, store| {
            let (reserve, count) = (reserve.clone(), count.clone());
            async move {
                if i % 2 == 0 {
                    Some(
                        store
                            .reserve(&reserve, CheckId::new(), deadline())
                            .await
                            .unwrap(),
                    )
                } else {
                    store
                        .count(&count, CheckId::new(), deadline())
                        .await
                        .unwrap();
                    None
                }
            }
        })
        .await;
        for reservation in results.into_iter().flatten() {
            if reservation.applied {
                assert!(
                    reservation.counts.iter().all(|&c| c <= MAX),
                    "round {round}: applied past max: {reservation:?}"
                );
            }
        }
    }
}

/// A count that Postgres picks as a deadlock's victim (here: another
/// transaction holds the count's second counter and then waits for its
/// first) rolled back whole, so the store runs it again once the other
/// transaction is done: the caller gets its counts, applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_picked_as_a_deadlocks_victim_is_run_again() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let unique = tollgate_test_support::unique();
    let keys = [
        format!("limit:dl:{unique}:a"),
        format!("limit:dl:{unique}:b"),
    ];
    let batch = counters(&keys, 100, 1);
    store
        .count(&batch, CheckId::new(), deadline())
        .await
        .unwrap();

    let mut client = support::client(&url).await;
    let other = client.transaction().await.unwrap();
    let lock = format!("UPDATE \"{schema}\".counters SET value = value WHERE key = $1");
    other.execute(&lock, &[&keys[1].as_bytes()]).await.unwrap();
    // The count locks a, then waits for b.
    let started = std::time::Instant::now();
    let count = tokio::spawn({
        let (store, batch) = (store.clone(), batch.clone());
        async move { store.count(&batch, CheckId::new(), deadline()).await }
    });
    let watcher = support::client(&url).await;
    let waiting = "SELECT count(*) FROM pg_stat_activity \
        WHERE wait_event_type = 'Lock' AND position($1 in query) > 0";
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = watcher.query_one(waiting, &[&schema]).await.unwrap();
        if row.get::<_, i64>(0) > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the count never waited for b"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Waiting for a closes the cycle; the count, waiting longer, finds it
    // after deadlock_timeout (1 s) and is rolled back.
    other.execute(&lock, &[&keys[0].as_bytes()]).await.unwrap();
    other.commit().await.unwrap();
    let counted = count.await.unwrap();
    assert_eq!(counted.map_err(|e| e.to_string()), Ok(vec![2, 2]));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "no deadlock: answered in {:?}",
        started.elapsed()
    );
    assert_eq!(
        store.get(&keys, deadline()).await.unwrap(),
        [2, 2],
        "applied once"
    );
}
