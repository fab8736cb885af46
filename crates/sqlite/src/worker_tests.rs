//! The worker's batches: group commit, savepoints, deadlines under the lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;
use tollgate_core::{CheckId, Counter, Deadline, StoreError};

use super::*;
use crate::job::Call;
use crate::schema;

fn counter(key: &str) -> Counter {
    Counter {
        key: key.into(),
        ttl: Duration::from_secs(60),
        cost: 1,
        max: 10,
        floor: 0,
        prior: None,
        lease: false,
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
        ops::count(conn, &[counter(key)], CheckId::new(), now)
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
        ops::count(conn, &[counter("b")], CheckId::new(), now)?;
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

/// Counts `key` once as the call `id` (an attempt of it), recording it.
fn count_as(key: &'static str, id: u128) -> (Box<dyn Job>, Answer<Vec<u64>>) {
    let deadline = Deadline::after(Duration::from_secs(10));
    let once = ops::Once::new(tollgate_core::CheckId::from_u128(id), deadline);
    call(Duration::from_secs(10), move |conn, now| {
        let reply = ops::once(conn, &once, 1, now, || {
            ops::count(conn, &[counter(key)], CheckId::new(), now).map(|counts| {
                tollgate_core::Reservation {
                    applied: true,
                    counts,
                }
            })
        })?;
        Ok(reply.counts)
    })
}

/// A call failing alone takes its record with it (it is applied again when
/// retried); the others of its batch keep theirs (their retries apply
/// nothing); and the batch's records are one row.
#[test]
fn a_call_failing_alone_leaves_no_record_and_the_others_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let worker = worker(&dir);
    let (first, first_answer) = count_as("a", 1);
    let (failing, failing_answer) = call(Duration::from_secs(10), |conn, now| {
        let deadline = Deadline::after(Duration::from_secs(10));
        let once = ops::Once::new(tollgate_core::CheckId::from_u128(2), deadline);
        ops::once(conn, &once, 1, now, || {
            ops::count(conn, &[counter("b")], CheckId::new(), now).map(|counts| {
                tollgate_core::Reservation {
                    applied: true,
                    counts,
                }
            })
        })?;
        Err::<(), _>(rusqlite::Error::QueryReturnedNoRows)
    });
    let (last, last_answer) = count_as("c", 3);
    worker.serve(vec![first, failing, last]);
    assert_eq!(first_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert!(failing_answer.blocking_recv().unwrap().is_err());
    assert_eq!(last_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    let rows: i64 = worker
        .conn
        .query_row("SELECT count(*) FROM calls", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 1, "one row of records per batch");

    let (again_a, again_a_answer) = count_as("a", 1);
    let (again_b, again_b_answer) = count_as("b", 2);
    let (again_c, again_c_answer) = count_as("c", 3);
    worker.serve(vec![again_a, again_b, again_c]);
    assert_eq!(again_a_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(again_b_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(again_c_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(stored(&worker, "a"), 1, "a retry was applied");
    assert_eq!(
        stored(&worker, "b"),
        1,
        "the failed call was not applied once"
    );
    assert_eq!(stored(&worker, "c"), 1, "a retry was applied");
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
fn a_batch_that_cannot_lock_the_file_waits_until_its_deadline_and_times_out() {
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
        assert_eq!(failure.kind(), "timeout", "no answer by the deadline");
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
        ops::count(conn, &[counter("slow")], CheckId::new(), now)
    });
    worker.serve(vec![hasty, slow]);

    let timeout = hasty_answer.blocking_recv().unwrap().unwrap_err();
    assert_eq!(timeout.kind(), "timeout", "{timeout:?}");
    assert_eq!(slow_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(stored(&worker, "hasty"), 0, "a late call was committed");
    assert_eq!(stored(&worker, "slow"), 1, "the rest of its batch was lost");
}

/// Counts the connection's commits and rollbacks.
fn count_endings(worker: &mut Worker) -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (commits, rollbacks) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let seen = Arc::clone(&commits);
    worker
        .conn
        .commit_hook(Some(move || {
            seen.fetch_add(1, Ordering::SeqCst);
            false
        }))
        .unwrap();
    let seen = Arc::clone(&rollbacks);
    worker
        .conn
        .rollback_hook(Some(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
    (commits, rollbacks)
}

#[test]
fn a_call_skipped_under_the_lock_costs_its_batch_no_second_run() {
    // The late call is skipped as the batch reaches it, so nothing it did
    // needs undoing: one commit, no rollback.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let mut worker = worker_on(&path);
    let (commits, rollbacks) = count_endings(&mut worker);
    let holder = hold_lock(&path, Duration::from_millis(150));
    let (late, late_answer) = count_by("late", Duration::from_millis(50));
    let (patient, patient_answer) = count_by("patient", Duration::from_secs(5));
    worker.serve(vec![late, patient]);
    holder.join().unwrap();
    assert_eq!(
        late_answer.blocking_recv().unwrap().unwrap_err().kind(),
        "timeout"
    );
    assert_eq!(patient_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert_eq!(rollbacks.load(Ordering::SeqCst), 0, "the batch ran twice");
    assert_eq!(commits.load(Ordering::SeqCst), 1);
}

#[test]
fn a_batch_that_gave_up_on_the_lock_is_not_tried_again() {
    // The lock comes free 150 ms after the batch's deadline (200 ms), and
    // before a second wait as long would end: the calls are answered with a
    // timeout, at their deadline, not run again late.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    let worker = worker_on(&path);
    let holder = hold_lock(&path, Duration::from_millis(350));
    let (call, answer) = count_by("a", Duration::from_millis(200));
    worker.serve(vec![call]);
    assert_eq!(
        answer.blocking_recv().unwrap().unwrap_err().kind(),
        "timeout"
    );
    holder.join().unwrap();
    assert_eq!(stored(&worker, "a"), 0);
}

#[test]
fn calls_queued_together_are_served_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions::default();
    let conn = schema::open(&dir.path().join("limits.sqlite"), &options).unwrap();
    let (queue, jobs) = mpsc::sync_channel(100);
    let mut worker = Worker::new(conn, jobs, &options);
    worker.next_sweep = Duration::MAX;
    let (commits, _) = count_endings(&mut worker);
    let answers: Vec<_> = (0..100)
        .map(|_| {
            let (job, answer) = count_once("a");
            queue.send(job).unwrap();
            answer
        })
        .collect();
    drop(queue);
    worker.run();
    let counts: Vec<u64> = answers
        .into_iter()
        .map(|a| a.blocking_recv().unwrap().unwrap()[0])
        .collect();
    assert_eq!(counts, (1..=100).collect::<Vec<u64>>());
    assert_eq!(
        commits.load(Ordering::SeqCst),
        1,
        "100 queued calls, one commit"
    );
}

#[test]
fn an_idle_worker_looks_at_the_sweep_schedule_at_most_once_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let clock = tollgate_core::ManualClock::new(Duration::from_secs(1_000));
    let options = SqliteOptions::default()
        .sweep(Duration::from_secs(60), 10)
        .clock(clock.clone());
    let conn = schema::open(&dir.path().join("limits.sqlite"), &options).unwrap();
    let (_queue, jobs) = mpsc::sync_channel(1);
    let mut worker = Worker::new(conn, jobs, &options);
    assert_eq!(
        worker.idle_wait(),
        MIN_WAIT,
        "a sweep is due: look again soon"
    );
    worker.next_sweep = Duration::from_secs(1_030);
    assert_eq!(worker.idle_wait(), Duration::from_secs(30));
    worker.next_sweep = Duration::from_secs(5_000);
    assert_eq!(
        worker.idle_wait(),
        Duration::from_secs(60),
        "never longer than the interval"
    );
    let every_batch = SqliteOptions::default()
        .sweep(Duration::ZERO, 10)
        .clock(clock);
    let worker = Worker::new(
        schema::open(&dir.path().join("b.sqlite"), &every_batch).unwrap(),
        mpsc::sync_channel(1).1,
        &every_batch,
    );
    assert_eq!(
        worker.idle_wait(),
        MIN_WAIT,
        "an interval of zero does not spin"
    );
}

/// A worker sweeping at most `batch` rows a minute on `clock`, with
/// `expired` counters that expired at 1,000 s.
fn sweeping(
    dir: &tempfile::TempDir,
    clock: &tollgate_core::ManualClock,
    batch: u32,
    expired: usize,
) -> Worker {
    let options = SqliteOptions::default()
        .sweep(Duration::from_secs(60), batch)
        .clock(clock.clone());
    let conn = schema::open(&dir.path().join("limits.sqlite"), &options).unwrap();
    let (_queue, jobs) = mpsc::sync_channel(1);
    let worker = Worker::new(conn, jobs, &options);
    let counters: Vec<Counter> = (0..expired)
        .map(|i| Counter {
            ttl: Duration::from_secs(1),
            ..counter(&format!("old{i}"))
        })
        .collect();
    ops::count(
        &worker.conn,
        &counters,
        CheckId::new(),
        Duration::from_secs(999),
    )
    .unwrap();
    worker
}

fn rows(worker: &Worker) -> i64 {
    worker
        .conn
        .query_row("SELECT COUNT(*) FROM counters", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn a_full_sweep_sweeps_again_at_once_and_a_partial_one_waits_an_interval() {
    let dir = tempfile::tempdir().unwrap();
    let clock = tollgate_core::ManualClock::new(Duration::from_secs(1_000));
    let mut worker = sweeping(&dir, &clock, 2, 3);
    let logs = tollgate_test_support::Logs::default();
    logs.capture_blocking(tracing::Level::DEBUG, || worker.sweep_if_due());
    assert_eq!(rows(&worker), 1, "a batch of 2 of the 3 expired");
    assert_eq!(
        worker.next_sweep,
        clock.now(),
        "a full batch: more may wait"
    );
    assert!(logs.text().contains("removed=2"), "{}", logs.text());
    worker.sweep_if_due();
    assert_eq!(rows(&worker), 0);
    assert_eq!(
        worker.next_sweep,
        clock.now() + Duration::from_secs(60),
        "a partial batch: done for now"
    );
    clock.advance(Duration::from_secs(59));
    let later = counter("later");
    ops::count(
        &worker.conn,
        &[Counter {
            ttl: Duration::from_secs(1),
            ..later
        }],
        CheckId::new(),
        Duration::from_secs(1_000),
    )
    .unwrap();
    worker.sweep_if_due();
    assert_eq!(rows(&worker), 1, "swept before the interval passed");
}

#[test]
fn a_sweep_that_removes_nothing_waits_an_interval_and_logs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = tollgate_core::ManualClock::new(Duration::from_secs(1_000));
    for batch in [0, 10] {
        let dir = tempfile::tempdir_in(dir.path()).unwrap();
        let mut worker = sweeping(&dir, &clock, batch, 0);
        let logs = tollgate_test_support::Logs::default();
        logs.capture_blocking(tracing::Level::DEBUG, || worker.sweep_if_due());
        assert_eq!(
            worker.next_sweep,
            clock.now() + Duration::from_secs(60),
            "batch {batch}"
        );
        assert!(
            !logs.text().contains("swept"),
            "batch {batch}: {}",
            logs.text()
        );
    }
}

#[test]
fn a_sweep_never_waits_for_another_connections_lock_and_is_due_again_at_once() {
    // Calls may be queued behind a sweep, and they wait only by their own
    // deadlines: a sweep finding the file locked gives up at once, without
    // a warning, and tries again before the next batch.
    let dir = tempfile::tempdir().unwrap();
    let clock = tollgate_core::ManualClock::new(Duration::from_secs(1_000));
    let mut worker = sweeping(&dir, &clock, 10, 3);
    // A batch may leave a long busy timeout behind it.
    worker.conn.busy_timeout(Duration::from_secs(30)).unwrap();
    let other = Connection::open(dir.path().join("limits.sqlite")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let logs = tollgate_test_support::Logs::default();
    let started = Instant::now();
    logs.capture_blocking(tracing::Level::WARN, || worker.sweep_if_due());
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "the sweep waited {waited:?} for the lock"
    );
    assert_eq!(logs.text(), "", "a locked file is no failure");
    assert_eq!(rows(&worker), 3);
    assert_eq!(worker.next_sweep, clock.now(), "due again at once");
    other.execute_batch("ROLLBACK").unwrap();
    worker.sweep_if_due();
    assert_eq!(rows(&worker), 0);
}

#[test]
fn a_call_that_loses_the_transaction_fails_its_batch_with_its_own_error() {
    // On a full disk or an I/O error SQLite rolls the whole transaction
    // back (here: the call does so itself, then fails as disk full): the
    // batch cannot go on without that call, and its calls hear why, not
    // about a savepoint that is gone.
    let dir = tempfile::tempdir().unwrap();
    let worker = worker(&dir);
    let (first, first_answer) = count_once("a");
    let (lost, lost_answer) = call(Duration::from_secs(10), |conn, _| {
        conn.execute_batch("ROLLBACK")?;
        Err::<(), _>(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("disk full".into()),
        ))
    });
    worker.serve(vec![first, lost]);
    let first = first_answer.blocking_recv().unwrap().unwrap_err();
    let lost = lost_answer.blocking_recv().unwrap().unwrap_err();
    for failure in [first, lost] {
        let mut chain = failure.to_string();
        let mut source = std::error::Error::source(&failure);
        while let Some(cause) = source {
            chain.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        assert!(chain.contains("disk full"), "{chain}");
    }
    assert_eq!(stored(&worker, "a"), 0);
}

/// The counter `c`, of cost 1 within 3, less all of the prior `p`'s count.
fn weighed() -> Counter {
    Counter {
        max: 3,
        prior: Some(tollgate_core::Prior {
            key: "p".into(),
            part: 1,
            whole: 1,
        }),
        ..counter("c")
    }
}

/// Reserves [`weighed`] as the call `id` (an attempt of it), recording it.
fn reserve_as(id: u128) -> (Box<dyn Job>, Answer<tollgate_core::Reservation>) {
    let deadline = Deadline::after(Duration::from_secs(10));
    let once = ops::Once::new(tollgate_core::CheckId::from_u128(id), deadline);
    call(Duration::from_secs(10), move |conn, now| {
        let counters = [weighed()];
        ops::once(conn, &once, ops::replied(&counters), now, || {
            ops::reserve(conn, &counters, CheckId::new(), now)
        })
    })
}

/// Counts `key` by `cost`, without an id.
fn count_by_cost(key: &'static str, cost: u64) -> (Box<dyn Job>, Answer<Vec<u64>>) {
    call(Duration::from_secs(10), move |conn, now| {
        ops::count(
            conn,
            &[Counter {
                cost,
                ..counter(key)
            }],
            CheckId::new(),
            now,
        )
    })
}

fn reservation(applied: bool, counts: &[u64]) -> tollgate_core::Reservation {
    tollgate_core::Reservation {
        applied,
        counts: counts.to_vec(),
    }
}

/// In a batch, a prior is read where its call runs: after the writes of the
/// calls before it, without those of a call that failed alone (the batch
/// then runs again with savepoints), and a retry of the call in the same
/// batch or a later one answers the prior's count its first attempt read.
#[test]
fn a_prior_in_a_batch_reads_the_calls_before_it_and_its_retries_answer_what_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let worker = worker(&dir);
    let (first, first_answer) = count_by_cost("p", 1);
    let (failing, failing_answer) = call(Duration::from_secs(10), |conn, now| {
        ops::count(
            conn,
            &[Counter {
                cost: 5,
                ..counter("p")
            }],
            CheckId::new(),
            now,
        )?;
        Err::<(), _>(rusqlite::Error::QueryReturnedNoRows)
    });
    let (reserved, reserved_answer) = reserve_as(11);
    let (more, more_answer) = count_by_cost("p", 2);
    let (again, again_answer) = reserve_as(11);
    worker.serve(vec![first, failing, reserved, more, again]);
    assert_eq!(first_answer.blocking_recv().unwrap().unwrap(), vec![1]);
    assert!(failing_answer.blocking_recv().unwrap().is_err());
    assert_eq!(
        reserved_answer.blocking_recv().unwrap().unwrap(),
        reservation(true, &[1, 1]),
        "0 + 1 fits 3 less the prior's 1 (its rolled-back 5 unseen)"
    );
    assert_eq!(more_answer.blocking_recv().unwrap().unwrap(), vec![3]);
    assert_eq!(
        again_answer.blocking_recv().unwrap().unwrap(),
        reservation(true, &[1, 1]),
        "a retry in the same batch answered another prior's count"
    );

    let (retried, retried_answer) = reserve_as(11);
    let (next, next_answer) = reserve_as(12);
    worker.serve(vec![retried, next]);
    assert_eq!(
        retried_answer.blocking_recv().unwrap().unwrap(),
        reservation(true, &[1, 1]),
        "a retry in a later batch answered another prior's count"
    );
    assert_eq!(
        next_answer.blocking_recv().unwrap().unwrap(),
        reservation(false, &[1, 3]),
        "1 + 1 fits 3 less the prior's 3"
    );
    assert_eq!(stored(&worker, "c"), 1, "a retry was applied");
    assert_eq!(stored(&worker, "p"), 3, "a prior was written");
}
