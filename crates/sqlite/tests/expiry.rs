//! Expired counters and marks leave the file: lazily when touched, and by a
//! bounded periodic sweep driven by the store's clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;
use tempfile::TempDir;
use tollgate_core::{
    CheckId, Claim, Clock, Counter, CounterStore, Deadline, ManualClock, MarkStore,
};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

const MINUTE: Duration = Duration::from_secs(60);

fn counter(key: String) -> Counter {
    Counter {
        key,
        ttl: MINUTE,
        cost: 1,
        max: 100,
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// A generous deadline: these tests are about expiry, not time budgets.
fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(10))
}

/// A store on a manual clock sweeping at most `batch` rows every minute.
fn store(dir: &TempDir, clock: &ManualClock, batch: u32) -> (SqliteStore, PathBuf) {
    let path = dir.path().join("limits.sqlite");
    let options = SqliteOptions::default()
        .clock(clock.clone())
        .sweep(MINUTE, batch);
    (SqliteStore::open_with(&path, options).unwrap(), path)
}

/// How many rows `table` holds, live or expired.
fn rows(path: &Path, table: &str) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// The counter's remaining lifetime, read from the file; `None` when absent.
fn lifetime(path: &Path, clock: &ManualClock, key: &str) -> Option<Duration> {
    let conn = Connection::open(path).unwrap();
    let expires_at: i64 = conn
        .query_row(
            "SELECT expires_at FROM counters WHERE key = ?1",
            [key.as_bytes()],
            |r| r.get(0),
        )
        .ok()?;
    let left = expires_at - clock.now().as_millis() as i64;
    (left > 0).then(|| Duration::from_millis(left as u64))
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
        store
            .count(&batch, CheckId::new(), deadline())
            .await
            .unwrap();
        let mark = format!("github-delivery:{window}");
        let claim = store.claim(&mark, "t", MINUTE, deadline()).await;
        assert_eq!(claim.unwrap(), Claim::Acquired);
        let held = rows(&path, "counters");
        assert!(
            held <= 2 * per_window,
            "window {window}: {held} rows for {per_window} live keys"
        );
        assert!(rows(&path, "marks") <= 2, "expired marks stay");
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
    store.count(&old, CheckId::new(), deadline()).await.unwrap();
    for i in 0..15 {
        let mark = format!("mark:old:{i}");
        store.claim(&mark, "t", MINUTE, deadline()).await.unwrap();
    }
    // Five sets of one lease each: with the count's, six rows of call
    // records (one per batch), too few for the worker to purge them itself.
    for i in 0..5 {
        let lease = Counter {
            lease: true,
            max: 5,
            ..counter(format!("limit:inflight:{i}:lease"))
        };
        store
            .count(&[lease], CheckId::new(), deadline())
            .await
            .unwrap();
    }
    assert_eq!((rows(&path, "calls"), rows(&path, "lease_sets")), (6, 5));
    clock.advance(2 * MINUTE);

    // Each call is preceded by one sweep of at most 10 rows; a full sweep
    // makes the next one due at once, until the backlog is gone: 100
    // counters, then 15 marks, 6 rows of records and 5 sets of leases.
    let one = |i: usize| [counter(format!("limit:new:{i}"))];
    store
        .count(&one(0), CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(
        rows(&path, "counters") + rows(&path, "marks"),
        100 + 15 - 10 + 1
    );
    for i in 1..13 {
        store
            .count(&one(i), CheckId::new(), deadline())
            .await
            .unwrap();
    }
    assert_eq!(
        (rows(&path, "counters"), rows(&path, "marks")),
        (13, 0),
        "the 115 expired rows are gone, the 13 live ones stay"
    );
    assert_eq!(
        (
            rows(&path, "calls"),
            rows(&path, "lease_sets"),
            rows(&path, "leases")
        ),
        (13, 0, 0),
        "the expired records and sets of leases are gone, the 13 calls' records stay"
    );
}

/// A sweep that fails (here a trigger refuses its deletes) is not tried
/// again before every batch: it waits for its interval, as a sweep that
/// removed less than its batch does. Only a file locked by another
/// connection makes it due again at once.
#[tokio::test]
async fn a_failed_sweep_waits_for_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, path) = store(&dir, &clock, 1_000);
    let old = [counter("limit:old".into())];
    store.count(&old, CheckId::new(), deadline()).await.unwrap();
    clock.advance(2 * MINUTE);
    let side = Connection::open(&path).unwrap();
    side.execute_batch(
        "CREATE TRIGGER keep BEFORE DELETE ON counters BEGIN SELECT RAISE(ABORT, 'kept'); END",
    )
    .unwrap();
    let new = |i: usize| [counter(format!("limit:new:{i}"))];
    // The sweep before this call fails; the call does not.
    store
        .count(&new(0), CheckId::new(), deadline())
        .await
        .unwrap();
    side.execute_batch("DROP TRIGGER keep").unwrap();
    store
        .count(&new(1), CheckId::new(), deadline())
        .await
        .unwrap();
    let old_rows = || {
        side.query_row(
            "SELECT count(*) FROM counters WHERE key = ?1",
            [b"limit:old".as_slice()],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
    };
    assert_eq!(
        old_rows(),
        1,
        "the failed sweep ran again before the interval"
    );
    clock.advance(MINUTE);
    store
        .count(&new(2), CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(old_rows(), 0, "the sweep did not run after its interval");
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
    let keys: Vec<String> = (0..4).map(|i| format!("limit:k:{i}")).collect();
    let counters: Vec<Counter> = keys.iter().cloned().map(counter).collect();
    let counted = store
        .count(&counters, CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(counted, vec![1, 1, 1, 1]);
    let again = store
        .count(&counters[..1], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(again, vec![2]);
    let claimed = store
        .claim("mark:k", "t", MINUTE, deadline())
        .await
        .unwrap();
    assert_eq!(claimed, Claim::Acquired);
    clock.advance(MINUTE);

    assert_eq!(store.get(&keys[..1], deadline()).await.unwrap(), vec![0]);
    assert_eq!(
        rows(&path, "counters"),
        3,
        "reading the expired counter removed it"
    );
    assert_eq!(
        store
            .refund(&counters[1..2], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![0],
        "an expired counter refunds nothing"
    );
    assert_eq!(rows(&path, "counters"), 2, "refunding it removed it");
    assert_eq!(
        store
            .count(&counters[2..3], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![1],
        "an expired counter restarts at its cost"
    );
    assert_eq!(rows(&path, "counters"), 2);
    assert!(!store.delete(&keys[3], deadline()).await.unwrap());
    assert_eq!(rows(&path, "counters"), 1, "deleting it removed it");
    let claimed = store
        .claim("mark:k", "u", MINUTE, deadline())
        .await
        .unwrap();
    assert_eq!(claimed, Claim::Acquired, "an expired mark holds nothing");
    assert!(!store.release("mark:other", "u", deadline()).await.unwrap());
    assert_eq!(rows(&path, "marks"), 1);
}

#[tokio::test]
async fn a_counter_expires_after_its_ttl_on_the_store_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, path) = store(&dir, &clock, 1_000);
    let c = counter("limit:ttl:1".into());
    let one = std::slice::from_ref(&c);
    store.count(one, CheckId::new(), deadline()).await.unwrap();
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        lifetime(&path, &clock, &c.key),
        Some(Duration::from_secs(40))
    );
    store.count(one, CheckId::new(), deadline()).await.unwrap();
    store
        .reserve(one, CheckId::new(), deadline())
        .await
        .unwrap();
    store.refund(one, CheckId::new(), deadline()).await.unwrap();
    assert_eq!(
        lifetime(&path, &clock, &c.key),
        Some(Duration::from_secs(40)),
        "a counter keeps the lifetime it started with"
    );
    clock.advance(Duration::from_secs(40) - Duration::from_millis(1));
    let key = std::slice::from_ref(&c.key);
    assert_eq!(store.get(key, deadline()).await.unwrap(), vec![2]);
    clock.advance(Duration::from_millis(1));
    assert_eq!(store.get(key, deadline()).await.unwrap(), vec![0]);
}
