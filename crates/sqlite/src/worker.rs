//! The worker thread: owns the connection, runs queued calls in batches (one
//! write transaction per batch) and sweeps expired rows.
//!
//! Time has one owner, the deadline each call carries: a batch waits for
//! another process's write lock only until the latest deadline among its
//! calls, and once it holds the lock it applies no call whose deadline has
//! (nearly) passed. Such a call is answered `StoreError::Timeout`, having
//! written nothing; so is every call of a batch that waited for the lock
//! in vain.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tollgate_core::Clock;

use crate::SqliteOptions;
use crate::calls::Calls;
use crate::job::{Failure, Job};
use crate::{leases, marks, ops, schema};

/// The most calls run in one transaction.
const MAX_BATCH: usize = 1_024;

/// The shortest idle wait between two looks at the sweep schedule. Not a
/// time budget: the cadence of an idle loop, which a queued call interrupts.
const MIN_WAIT: Duration = Duration::from_secs(1);

/// The least time a call must have left to be applied: its batch still has
/// to commit and answer before the caller's deadline. A batch that went late
/// anyway runs again with a margin grown by the time its late run took. Not
/// a time budget: nothing waits for it; it is how close to its own deadline
/// a call may still be applied.
const MARGIN: Duration = Duration::from_millis(1);

/// The longest busy timeout SQLite takes (`i32::MAX` milliseconds). Not a
/// time budget: a clamp of the waits set (a batch's, from its deadlines;
/// opening's, from the options) to the API's range.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(i32::MAX as u64);

/// The queue end of a store's calls.
pub(crate) type Queue = Receiver<Box<dyn Job>>;

/// How a batch's transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Committed: every call applied is answered with its outcome.
    Committed,
    /// Rolled back because a call's deadline came before the commit; the
    /// batch runs again without it.
    Late,
}

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
    fn serve(&self, mut jobs: Vec<Box<dyn Job>>) {
        let mut margin = MARGIN;
        loop {
            jobs = answer_late(jobs, margin);
            let Some(latest) = jobs.iter().map(|job| job.deadline()).max() else {
                return;
            };
            // Wait for another process's lock no longer than the last call
            // of the batch can still be applied.
            let wait = latest
                .saturating_duration_since(Instant::now())
                .saturating_sub(margin)
                .min(MAX_WAIT);
            if let Err(err) = self.conn.busy_timeout(wait) {
                let failure = Arc::new(err);
                jobs.into_iter().for_each(|job| job.answer(Err(&failure)));
                return;
            }
            let now = self.clock.now();
            // How long the batch's calls took to run, under the lock.
            let mut took = Duration::ZERO;
            // Optimistic first: the whole batch without savepoints. When a
            // call fails, the batch is rolled back and run again with a
            // savepoint per call, so that call fails alone. Calls only
            // answer after commit, so running one twice is invisible.
            let mut call_failed = false;
            let mut result = self.transaction(|conn| {
                let started = Instant::now();
                Calls::with(Calls::begin);
                run_all(conn, &mut jobs, now, margin, &mut call_failed)?;
                ops::record_batch(conn, now).map_err(Arc::new)?;
                took = started.elapsed();
                Ok(in_time(&jobs, margin))
            });
            if result.is_err() && call_failed {
                result = self.transaction(|conn| {
                    let started = Instant::now();
                    Calls::with(Calls::begin);
                    run_each_alone(conn, &mut jobs, now, margin)?;
                    ops::record_batch(conn, now).map_err(Arc::new)?;
                    took = started.elapsed();
                    Ok(in_time(&jobs, margin))
                });
            }
            match result {
                Ok(Ending::Committed) => {
                    jobs.into_iter().for_each(|job| job.answer(Ok(())));
                    return;
                }
                // The late calls are answered at the top of the loop, with
                // every call that would not survive another run as long:
                // the margin only grows, so each run drops at least one call.
                Ok(Ending::Late) => margin = margin.max(MARGIN.saturating_add(took)),
                // Another connection kept the file locked through the
                // batch's wait, which lasts until its latest deadline (as
                // far as SQLite's busy handler sleeps): its calls had no
                // answer by their deadlines, a timeout (transient), not a
                // store answering busy at once. Nothing was applied.
                Err(failure) if schema::is_busy(&failure) => {
                    tracing::warn!(
                        calls = jobs.len(),
                        "the counter store file stayed locked by another connection until \
                         the calls' deadlines"
                    );
                    for mut job in jobs {
                        job.skip();
                        job.answer(Ok(()));
                    }
                    return;
                }
                Err(failure) => {
                    tracing::warn!(error = %failure, calls = jobs.len(), "counter store batch failed");
                    jobs.into_iter().for_each(|job| job.answer(Err(&failure)));
                    return;
                }
            }
        }
    }

    /// Runs `body` in one immediate write transaction, committed when it
    /// asks to and rolled back otherwise.
    fn transaction(
        &self,
        body: impl FnOnce(&Connection) -> Result<Ending, Failure>,
    ) -> Result<Ending, Failure> {
        exec(&self.conn, "BEGIN IMMEDIATE")?;
        let result = body(&self.conn).and_then(|ending| match ending {
            Ending::Committed => exec(&self.conn, "COMMIT").map(|()| ending),
            Ending::Late => exec(&self.conn, "ROLLBACK").map(|()| ending),
        });
        if result.is_err() && !self.conn.is_autocommit() {
            // The batch's own failure is what callers need to hear about.
            let _ = exec(&self.conn, "ROLLBACK");
        }
        result
    }

    /// Removes a bounded batch of expired counters, marks, rows of call
    /// records and sets of leases (whose every lease has expired) when the
    /// sweep is due. A full batch makes the next sweep due at once, so a
    /// backlog clears batch by batch between calls.
    ///
    /// A sweep never waits for another process's write lock: calls may be
    /// queued behind it, and a call waits only as long as its own deadline
    /// says. A sweep that finds the file locked is due again at once, and
    /// tries again before the next batch (or at the next idle look).
    fn sweep_if_due(&mut self) {
        let now = self.clock.now();
        if now < self.next_sweep {
            return;
        }
        let mut removed = 0;
        let result = self
            .conn
            .busy_timeout(Duration::ZERO)
            .map_err(Arc::new)
            .and_then(|()| {
                self.transaction(|conn| {
                    removed = ops::sweep(conn, self.sweep_batch, now).map_err(Arc::new)?;
                    let left = self
                        .sweep_batch
                        .saturating_sub(removed.try_into().unwrap_or(u32::MAX));
                    removed += marks::sweep(conn, left, now).map_err(Arc::new)?;
                    let left = self
                        .sweep_batch
                        .saturating_sub(removed.try_into().unwrap_or(u32::MAX));
                    removed += ops::sweep_records(conn, left, now).map_err(Arc::new)?;
                    let left = self
                        .sweep_batch
                        .saturating_sub(removed.try_into().unwrap_or(u32::MAX));
                    removed += leases::sweep(conn, left, now).map_err(Arc::new)?;
                    Ok(Ending::Committed)
                })
            });
        match result {
            Ok(_) if removed > 0 && removed >= self.sweep_batch as usize => self.next_sweep = now,
            Ok(_) => self.next_sweep = now.saturating_add(self.sweep_interval),
            Err(failure) if schema::is_busy(&failure) => {
                tracing::debug!("the file is locked by another connection; sweeping later");
                self.next_sweep = now;
            }
            Err(failure) => {
                tracing::warn!(error = %failure, "sweeping expired counters failed");
                self.next_sweep = now.saturating_add(self.sweep_interval);
            }
        }
        if removed > 0 {
            tracing::debug!(
                removed,
                "swept expired counters, marks, call records and leases"
            );
        }
    }
}

/// Whether a call has too little time left to be applied and answered.
fn is_late(job: &dyn Job, margin: Duration, now: Instant) -> bool {
    job.deadline().saturating_duration_since(now) < margin
}

/// Answers the calls that are too late with `StoreError::Timeout` and drops
/// those nobody waits for; the others, in order.
fn answer_late(jobs: Vec<Box<dyn Job>>, margin: Duration) -> Vec<Box<dyn Job>> {
    let now = Instant::now();
    let mut kept = Vec::with_capacity(jobs.len());
    for mut job in jobs {
        if job.is_abandoned() {
            continue;
        }
        if is_late(job.as_ref(), margin, now) {
            job.skip();
            job.answer(Ok(()));
        } else {
            kept.push(job);
        }
    }
    kept
}

/// Whether every call applied still has its margin left, so the batch may
/// commit; otherwise it is rolled back and run again without the late ones.
fn in_time(jobs: &[Box<dyn Job>], margin: Duration) -> Ending {
    let now = Instant::now();
    if jobs
        .iter()
        .any(|job| job.is_applied() && is_late(job.as_ref(), margin, now))
    {
        Ending::Late
    } else {
        Ending::Committed
    }
}

/// Applies a call unless its caller gave up or its deadline has (nearly)
/// passed: checked under the write lock, just before the call's writes.
fn run_one(
    conn: &Connection,
    job: &mut Box<dyn Job>,
    now: Duration,
    margin: Duration,
) -> Result<(), Failure> {
    if job.is_abandoned() || is_late(job.as_ref(), margin, Instant::now()) {
        job.skip();
        return Ok(());
    }
    job.run(conn, now)
}

/// Runs every call of a batch; stops at the first failing call, noting it
/// in `call_failed`.
fn run_all(
    conn: &Connection,
    jobs: &mut [Box<dyn Job>],
    now: Duration,
    margin: Duration,
    call_failed: &mut bool,
) -> Result<(), Failure> {
    for job in jobs.iter_mut() {
        if let Err(failure) = run_one(conn, job, now, margin) {
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
    margin: Duration,
) -> Result<(), Failure> {
    for job in jobs.iter_mut() {
        exec(conn, "SAVEPOINT call")?;
        let mark = Calls::with(|calls| calls.mark());
        match run_one(conn, job, now, margin) {
            Ok(()) => exec(conn, "RELEASE call")?,
            // SQLite rolled the whole transaction back (disk full, I/O error).
            Err(failure) if conn.is_autocommit() => return Err(failure),
            Err(_) => {
                exec(conn, "ROLLBACK TO call")?;
                exec(conn, "RELEASE call")?;
                Calls::with(|calls| calls.rollback_to(mark));
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
#[path = "worker_tests.rs"]
mod tests;
