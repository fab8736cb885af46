//! The connection pool under pressure, the error mapping of a server
//! refusing connections, and the background sweep's lifetime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use tollgate_core::{CheckId, Counter, CounterStore, Deadline, MarkStore, StoreError};
use tollgate_postgres::{PostgresOptions, PostgresStore};

fn counter(key: &str, ttl: Duration) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl,
        cost: 1,
        max: 1_000,
        floor: 0,
        prior: None,
        lease: false,
    }
}

fn long() -> Deadline {
    Deadline::after(Duration::from_secs(5))
}

/// A pool of one connection, held by a call waiting on a row lock: another
/// call waits for the pool only until its deadline and fails as a timeout
/// (no answer by its deadline, which the limiter's breaker counts); once
/// the lock is released, both the held call and new calls succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_pool_times_out_at_the_deadline_and_recovers() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = PostgresStore::open_with(
        &url,
        PostgresOptions::default().schema(&schema).pool_size(1),
    )
    .await
    .unwrap();
    let key = format!("limit:pool:{}", tollgate_test_support::unique());
    let c = counter(&key, Duration::from_secs(600));
    store
        .count(std::slice::from_ref(&c), CheckId::new(), long())
        .await
        .unwrap();

    let mut locker = support::client(&url).await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".counters WHERE key = $1 FOR UPDATE"),
        &[&key.as_bytes()],
    )
    .await
    .unwrap();
    let (s, held_counter) = (store.clone(), c.clone());
    let held = tokio::spawn(async move { s.count(&[held_counter], CheckId::new(), long()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let started = Instant::now();
    let other = format!("limit:pool-other:{}", tollgate_test_support::unique());
    let result = store
        .count(
            &[counter(&other, Duration::from_secs(600))],
            CheckId::new(),
            Deadline::after(Duration::from_millis(100)),
        )
        .await;
    let took = started.elapsed();
    match result {
        Err(err @ StoreError::Timeout(_)) => assert!(err.is_transient()),
        other => panic!("a call on an exhausted pool answered {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(90),
        "it waited for the pool: {took:?}"
    );
    assert!(
        took < Duration::from_millis(500),
        "bounded by its deadline: {took:?}"
    );

    tx.commit().await.unwrap();
    assert_eq!(held.await.unwrap().unwrap(), [2]);
    let after = store
        .count(
            &[counter(&other, Duration::from_secs(600))],
            CheckId::new(),
            long(),
        )
        .await;
    assert_eq!(after.unwrap(), [1], "the pool recovered");
}

/// A server refusing a connection for too many connections (here: the
/// role's connection limit) is a transient busy error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_connections_is_busy() {
    let server = support::server();
    let role = support::unique_schema();
    let schema = support::unique_schema();
    let admin = support::client(&server.url()).await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" LOGIN CONNECTION LIMIT 1; \
             CREATE SCHEMA \"{schema}\" AUTHORIZATION \"{role}\""
        ))
        .await
        .unwrap();
    let url = format!("postgres://{role}@127.0.0.1:{}/postgres", server.port());
    let store = PostgresStore::open_with(
        &url,
        PostgresOptions::default().schema(&schema).pool_size(2),
    )
    .await
    .unwrap();
    // The pool's one connection is taken by a call waiting on a lock; the
    // next call needs a second connection, which the server refuses.
    let key = format!("limit:role:{}", tollgate_test_support::unique());
    let c = counter(&key, Duration::from_secs(600));
    store
        .count(std::slice::from_ref(&c), CheckId::new(), long())
        .await
        .unwrap();
    let mut locker = support::client(&server.url()).await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".counters WHERE key = $1 FOR UPDATE"),
        &[&key.as_bytes()],
    )
    .await
    .unwrap();
    let (s, held_counter) = (store.clone(), c.clone());
    let held = tokio::spawn(async move { s.count(&[held_counter], CheckId::new(), long()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    match store.get(std::slice::from_ref(&key), long()).await {
        Err(err @ StoreError::Busy(_)) => {
            assert!(err.is_transient());
            let code = std::error::Error::source(&err)
                .and_then(|e| e.downcast_ref::<tokio_postgres::Error>())
                .and_then(tokio_postgres::Error::code)
                .cloned();
            assert_eq!(
                code,
                Some(tokio_postgres::error::SqlState::TOO_MANY_CONNECTIONS)
            );
        }
        other => panic!("a refused connection answered {other:?}"),
    }
    tx.commit().await.unwrap();
    assert_eq!(held.await.unwrap().unwrap(), [2]);
}

/// The sweep removes expired counters and marks, and no live one, in
/// batches; the background task runs on its interval and ends with the
/// store (its connections close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_removes_expired_rows_and_ends_with_the_store() {
    let server = support::server();
    let schema = support::unique_schema();
    let app = support::unique_schema();
    let url = format!("{}?application_name={app}", server.url());
    let store = PostgresStore::open_with(
        &url,
        PostgresOptions::default()
            .schema(&schema)
            .sweep(Duration::from_millis(100), 2),
    )
    .await
    .unwrap();
    let client = support::client(&server.url()).await;
    let id = tollgate_test_support::unique();
    let short = Duration::from_millis(50);
    let expired: Vec<String> = (0..5).map(|i| format!("limit:gone:{id}:{i}")).collect();
    let counters: Vec<Counter> = expired.iter().map(|k| counter(k, short)).collect();
    store
        .count(&counters, CheckId::new(), long())
        .await
        .unwrap();
    let live = format!("limit:live:{id}");
    store
        .count(
            &[counter(&live, Duration::from_secs(600))],
            CheckId::new(),
            long(),
        )
        .await
        .unwrap();
    store
        .claim(&format!("mark:gone:{id}"), "t", short, long())
        .await
        .unwrap();
    let rows = async |table: &str| -> i64 {
        let sql = format!("SELECT count(*) FROM \"{schema}\".{table}");
        client.query_one(&sql, &[]).await.unwrap().get(0)
    };
    assert_eq!(rows("counters").await, 6);

    // Two per table per sweep, every 100 ms: all gone within a second.
    let until = Instant::now() + Duration::from_secs(3);
    while (rows("counters").await > 1 || rows("marks").await > 0) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows("counters").await, 1, "the expired counters were swept");
    assert_eq!(rows("marks").await, 0, "the expired mark was swept");
    assert_eq!(support::stored(&client, &schema, &live).await, Some(1));

    let connections = async || -> i64 {
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1";
        client.query_one(sql, &[&app]).await.unwrap().get(0)
    };
    assert!(connections().await >= 1);
    drop(store);
    let until = Instant::now() + Duration::from_secs(3);
    while connections().await > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(connections().await, 0, "a connection outlived the store");
}

/// A background sweep is bounded by its interval: one blocked (here by a
/// lock on the whole table) is given up by the server when the next is
/// due, and the next starts on time, so sweeps keep coming while the lock
/// is held but never pile up on it; once it is released, the expired rows
/// are swept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_blocked_past_its_interval_is_given_up_and_the_next_starts_on_time() {
    let server = support::server();
    let schema = support::unique_schema();
    let app = support::unique_schema();
    let url = format!("{}?application_name={app}", server.url());
    let interval = Duration::from_millis(100);
    let store = PostgresStore::open_with(
        &url,
        PostgresOptions::default()
            .schema(&schema)
            .sweep(interval, 100),
    )
    .await
    .unwrap();
    let id = tollgate_test_support::unique();
    let expired = format!("limit:gone:{id}");
    store
        .count(
            &[counter(&expired, Duration::from_millis(50))],
            CheckId::new(),
            long(),
        )
        .await
        .unwrap();

    let mut locker = support::client(&server.url()).await;
    let reader = support::client(&server.url()).await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "LOCK TABLE \"{schema}\".counters IN ACCESS EXCLUSIVE MODE"
    ))
    .await
    .unwrap();
    // The sweeps waiting for the lock now, each by when its statement started.
    let waiting = async || -> Vec<String> {
        let sql = "SELECT query_start::text FROM pg_stat_activity \
                   WHERE application_name = $1 AND wait_event_type = 'Lock'";
        let rows = reader.query(sql, &[&app]).await.unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    };
    // With a sweep per two intervals (a wait, then a sweep given up), about
    // seven sweeps start in 1.5 s, each waiting alone.
    let until = Instant::now() + Duration::from_millis(1_500);
    let (mut most, mut started) = (0, std::collections::BTreeSet::new());
    while Instant::now() < until {
        let now = waiting().await;
        most = most.max(now.len());
        started.extend(now);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.commit().await.unwrap();
    assert!(
        started.len() >= 3,
        "{} sweeps waited for the lock in 1.5 s: one was not given up at its interval",
        started.len()
    );
    assert_eq!(most, 1, "sweeps piled up on the lock");

    let until = Instant::now() + Duration::from_secs(3);
    while support::stored(&reader, &schema, &expired).await.is_some() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        support::stored(&reader, &schema, &expired).await,
        None,
        "the expired counter was swept once the lock was released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_on_demand_says_how_many_expired_entries_it_removed() {
    let server = support::server();
    let schema = support::unique_schema();
    let store = PostgresStore::open_with(
        &server.url(),
        PostgresOptions::default()
            .schema(&schema)
            .sweep(Duration::ZERO, 10),
    )
    .await
    .unwrap();
    let id = tollgate_test_support::unique();
    let short = Duration::from_millis(50);
    let counters: Vec<Counter> = (0..3)
        .map(|i| counter(&format!("limit:gone:{id}:{i}"), short))
        .collect();
    store
        .count(&counters, CheckId::new(), long())
        .await
        .unwrap();
    store
        .claim(&format!("mark:gone:{id}"), "t", short, long())
        .await
        .unwrap();
    let live = format!("limit:live:{id}");
    store
        .count(
            &[counter(&live, Duration::from_secs(600))],
            CheckId::new(),
            long(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.sweep().await.unwrap(), 4, "three counters and a mark");
    assert_eq!(store.sweep().await.unwrap(), 0, "nothing left to remove");
}
