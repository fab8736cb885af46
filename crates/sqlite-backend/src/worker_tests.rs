//! The worker's batches: group commit, savepoints, deadlines under the lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc;

use tokio::sync::oneshot;
use tollgate_core::{Counter, Deadline, StoreError};

use super::*;
use crate::job::Call;
use crate::schema;

fn counter(key: &str) -> Counter {
    Counter {
        key: key.into(),
        ttl: Duration::from_secs(60),
        cost: 1,
        max: 10,
    }
}

type Answer<T> = oneshot::Receiver<Result<T, StoreError>>;

fn call<T, F>(budget: Duration, op: F) -> (Box<dyn Job>, Answer<T>)
where
    T: Send + 'static,
    F: Fn(&Connection, Duration) -> rusqlite::Result<T> + Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    (
        Box::new(Call::new(op, Deadline::after(budget), reply)),
        answer,
    )
}

/// Counts `key` once, by a deadline `budget` away.
fn count_by(key: &'static str, budget: Duration) -> (Box<dyn Job>, Answer<Vec<u64>>) {
    call(budget, move |conn, now| {
        ops::count(conn, &[counter(key)], now)
    })
}

fn count_once(key: &'static str) -> (Box<dyn Job>, Answer<Vec<u64>>) {
    count_by(key, Duration::from_secs(10))
}

fn stored(worker: &Worker, key: &str) -> u64 {
    let now = worker.clock.now();
    ops::get(&worker.conn, [key], now).unwrap()[0]
}

fn worker_on(path: &std::path::Path) -> Worker {
    let options = SqliteOptions::default();
    let conn = schema::open(path, &options).unwrap();
    let (_queue, jobs) = mpsc::sync_channel(1);
    Worker::new(conn, jobs, &options)
}

fn worker(dir: &tempfile::TempDir) -> Worker {
    worker_on(&dir.path().join("limits.sqlite"))
}

/// Another connection holding the file's write lock for `hold`, from its
/// own thread; returns once the lock is held.
fn hold_lock(path: &std::path::Path, hold: Duration) -> std::thread::JoinHandle<()> {
    let (held, is_held) = mpsc::channel();
    let path = path.to_owned();
    let holder = std::thread::spawn(move || {
        let other = Connection::open(path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        held.send(()).unwrap();
        std::thread::sleep(hold);
        other.execute_batch("ROLLBACK").unwrap();
    });
    is_held.recv().unwrap();
    holder
}

#[test]
fn a_failing_call_fails_alone_and_its_writes_are_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let worker = worker(&dir);
    let (first, first_answer) = count_once("a");
    let (failing, failing_answer) = call(Duration::from_secs(10), |conn, now| {
        ops::count(conn, &[counter("b")], now)?;
        Err::<(), _>(rusqlite::Error::QueryReturnedNoRows)
    });
    let (last, last_answer) = count_once("c");
    worker.serve(vec![first, failing, last]);

    assert_eq!(first_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(last_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    let failure = failing_answer.blocking_recv().unwrap().unwrap_err();
    assert_eq!(failure.kind(), "backend");
    assert_eq!(stored(&worker, "a"), 1);
    assert_eq!(stored(&worker, "b"), 0, "the failing call's count was kept");
    assert_eq!(stored(&worker, "c"), 1);
}

#[test]
fn a_batch_of_calls_is_one_commit() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let mut worker = worker(&dir);
    let commits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&commits);
    worker
        .conn
        .commit_hook(Some(move || {
            seen.fetch_add(1, Ordering::SeqCst);
            false
        }))
        .unwrap();
    let (jobs, answers): (Vec<_>, Vec<_>) = (0..100).map(|_| count_once("a")).unzip();
    worker.serve(jobs);
    let counts: Vec<u64> = answers
        .into_iter()
        .map(|a| a.blocking_recv().unwrap().unwrap()[0])
        .collect();
    assert_eq!(counts, (1..=100).collect::<Vec<u64>>());
    assert_eq!(commits.load(Ordering::SeqCst), 1, "100 calls, one commit");
}

#[test]
fn a_call_nobody_waits_for_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let worker = worker(&dir);
    let (abandoned, answer) = count_once("a");
    drop(answer);
    let (kept, kept_answer) = count_once("b");
    worker.serve(vec![abandoned, kept]);
    assert_eq!(kept_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(stored(&worker, "a"), 0);
}

#[test]
fn a_batch_that_cannot_lock_the_file_waits_until_its_deadline_and_fails_as_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let worker = worker_on(&path);
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();

    let started = Instant::now();
    let (first, first_answer) = count_by("a", Duration::from_millis(20));
    let (second, second_answer) = count_by("b", Duration::from_millis(80));
    worker.serve(vec![first, second]);
    let waited = started.elapsed();
    for answer in [first_answer, second_answer] {
        let failure = answer.blocking_recv().unwrap().unwrap_err();
        assert_eq!(failure.kind(), "busy");
        assert!(failure.is_transient());
    }
    assert!(
        waited >= Duration::from_millis(60) && waited < Duration::from_secs(1),
        "the batch waited {waited:?} for the lock, not until its latest deadline (80 ms)"
    );
    other.execute_batch("ROLLBACK").unwrap();
    let (again, answer) = count_once("a");
    worker.serve(vec![again]);
    assert_eq!(answer.blocking_recv().unwrap().unwrap(), vec![1]);
}

#[test]
fn a_call_whose_deadline_passes_while_the_lock_is_held_is_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let worker = worker_on(&path);
    let holder = hold_lock(&path, Duration::from_millis(150));
    let (late, late_answer) = count_by("late", Duration::from_millis(50));
    let (patient, patient_answer) = count_by("patient", Duration::from_secs(5));
    worker.serve(vec![late, patient]);
    holder.join().unwrap();

    let timeout = late_answer.blocking_recv().unwrap().unwrap_err();
    assert_eq!(timeout.kind(), "timeout", "{timeout:?}");
    assert_eq!(patient_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(
        stored(&worker, "late"),
        0,
        "a call answered Timeout was applied once the lock came free"
    );
    assert_eq!(stored(&worker, "patient"), 1);
}

#[test]
fn a_batch_of_late_calls_never_waits_for_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let worker = worker_on(&path);
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (late, answer) = count_by("a", Duration::ZERO);
    let started = Instant::now();
    worker.serve(vec![late]);
    assert!(started.elapsed() < Duration::from_millis(50));
    assert_eq!(
        answer.blocking_recv().unwrap().unwrap_err().kind(),
        "timeout"
    );
    other.execute_batch("ROLLBACK").unwrap();
    assert_eq!(stored(&worker, "a"), 0);
}

#[test]
fn a_call_whose_deadline_passes_before_the_commit_is_rolled_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let worker = worker(&dir);
    let (hasty, hasty_answer) = count_by("hasty", Duration::from_millis(30));
    // Applied after `hasty`, and slow enough for its deadline to pass
    // before the batch can commit.
    let (slow, slow_answer) = call(Duration::from_secs(5), |conn, now| {
        std::thread::sleep(Duration::from_millis(60));
        ops::count(conn, &[counter("slow")], now)
    });
    worker.serve(vec![hasty, slow]);

    let timeout = hasty_answer.blocking_recv().unwrap().unwrap_err();
    assert_eq!(timeout.kind(), "timeout", "{timeout:?}");
    assert_eq!(slow_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(stored(&worker, "hasty"), 0, "a late call was committed");
    assert_eq!(stored(&worker, "slow"), 1, "the rest of its batch was lost");
}
