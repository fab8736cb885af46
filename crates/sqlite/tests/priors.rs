//! Priors on a real file: a prior's row is only read (an expired one is
//! neither removed nor renewed), and a malformed prior fails its call as a
//! permanent error, applying nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};
use tempfile::TempDir;
use tollgate_core::{
    CheckId, Counter, CounterStore, Deadline, MAX_COUNT, ManualClock, Prior, Window,
};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

/// The store's time at the start of each test, in ms since the epoch.
const T0_MS: i64 = 1_700_000_000_000;

fn counter(key: &str, ttl_secs: u64, cost: u64, max: u64, prior: Option<Prior>) -> Counter {
    Counter {
        key: key.into(),
        ttl: Duration::from_secs(ttl_secs),
        cost,
        max,
        floor: 0,
        prior,
        lease: false,
    }
}

fn prior(part: u64, whole: u64) -> Option<Prior> {
    Some(Prior {
        key: "limit:p".into(),
        part,
        whole,
    })
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
async fn a_prior_is_only_read_live_or_expired() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, clock) = open(&dir);
    let previous = counter("limit:p", 10, 4, MAX_COUNT, None);
    store
        .count(&[previous], CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(row(&path, "limit:p"), Some((4, T0_MS + 10_000)));
    let current = counter("limit:c", 60, 1, 10, prior(1, 2));
    let counts = store
        .count(std::slice::from_ref(&current), CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!(counts, [1, 4]);
    assert_eq!(
        row(&path, "limit:p"),
        Some((4, T0_MS + 10_000)),
        "reading a live prior changed its row"
    );
    // Expired: it reads 0, and its row stays for the sweep (a write of it
    // would replace it), its expiry as it was.
    clock.advance(Duration::from_secs(10));
    let reserved = store
        .reserve(std::slice::from_ref(&current), CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!((reserved.applied, reserved.counts), (true, vec![2, 0]));
    assert_eq!(
        row(&path, "limit:p"),
        Some((4, T0_MS + 10_000)),
        "reading an expired prior removed or renewed it"
    );
}

#[tokio::test]
async fn a_malformed_prior_fails_its_call_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, _clock) = open(&dir);
    for (part, whole) in [(0, 0), (1, 0), (3, 2), (1, Window::MAX_SECS + 1)] {
        let batch = [
            counter("limit:a", 60, 1, 10, None),
            counter("limit:c", 60, 1, 10, prior(part, whole)),
        ];
        let counted = store.count(&batch, CheckId::new(), deadline()).await;
        let reserved = store.reserve(&batch, CheckId::new(), deadline()).await;
        for failure in [counted.unwrap_err(), reserved.unwrap_err()] {
            assert_eq!(failure.kind(), "backend", "{part}/{whole}: {failure:?}");
            assert!(!failure.is_transient());
        }
        assert_eq!(row(&path, "limit:a"), None, "{part}/{whole} applied");
        assert_eq!(row(&path, "limit:c"), None, "{part}/{whole} applied");
    }
    // The bounds themselves are well formed; a refund ignores priors.
    for (part, whole) in [(0, 1), (Window::MAX_SECS, Window::MAX_SECS)] {
        let batch = [counter("limit:c", 60, 1, 10, prior(part, whole))];
        let counts = store.count(&batch, CheckId::new(), deadline()).await;
        assert_eq!(counts.unwrap()[1], 0, "{part}/{whole}");
    }
    let batch = [counter("limit:c", 60, 2, 10, prior(3, 0))];
    let back = store.refund(&batch, CheckId::new(), deadline()).await;
    assert_eq!(back.unwrap(), [0], "a refund read or refused a prior");
}
