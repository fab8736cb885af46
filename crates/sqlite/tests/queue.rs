//! The worker's queue is bounded: while the file is locked by another
//! connection and the queue is full, calls fail at once as busy, nothing
//! piles up in memory, and the store serves again once the lock is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rusqlite::Connection;
use tollgate_core::{CheckId, Counter, CounterStore, Deadline};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

const CAPACITY: usize = 4;

fn counter(key: &str) -> Counter {
    Counter {
        key: key.into(),
        ttl: Duration::from_secs(3_600),
        cost: 1,
        max: u64::MAX,
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// Longer than the lock is held: these calls wait for it.
fn patient() -> Deadline {
    Deadline::after(Duration::from_secs(20))
}

/// This process's resident memory, in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4_096
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_fails_calls_fast_as_busy_and_the_store_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let options = SqliteOptions::default().queue_capacity(CAPACITY);
    let store = SqliteStore::open_with(&path, options).unwrap();
    assert_eq!(
        store
            .count(&[counter("warm")], CheckId::new(), patient())
            .await
            .unwrap(),
        vec![1]
    );

    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let spawn = || {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .count(&[counter("queued")], CheckId::new(), patient())
                .await
        })
    };
    // One call the worker takes and waits with, for the lock; then enough
    // to fill the queue behind it.
    let mut waiting = vec![spawn()];
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting.extend((0..CAPACITY).map(|_| spawn()));
    tokio::time::sleep(Duration::from_millis(200)).await;

    let before = resident();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let refused = [counter("refused")];
    for _ in 0..200_000 {
        let began = Instant::now();
        let call = store.count(&refused, CheckId::new(), patient());
        let answer = tokio::time::timeout(Duration::from_millis(500), call).await;
        let err = answer
            .expect("a call waited behind a full queue instead of failing")
            .expect_err("a call got through a full queue");
        assert_eq!(err.kind(), "busy");
        assert!(err.is_transient());
        slowest = slowest.max(began.elapsed());
    }
    let grown = resident().saturating_sub(before);
    eprintln!(
        "200,000 refused calls in {:?}, slowest {slowest:?}, resident memory grew {grown} bytes",
        started.elapsed()
    );
    assert!(
        slowest < Duration::from_millis(250),
        "a refused call took {slowest:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refused calls were slow"
    );
    assert!(grown < 8 << 20, "memory grew by {grown} bytes");
    let err = store
        .count(&refused, CheckId::new(), patient())
        .await
        .unwrap_err();
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(source.contains("queue is full"), "{source}");

    other.execute_batch("ROLLBACK").unwrap();
    for call in waiting {
        call.await.unwrap().unwrap();
    }
    let keys = ["queued".to_owned(), "refused".to_owned()];
    let stored = store.get(&keys, patient()).await.unwrap();
    assert_eq!(
        stored,
        vec![1 + CAPACITY as u64, 0],
        "queued calls were lost or refused calls applied"
    );
    assert_eq!(
        store
            .count(&[counter("after")], CheckId::new(), patient())
            .await
            .unwrap(),
        vec![1]
    );
}
