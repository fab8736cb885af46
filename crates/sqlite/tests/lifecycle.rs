//! The worker lives as long as a store handle does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tollgate_core::{CheckId, Counter, CounterStore, Deadline};
use tollgate_sqlite::{Error, SqliteOptions, SqliteStore};

fn counter() -> Counter {
    Counter {
        key: "limit:a:1".into(),
        ttl: Duration::from_secs(60),
        cost: 1,
        max: 10,
        floor: 0,
        prior: None,
        lease: false,
    }
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(10))
}

#[tokio::test]
async fn a_clone_keeps_the_worker_alive() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("limits.sqlite")).unwrap();
    let clone = store.clone();
    store
        .count(&[counter()], CheckId::new(), deadline())
        .await
        .unwrap();
    drop(store);
    assert_eq!(
        clone
            .count(&[counter()], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![2]
    );
}

#[tokio::test]
async fn dropping_the_last_handle_closes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let wal = dir.path().join("limits.sqlite-wal");
    let store = SqliteStore::open(&path).unwrap();
    store
        .count(&[counter()], CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(wal.exists(), "an open store in WAL mode has a log");
    drop(store);
    // The worker thread checkpoints and deletes the log when it closes the
    // last connection; it does so on its own thread, so wait for it.
    let give_up = Instant::now() + Duration::from_secs(10);
    while wal.exists() {
        assert!(
            Instant::now() < give_up,
            "the worker did not close the file"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(
        reopened
            .count(&[counter()], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![2]
    );
}

#[tokio::test]
async fn many_stores_opening_a_new_file_at_once_all_succeed() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits.sqlite");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path)
                })
            })
            .collect();
        let stores: Vec<SqliteStore> = threads
            .into_iter()
            .map(|t| t.join().unwrap().unwrap())
            .collect();
        for (i, store) in stores.iter().enumerate() {
            assert_eq!(
                store
                    .count(&[counter()], CheckId::new(), deadline())
                    .await
                    .unwrap(),
                vec![i as u64 + 1]
            );
        }
    }
}

/// A store opened while another connection holds the file's write lock
/// waits for it (up to its `open_busy_timeout`) instead of failing.
#[tokio::test]
async fn opening_waits_for_a_lock_held_by_another_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let (locked, held) = std::sync::mpsc::channel();
    let holder = {
        let path = path.clone();
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("BEGIN EXCLUSIVE; CREATE TABLE t (x);")
                .unwrap();
            locked.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(400));
            conn.execute_batch("ROLLBACK").unwrap();
        })
    };
    held.recv().unwrap();
    let store = SqliteStore::open(&path).unwrap();
    holder.join().unwrap();
    assert_eq!(
        store
            .count(&[counter()], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![1]
    );
}

/// The open busy timeout is the caller's: an open that finds the file
/// locked for longer gives up after it (here 200 ms, against a lock held
/// 1.5 s, which the default 5 s would have waited out), and one of any
/// length is accepted.
#[test]
fn opening_gives_up_on_a_lock_after_its_open_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let (locked, held) = std::sync::mpsc::channel();
    let holder = {
        let path = path.clone();
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("BEGIN EXCLUSIVE; CREATE TABLE t (x);")
                .unwrap();
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(1_500));
            conn.execute_batch("ROLLBACK").unwrap();
        })
    };
    held.recv().unwrap();
    let short = SqliteOptions::default().open_busy_timeout(Duration::from_millis(200));
    match SqliteStore::open_with(&path, short) {
        Err(Error::Sqlite { .. }) => {}
        other => panic!("an open during a held lock answered {other:?}"),
    }
    holder.join().unwrap();
    let longest = SqliteOptions::default().open_busy_timeout(Duration::MAX);
    SqliteStore::open_with(&path, longest).unwrap();
}

/// Processes racing to open a new file find it busy while one of them sets
/// its journal mode, where SQLite does not wait by itself: every open still
/// succeeds, because opening tries a busy file again.
#[test]
fn racing_opens_of_a_new_file_wait_out_each_other() {
    for _ in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits.sqlite");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(12));
        let threads: Vec<_> = (0..12)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap().unwrap();
        }
    }
}

#[tokio::test]
async fn its_metrics_and_logs_name_it_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("limits.sqlite")).unwrap();
    assert_eq!(tollgate_core::Named::name(&store), "sqlite");
}
