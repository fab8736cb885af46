//! Costs on a real file: counts saturate at 2^53 (never overflowing
//! SQLite's 64-bit integers), reservations add every cost or none, and
//! refunds stop at zero and keep a counter's lifetime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};
use tempfile::TempDir;
use tollgate_core::{
    CheckId, Counter, CounterStore, Deadline, MAX_COUNT, ManualClock, Reservation,
};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

fn counter(key: &str, cost: u64, max: u64) -> Counter {
    Counter {
        key: key.into(),
        ttl: Duration::from_secs(60),
        cost,
        max,
        floor: 0,
        prior: None,
        lease: false,
    }
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(10))
}

fn open(dir: &TempDir, clock: &ManualClock) -> (SqliteStore, PathBuf) {
    let path = dir.path().join("limits.sqlite");
    let options = SqliteOptions::default().clock(clock.clone());
    (SqliteStore::open_with(&path, options).unwrap(), path)
}

/// The row of `key` in the file, as (value, expires_at).
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
async fn counts_saturate_at_two_to_the_53_on_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, path) = open(&dir, &clock);
    let near = counter("limit:near", MAX_COUNT - 1, u64::MAX);
    assert_eq!(
        store
            .count(&[near], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![MAX_COUNT - 1]
    );
    let more = counter("limit:near", 5, u64::MAX);
    for _ in 0..2 {
        let counts = store
            .count(std::slice::from_ref(&more), CheckId::new(), deadline())
            .await
            .unwrap();
        assert_eq!(counts, vec![MAX_COUNT]);
    }
    assert_eq!(row(&path, "limit:near").unwrap().0, 1 << 53);

    // Costs no check makes (above 2^53) still cannot overflow anything.
    let huge = [counter("limit:huge", u64::MAX, u64::MAX)];
    for _ in 0..2 {
        assert_eq!(
            store
                .count(&huge, CheckId::new(), deadline())
                .await
                .unwrap(),
            vec![MAX_COUNT]
        );
    }
    assert_eq!(row(&path, "limit:huge").unwrap().0, 1 << 53);
    let refused = store
        .reserve(&huge, CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(
        refused,
        Reservation {
            applied: false,
            counts: vec![MAX_COUNT],
        },
        "2^53 + (2^64 - 1) does not fit in 2^64 - 1"
    );
}

#[tokio::test]
async fn a_reservation_adds_every_cost_when_each_fits_and_none_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, path) = open(&dir, &clock);
    let a = |cost| counter("limit:a", cost, MAX_COUNT);
    let b = |cost| counter("limit:b", cost, 10);
    let first = store
        .reserve(&[a(MAX_COUNT - 3), b(7)], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(
        first,
        Reservation {
            applied: true,
            counts: vec![MAX_COUNT - 3, 7]
        }
    );
    let fits_exactly = store
        .reserve(&[a(3), b(3)], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(
        fits_exactly,
        Reservation {
            applied: true,
            counts: vec![MAX_COUNT, 10]
        }
    );
    store
        .refund(&[b(10)], CheckId::new(), deadline())
        .await
        .unwrap();
    let one_over = store
        .reserve(&[b(4), a(1)], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(
        one_over,
        Reservation {
            applied: false,
            counts: vec![0, MAX_COUNT]
        }
    );
    assert_eq!(
        row(&path, "limit:b").unwrap().0,
        0,
        "a refused reservation added a cost"
    );

    let too_big = [counter("limit:c", 11, 10)];
    let refused = store
        .reserve(&too_big, CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(
        refused,
        Reservation {
            applied: false,
            counts: vec![0]
        }
    );
    assert_eq!(row(&path, "limit:c"), None, "a cost above max wrote a row");
}

#[tokio::test]
async fn refunds_stop_at_zero_keep_the_lifetime_and_leave_absent_counters_absent() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (store, path) = open(&dir, &clock);
    let spend = [counter("limit:r", 8, 100)];
    assert_eq!(
        store
            .count(&spend, CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![8]
    );
    let (_, expires_at) = row(&path, "limit:r").unwrap();
    clock.advance(Duration::from_secs(10));

    let give_back = |cost| [counter("limit:r", cost, 100)];
    assert_eq!(
        store
            .refund(&give_back(3), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![5]
    );
    assert_eq!(
        store
            .refund(&give_back(50), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![0]
    );
    assert_eq!(
        row(&path, "limit:r"),
        Some((0, expires_at)),
        "the lifetime moved"
    );
    assert_eq!(
        store
            .count(&spend, CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![8]
    );
    assert_eq!(row(&path, "limit:r"), Some((8, expires_at)));

    let absent = [counter("limit:absent", 5, 100)];
    assert_eq!(
        store
            .refund(&absent, CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![0]
    );
    assert_eq!(
        row(&path, "limit:absent"),
        None,
        "a refund created a counter"
    );
    clock.advance(Duration::from_secs(50));
    assert_eq!(
        store
            .refund(&give_back(1), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![0]
    );
    assert_eq!(
        row(&path, "limit:r"),
        None,
        "an expired counter was refunded into life"
    );
}
