//! Expired counters leave the file: lazily when touched, and by a bounded
//! periodic sweep driven by the store's clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;
use tempfile::TempDir;
use tollgate_core::{Counter, CounterStore, ManualClock};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

const MINUTE: Duration = Duration::from_secs(60);

fn counter(key: String) -> Counter {
    Counter {
        key,
        ttl: MINUTE,
        max: 100,
    }
}

/// A store on a manual clock sweeping at most `batch` rows every minute.
fn store(dir: &TempDir, clock: &ManualClock, batch: u32) -> (SqliteStore, PathBuf) {
    let path = dir.path().join("limits.sqlite");
    let options = SqliteOptions::default()
        .clock(clock.clone())
        .sweep(MINUTE, batch);
    (SqliteStore::open_with(&path, options).unwrap(), path)
}

/// How many rows the file holds, live or expired.
fn rows(path: &Path) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM counters", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn rows_stay_bounded_under_a_stream_of_distinct_keys() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, path) = store(&dir, &clock, 1_000);
    let per_window = 100;
    for window in 0..30 {
        let batch: Vec<Counter> = (0..per_window)
            .map(|i| counter(format!("limit:visitor:{window}-{i}:{window}")))
            .collect();
        store.increment(&batch).await.unwrap();
        let held = rows(&path);
        assert!(
            held <= 2 * per_window,
            "window {window}: {held} rows for {per_window} live keys"
        );
        clock.advance(MINUTE);
    }
}

#[tokio::test]
async fn one_sweep_removes_at_most_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, path) = store(&dir, &clock, 10);
    let old: Vec<Counter> = (0..100)
        .map(|i| counter(format!("limit:old:{i}")))
        .collect();
    store.increment(&old).await.unwrap();
    clock.advance(2 * MINUTE);

    // Each call is preceded by one sweep of at most 10 rows; a full sweep
    // makes the next one due at once, until the backlog is gone.
    store
        .increment(&[counter("limit:new:0".into())])
        .await
        .unwrap();
    assert_eq!(rows(&path), 100 - 10 + 1);
    for i in 1..12 {
        store
            .increment(&[counter(format!("limit:new:{i}"))])
            .await
            .unwrap();
    }
    assert_eq!(
        rows(&path),
        12,
        "the 100 expired rows are gone, the 12 live ones stay"
    );
}

#[tokio::test]
async fn an_expired_counter_reads_as_absent_and_is_removed_when_touched() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    // A sweep too rare to run during the test: only touching removes rows.
    let path = dir.path().join("limits.sqlite");
    let options = SqliteOptions::default()
        .clock(clock.clone())
        .sweep(Duration::from_secs(86_400), 1_000);
    let store = SqliteStore::open_with(&path, options).unwrap();
    let keys: Vec<String> = (0..3).map(|i| format!("limit:k:{i}")).collect();
    let counters: Vec<Counter> = keys.iter().cloned().map(counter).collect();
    assert_eq!(store.increment(&counters).await.unwrap(), vec![1, 1, 1]);
    assert_eq!(store.increment(&counters[..1]).await.unwrap(), vec![2]);
    clock.advance(MINUTE);

    assert_eq!(store.get(&keys[..1]).await.unwrap(), vec![0]);
    assert_eq!(rows(&path), 2, "reading the expired counter removed it");
    assert_eq!(
        store.expiry(&keys[1]).await.unwrap(),
        tollgate_core::Expiry::Absent
    );
    assert_eq!(rows(&path), 1);
    assert_eq!(
        store.increment(&counters[2..]).await.unwrap(),
        vec![1],
        "an expired counter restarts at 1"
    );
    assert_eq!(rows(&path), 1);
    assert!(!store.delete(&keys[0]).await.unwrap());
    assert!(store.set_if_absent(&keys[0], MINUTE).await.unwrap());
}

#[tokio::test]
async fn a_counter_expires_after_its_ttl_on_the_store_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, _path) = store(&dir, &clock, 1_000);
    let c = counter("limit:ttl:1".into());
    store.increment(std::slice::from_ref(&c)).await.unwrap();
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        store.expiry(&c.key).await.unwrap(),
        tollgate_core::Expiry::In(Duration::from_secs(40))
    );
    store.increment(std::slice::from_ref(&c)).await.unwrap();
    assert_eq!(
        store.expiry(&c.key).await.unwrap(),
        tollgate_core::Expiry::In(Duration::from_secs(40)),
        "a counter keeps the lifetime it started with"
    );
    clock.advance(Duration::from_secs(40) - Duration::from_millis(1));
    assert_eq!(
        store.get(std::slice::from_ref(&c.key)).await.unwrap(),
        vec![2]
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        store.get(std::slice::from_ref(&c.key)).await.unwrap(),
        vec![0]
    );
}
