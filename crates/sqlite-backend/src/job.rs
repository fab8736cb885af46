//! [`Job`]: one queued store call, run by the worker and answered after commit.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;
use tollgate_core::StoreError;

use crate::error::{from_shared, worker_gone};

/// An SQLite failure, shared by every call of a failed batch.
pub(crate) type Failure = Arc<rusqlite::Error>;

/// A store call waiting in the worker's queue.
pub(crate) trait Job: Send {
    /// Whether the caller has stopped waiting (its future was dropped, e.g.
    /// on a timeout); such a call is skipped rather than counted.
    fn is_abandoned(&self) -> bool;

    /// Runs the call inside the batch's transaction and keeps its outcome,
    /// replacing the outcome of an earlier run of a batch rolled back.
    fn run(&mut self, conn: &Connection, now: Duration) -> Result<(), Failure>;

    /// Answers the caller once the batch is over: the kept outcome when the
    /// batch committed, the batch's failure otherwise.
    fn answer(self: Box<Self>, batch: Result<(), &Failure>);
}

/// A [`Job`] made of a closure over the connection and a reply channel.
pub(crate) struct Call<T, F> {
    op: F,
    outcome: Option<Result<T, Failure>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Call<T, F> {
    /// A call running `op` and answering on `reply`.
    pub(crate) fn new(op: F, reply: oneshot::Sender<Result<T, StoreError>>) -> Call<T, F> {
        Call {
            op,
            outcome: None,
            reply,
        }
    }
}

impl<T, F> Job for Call<T, F>
where
    T: Send,
    F: Fn(&Connection, Duration) -> rusqlite::Result<T> + Send,
{
    fn is_abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run(&mut self, conn: &Connection, now: Duration) -> Result<(), Failure> {
        let outcome = (self.op)(conn, now).map_err(Arc::new);
        let result = match &outcome {
            Ok(_) => Ok(()),
            Err(failure) => Err(Arc::clone(failure)),
        };
        self.outcome = Some(outcome);
        result
    }

    fn answer(self: Box<Self>, batch: Result<(), &Failure>) {
        let answer = match (batch, self.outcome) {
            (Err(failure), _) => Err(from_shared(failure)),
            (Ok(()), Some(Ok(value))) => Ok(value),
            (Ok(()), Some(Err(failure))) => Err(from_shared(&failure)),
            (Ok(()), None) => Err(worker_gone()),
        };
        // The caller may have stopped waiting; nobody is left to tell.
        let _ = self.reply.send(answer);
    }
}
