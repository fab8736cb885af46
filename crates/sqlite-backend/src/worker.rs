//! The worker thread: owns the connection, runs queued calls in batches (one
//! write transaction per batch) and sweeps expired rows.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use rusqlite::Connection;
use tollgate_core::Clock;

use crate::SqliteOptions;
use crate::job::{Failure, Job};
use crate::ops;

/// The most calls run in one transaction.
const MAX_BATCH: usize = 1_024;

/// The shortest idle wait between two looks at the sweep schedule.
const MIN_WAIT: Duration = Duration::from_secs(1);

/// The queue end of a store's calls.
pub(crate) type Queue = Receiver<Box<dyn Job>>;

/// Owns the connection; lives on its own thread until every store handle
/// is dropped.
pub(crate) struct Worker {
    conn: Connection,
    queue: Queue,
    clock: Arc<dyn Clock>,
    sweep_interval: Duration,
    sweep_batch: u32,
    next_sweep: Duration,
}

impl Worker {
    /// A worker over `conn`, serving `queue`. Its first sweep comes before
    /// its first batch.
    pub(crate) fn new(conn: Connection, queue: Queue, options: &SqliteOptions) -> Worker {
        Worker {
            conn,
            queue,
            clock: Arc::clone(&options.clock),
            sweep_interval: options.sweep_interval,
            sweep_batch: options.sweep_batch,
            next_sweep: Duration::ZERO,
        }
    }

    /// Serves calls until every sender is dropped, then closes the connection.
    pub(crate) fn run(mut self) {
        loop {
            let first = match self.queue.recv_timeout(self.idle_wait()) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            self.sweep_if_due();
            if let Some(first) = first {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match self.queue.try_recv() {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
                self.serve(batch);
            }
        }
        if let Err((_, err)) = self.conn.close() {
            tracing::warn!(error = %err, "closing the counter store failed");
        }
    }

    /// How long to wait for a call before looking at the sweep schedule again.
    fn idle_wait(&self) -> Duration {
        let until = self.next_sweep.saturating_sub(self.clock.now());
        until.clamp(MIN_WAIT, self.sweep_interval.max(MIN_WAIT))
    }

    /// Runs one batch and answers every call in it.
    fn serve(&self, batch: Vec<Box<dyn Job>>) {
        let mut jobs: Vec<Box<dyn Job>> = batch.into_iter().filter(|j| !j.is_abandoned()).collect();
        if jobs.is_empty() {
            return;
        }
        let now = self.clock.now();
        // Optimistic first: the whole batch without savepoints. When a call
        // fails, the batch is rolled back and run again with a savepoint per
        // call, so that call fails alone. Calls only answer after commit, so
        // running one twice is invisible.
        let mut call_failed = false;
        let mut result = self.transaction(|conn| run_all(conn, &mut jobs, now, &mut call_failed));
        if result.is_err() && call_failed {
            result = self.transaction(|conn| run_each_alone(conn, &mut jobs, now));
        }
        match result {
            Ok(()) => jobs.into_iter().for_each(|job| job.answer(Ok(()))),
            Err(failure) => {
                tracing::warn!(error = %failure, calls = jobs.len(), "counter store batch failed");
                jobs.into_iter().for_each(|job| job.answer(Err(&failure)));
            }
        }
    }

    /// Runs `body` in one immediate write transaction, committed when it
    /// succeeds and rolled back otherwise.
    fn transaction(
        &self,
        body: impl FnOnce(&Connection) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        exec(&self.conn, "BEGIN IMMEDIATE")?;
        let result = body(&self.conn).and_then(|()| exec(&self.conn, "COMMIT"));
        if result.is_err() && !self.conn.is_autocommit() {
            // The batch's own failure is what callers need to hear about.
            let _ = exec(&self.conn, "ROLLBACK");
        }
        result
    }

    /// Removes a bounded batch of expired rows when the sweep is due. A full
    /// batch makes the next sweep due at once, so a backlog clears batch by
    /// batch between calls.
    fn sweep_if_due(&mut self) {
        let now = self.clock.now();
        if now < self.next_sweep {
            return;
        }
        let mut removed = 0;
        let result = self.transaction(|conn| {
            removed = ops::sweep(conn, self.sweep_batch, now).map_err(Arc::new)?;
            Ok(())
        });
        match result {
            Ok(()) if removed > 0 && removed >= self.sweep_batch as usize => self.next_sweep = now,
            Ok(()) => self.next_sweep = now.saturating_add(self.sweep_interval),
            Err(failure) => {
                tracing::warn!(error = %failure, "sweeping expired counters failed");
                self.next_sweep = now.saturating_add(self.sweep_interval);
            }
        }
        if removed > 0 {
            tracing::debug!(removed, "swept expired counters");
        }
    }
}

/// Runs every call of a batch; stops at the first failing call, noting it
/// in `call_failed`.
fn run_all(
    conn: &Connection,
    jobs: &mut [Box<dyn Job>],
    now: Duration,
    call_failed: &mut bool,
) -> Result<(), Failure> {
    for job in jobs.iter_mut() {
        if let Err(failure) = job.run(conn, now) {
            *call_failed = true;
            return Err(failure);
        }
    }
    Ok(())
}

/// Runs each call of a batch in its own savepoint: a failing call is rolled
/// back alone and the others go on. Fails the whole batch only when the
/// transaction itself is lost.
fn run_each_alone(
    conn: &Connection,
    jobs: &mut [Box<dyn Job>],
    now: Duration,
) -> Result<(), Failure> {
    for job in jobs.iter_mut() {
        exec(conn, "SAVEPOINT call")?;
        match job.run(conn, now) {
            Ok(()) => exec(conn, "RELEASE call")?,
            // SQLite rolled the whole transaction back (disk full, I/O error).
            Err(failure) if conn.is_autocommit() => return Err(failure),
            Err(_) => {
                exec(conn, "ROLLBACK TO call")?;
                exec(conn, "RELEASE call")?;
            }
        }
    }
    Ok(())
}

/// Runs one statement that returns no rows, cached.
fn exec(conn: &Connection, sql: &str) -> Result<(), Failure> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .map(|_| ())
        .map_err(Arc::new)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::mpsc;

    use tokio::sync::oneshot;
    use tollgate_core::{Counter, StoreError};

    use super::*;
    use crate::job::Call;
    use crate::schema;

    fn counter(key: &str) -> Counter {
        Counter {
            key: key.into(),
            ttl: Duration::from_secs(60),
            max: 10,
        }
    }

    type Answer<T> = oneshot::Receiver<Result<T, StoreError>>;

    fn call<T, F>(op: F) -> (Box<dyn Job>, Answer<T>)
    where
        T: Send + 'static,
        F: Fn(&Connection, Duration) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        (Box::new(Call::new(op, reply)), answer)
    }

    fn increment(key: &'static str) -> (Box<dyn Job>, Answer<Vec<u64>>) {
        call(move |conn, now| ops::increment(conn, &[counter(key)], now))
    }

    fn count(worker: &Worker, key: &str) -> u64 {
        let now = worker.clock.now();
        ops::get(&worker.conn, [key], now).unwrap()[0]
    }

    fn worker(dir: &tempfile::TempDir) -> Worker {
        let options = SqliteOptions::default();
        let conn = schema::open(&dir.path().join("limits.sqlite"), &options).unwrap();
        let (_queue, jobs) = mpsc::channel();
        Worker::new(conn, jobs, &options)
    }

    #[test]
    fn a_failing_call_fails_alone_and_its_writes_are_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let worker = worker(&dir);
        let (first, first_answer) = increment("a");
        let (failing, failing_answer) = call(|conn, now| {
            ops::increment(conn, &[counter("b")], now)?;
            Err::<(), _>(rusqlite::Error::QueryReturnedNoRows)
        });
        let (last, last_answer) = increment("c");
        worker.serve(vec![first, failing, last]);

        assert_eq!(first_answer.blocking_recv().unwrap().unwrap(), vec![1]);
        assert_eq!(last_answer.blocking_recv().unwrap().unwrap(), vec![1]);
        let failure = failing_answer.blocking_recv().unwrap().unwrap_err();
        assert_eq!(failure.kind(), "backend");
        assert_eq!(count(&worker, "a"), 1);
        assert_eq!(
            count(&worker, "b"),
            0,
            "the failing call's increment was kept"
        );
        assert_eq!(count(&worker, "c"), 1);
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
        let (jobs, answers): (Vec<_>, Vec<_>) = (0..100).map(|_| increment("a")).unzip();
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
        let (abandoned, answer) = increment("a");
        drop(answer);
        let (kept, kept_answer) = increment("b");
        worker.serve(vec![abandoned, kept]);
        assert_eq!(kept_answer.blocking_recv().unwrap().unwrap(), vec![1]);
        assert_eq!(count(&worker, "a"), 0);
    }

    #[test]
    fn a_batch_that_cannot_lock_the_file_fails_every_call_as_busy() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions::default().busy_timeout(Duration::from_millis(10));
        let path = dir.path().join("limits.sqlite");
        let conn = schema::open(&path, &options).unwrap();
        let (_queue, jobs) = mpsc::channel();
        let worker = Worker::new(conn, jobs, &options);
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();

        let (first, first_answer) = increment("a");
        let (second, second_answer) = increment("b");
        worker.serve(vec![first, second]);
        for answer in [first_answer, second_answer] {
            let failure = answer.blocking_recv().unwrap().unwrap_err();
            assert_eq!(failure.kind(), "busy");
            assert!(failure.is_transient());
        }
        other.execute_batch("ROLLBACK").unwrap();
        let (again, answer) = increment("a");
        worker.serve(vec![again]);
        assert_eq!(answer.blocking_recv().unwrap().unwrap(), vec![1]);
    }
}
