//! [`Job`]: one queued store call, run by the worker and answered after commit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;
use tollgate_core::{Deadline, StoreError};

use crate::error::{from_shared, worker_gone};

/// An SQLite failure, shared by every call of a failed batch.
pub(crate) type Failure = Arc<rusqlite::Error>;

/// A store call waiting in the worker's queue.
pub(crate) trait Job: Send {
    /// The instant after which the call must not be applied: its attempt's
    /// deadline.
    fn deadline(&self) -> Instant;

    /// Whether the caller has stopped waiting (its future was dropped, e.g.
    /// on its deadline); such a call is skipped rather than counted.
    fn is_abandoned(&self) -> bool;

    /// Runs the call inside the batch's transaction and keeps its outcome,
    /// replacing the outcome of an earlier run of a batch rolled back.
    fn run(&mut self, conn: &Connection, now: Duration) -> Result<(), Failure>;

    /// Notes that the call was not applied because its deadline came first;
    /// it will be answered [`StoreError::Timeout`].
    fn skip(&mut self);

    /// Whether the last run applied the call (not skipped, not failed).
    fn is_applied(&self) -> bool;

    /// Answers the caller once the batch is over: the kept outcome when the
    /// batch committed, the batch's failure otherwise. A skipped call is
    /// answered [`StoreError::Timeout`] either way.
    fn answer(self: Box<Self>, batch: Result<(), &Failure>);
}

/// What became of a call in its batch's latest run.
enum Outcome<T> {
    /// Not run yet.
    Pending,
    /// Run, with this result.
    Ran(Result<T, Failure>),
    /// Not applied: its deadline had (nearly) passed.
    Skipped,
}

/// A [`Job`] made of a closure over the connection and a reply channel.
pub(crate) struct Call<T, F> {
    op: F,
    deadline: Deadline,
    /// The time the caller had left when it queued the call, reported in a
    /// [`StoreError::Timeout`].
    budget: Duration,
    outcome: Outcome<T>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Call<T, F> {
    /// A call running `op` by `deadline` and answering on `reply`.
    pub(crate) fn new(
        op: F,
        deadline: Deadline,
        reply: oneshot::Sender<Result<T, StoreError>>,
    ) -> Call<T, F> {
        Call {
            op,
            deadline,
            budget: deadline.remaining(),
            outcome: Outcome::Pending,
            reply,
        }
    }
}

impl<T, F> Job for Call<T, F>
where
    T: Send,
    F: Fn(&Connection, Duration) -> rusqlite::Result<T> + Send,
{
    fn deadline(&self) -> Instant {
        self.deadline.instant()
    }

    fn is_abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run(&mut self, conn: &Connection, now: Duration) -> Result<(), Failure> {
        let outcome = (self.op)(conn, now).map_err(Arc::new);
        let result = match &outcome {
            Ok(_) => Ok(()),
            Err(failure) => Err(Arc::clone(failure)),
        };
        self.outcome = Outcome::Ran(outcome);
        result
    }

    fn skip(&mut self) {
        self.outcome = Outcome::Skipped;
    }

    fn is_applied(&self) -> bool {
        matches!(self.outcome, Outcome::Ran(Ok(_)))
    }

    fn answer(self: Box<Self>, batch: Result<(), &Failure>) {
        let answer = match (batch, self.outcome) {
            (_, Outcome::Skipped) => Err(StoreError::Timeout(self.budget)),
            (Err(failure), _) => Err(from_shared(failure)),
            (Ok(()), Outcome::Ran(Ok(value))) => Ok(value),
            (Ok(()), Outcome::Ran(Err(failure))) => Err(from_shared(&failure)),
            (Ok(()), Outcome::Pending) => Err(worker_gone()),
        };
        // The caller may have stopped waiting; nobody is left to tell.
        let _ = self.reply.send(answer);
    }
}
