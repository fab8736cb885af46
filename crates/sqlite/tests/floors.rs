//! Floors on a real file: a counter with a floor is raised to it before a
//! cost is added, checked or given back, and gets its lifetime afresh
//! (`Counter::lifetime_at` its new count) from every count or reservation,
//! while a counter without one in the same batch keeps its own; a refund
//! keeps either's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};
use tempfile::TempDir;
use tollgate_core::{CheckId, Clock, Counter, CounterStore, Deadline, MAX_COUNT, ManualClock};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

/// The store's time at the start of each test, in ms since the epoch.
const T0_MS: i64 = 1_700_000_000_000;

/// A floor (a time in µs, as a GCRA limit's).
const FLOOR: u64 = 1_000_000_000;

fn counter(key: &str, ttl_secs: u64, cost: u64, max: u64, floor: u64) -> Counter {
    Counter {
        key: key.into(),
        ttl: Duration::from_secs(ttl_secs),
        cost,
        max,
        floor,
        prior: None,
        lease: false,
    }
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(10))
}

fn open(dir: &TempDir) -> (SqliteStore, PathBuf, ManualClock) {
    let clock = ManualClock::new(Duration::from_millis(T0_MS as u64));
    let path = dir.path().join("limits.sqlite");
    let options = SqliteOptions::default().clock(clock.clone());
    (SqliteStore::open_with(&path, options).unwrap(), path, clock)
}

/// The row of `key` in the file, as (value, expires_at in ms).
fn row(path: &Path, key: &str) -> Option<(i64, i64)> {
    let conn = Connection::open(path).unwrap();
    conn.query_row(
        "SELECT value, expires_at FROM counters WHERE key = ?1",
        [key.as_bytes()],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
    .unwrap()
}

#[tokio::test]
async fn a_floored_counter_gets_its_lifetime_afresh_and_a_plain_one_beside_it_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, clock) = open(&dir);
    let floored = |ttl, cost, floor| counter("limit:g", ttl, cost, MAX_COUNT, floor);
    let plain = || counter("limit:p", 60, 1, 100, 0);
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
    assert_eq!(
        row(&path, "limit:g"),
        Some(((FLOOR + 5_000_000) as i64, T0_MS + 65_000))
    );
    assert_eq!(row(&path, "limit:p"), Some((1, T0_MS + 60_000)));

    // 10 s later, a later floor: raised to it, and renewed from now.
    clock.advance(Duration::from_secs(10));
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
    assert_eq!(
        row(&path, "limit:g"),
        Some(((later + 5_000_000) as i64, T0_MS + 10_000 + 3_605_000))
    );
    assert_eq!(row(&path, "limit:p"), Some((2, T0_MS + 60_000)), "kept");

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
    assert_eq!(
        row(&path, "limit:g"),
        Some(((later + 5_001_500) as i64, T0_MS + 10_000 + 605_002))
    );
    assert_eq!(row(&path, "limit:p"), Some((3, T0_MS + 60_000)), "kept");

    // A refused reservation changes nothing; a refund keeps the lifetime
    // and stops at the floor.
    let refused = store
        .reserve(
            &[counter("limit:g", 60, 1, later, later)],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert!(!refused.applied);
    clock.advance(Duration::from_secs(1));
    let refunded = store
        .refund(
            &[floored(60, 10_000_000, later)],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(refunded, [later]);
    assert_eq!(
        row(&path, "limit:g"),
        Some((later as i64, T0_MS + 10_000 + 605_002))
    );
}

#[tokio::test]
async fn a_saturated_floored_counter_is_still_renewed_and_an_expired_one_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, clock) = open(&dir);
    let top = || counter("limit:top", 60, 5, MAX_COUNT, MAX_COUNT - 1);
    for _ in 0..2 {
        let counts = store
            .count(&[top()], CheckId::new(), deadline())
            .await
            .unwrap();
        assert_eq!(counts, [MAX_COUNT]);
        let now_ms = i64::try_from(clock.now().as_millis()).unwrap();
        assert_eq!(
            row(&path, "limit:top"),
            Some((MAX_COUNT as i64, now_ms + 60_001)),
            "1 µs ahead of the floor: 60 s and 1 ms"
        );
        clock.advance(Duration::from_secs(1));
    }

    // Expired: started again from the floor, as a new counter.
    let g = |floor| counter("limit:g", 60, 2_000, MAX_COUNT, floor);
    store
        .count(&[g(FLOOR)], CheckId::new(), deadline())
        .await
        .unwrap();
    clock.advance(Duration::from_secs(61));
    let now_ms = i64::try_from(clock.now().as_millis()).unwrap();
    let counts = store
        .count(&[g(FLOOR - 1_000_000)], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(counts, [FLOOR - 1_000_000 + 2_000]);
    assert_eq!(
        row(&path, "limit:g"),
        Some(((FLOOR - 998_000) as i64, now_ms + 60_002))
    );
    // A refund of an expired floored counter leaves it as it is, read as absent.
    clock.advance(Duration::from_secs(61));
    let refunded = store
        .refund(&[g(FLOOR)], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(refunded, [0]);
    assert_eq!(
        store
            .get(&["limit:g".to_owned()], deadline())
            .await
            .unwrap(),
        [0]
    );
}
