//! [`SqliteStore`]: the async handle, sending calls to the worker thread:
//! the [`CounterStore`] calls (leases included) and the [`MarkStore`] calls.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;
use tollgate_core::{
    CheckId, Claim, Counter, CounterStore, Deadline, Leases, MarkStore, Named, Reservation,
    StoreError, Window, async_trait,
};

use crate::error::{queue_full, worker_gone};
use crate::job::{Call, Job};
use crate::ops::Once;
use crate::worker::Worker;
use crate::{Error, SqliteOptions, leases, marks, ops, schema};

/// A durable [`CounterStore`] and [`MarkStore`] in one SQLite file.
///
/// It keeps counters, webhook marks and sets of leases (a concurrency
/// limit's [`lease`](Counter::lease) counters; a lease's id is its
/// [`CheckId`], stored as its 128 bits). Leases expire by the store's clock
/// ([`SqliteOptions::clock`]), as counters do.
///
/// Cheap to clone: clones share one connection, served by one worker thread
/// that runs concurrent calls together in one write transaction. Several
/// stores, in one process or several, may open the same file; each check
/// is atomic across all of them. Dropping the last clone stops the worker and
/// closes the file.
///
/// Each call is queued for the worker with its [`Deadline`]; a call whose
/// deadline has passed when the worker holds the file's write lock is not
/// applied and fails as [`StoreError::Timeout`]. The queue is bounded
/// ([`SqliteOptions::queue_capacity`]): a call made while it is full fails
/// at once as [`StoreError::Busy`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate_core::{Limiter, RuleSet};
/// use tollgate_sqlite::SqliteStore;
///
/// let store = SqliteStore::open("/var/lib/myapp/limits.sqlite")?;
/// let limiter = Limiter::new(store);
/// let ask = RuleSet::defaults().get("ask")?.limit(&["docs", "203.0.113.9"])?;
/// let verdict = limiter.count(&[ask]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteStore {
    queue: SyncSender<Box<dyn Job>>,
    capacity: usize,
    path: Arc<Path>,
}

impl SqliteStore {
    /// Opens (or creates) the counter store at `path` with the default
    /// [`SqliteOptions`]: survives a process crash, queues up to 4,096 calls.
    ///
    /// This is blocking file I/O: call it at startup, not on a hot path.
    ///
    /// # Errors
    ///
    /// An [`Error`] when the file cannot be created or written, is not a
    /// database, belongs to another application or has an unknown schema
    /// version.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Opens (or creates) the counter store at `path` with `options`.
    ///
    /// # Errors
    ///
    /// As [`SqliteStore::open`].
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, Error> {
        let path = path.as_ref();
        let conn = schema::open(path, &options)?;
        let (queue, jobs) = mpsc::sync_channel(options.queue_capacity);
        let worker = Worker::new(conn, jobs, &options);
        std::thread::Builder::new()
            .name("tollgate-sqlite".into())
            .spawn(move || worker.run())
            .map_err(Error::Worker)?;
        Ok(SqliteStore {
            queue,
            capacity: options.queue_capacity,
            path: path.into(),
        })
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `op` for the worker and waits for its answer, given after the
    /// batch holding it has committed. A call past its deadline is not
    /// queued; a full queue fails the call at once.
    async fn call<T, F>(&self, deadline: Deadline, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection, Duration) -> rusqlite::Result<T> + Send + 'static,
    {
        if deadline.has_passed() {
            return Err(StoreError::Timeout(Duration::ZERO));
        }
        let (reply, answer) = oneshot::channel();
        match self
            .queue
            .try_send(Box::new(Call::new(op, deadline, reply)))
        {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(queue_full(self.capacity)),
            Err(TrySendError::Disconnected(_)) => return Err(worker_gone()),
        }
        answer.await.map_err(|_| worker_gone())?
    }
}

/// Refuses a count or reservation with a malformed
/// [`prior`](Counter::prior) (a `whole` of 0 or above
/// [`Window::MAX_SECS`], or a `part` above it) or a malformed
/// [`lease`](Counter::lease) counter ([`leases_well_formed`]) as a
/// permanent [`StoreError::Backend`], before it is queued. How many counts
/// the call answers otherwise ([`ops::replied`]).
fn well_formed(counters: &[Counter]) -> Result<usize, StoreError> {
    leases_well_formed(counters)?;
    let malformed = counters.iter().find_map(|c| {
        c.prior
            .as_ref()
            .filter(|p| p.whole == 0 || p.whole > Window::MAX_SECS || p.part > p.whole)
    });
    match malformed {
        None => Ok(ops::replied(counters)),
        Some(prior) => Err(StoreError::Backend(
            format!(
                "a malformed prior of {}: {} parts of {} (a whole is 1 to {}, a part at most \
                 the whole)",
                prior.key,
                prior.part,
                prior.whole,
                Window::MAX_SECS
            )
            .into(),
        )),
    }
}

/// Refuses a [`lease`](Counter::lease) counter whose cost is not 1, whose
/// floor is not 0 or which has a prior, as a permanent
/// [`StoreError::Backend`] (the core never sends one).
fn leases_well_formed(counters: &[Counter]) -> Result<(), StoreError> {
    let malformed = counters
        .iter()
        .find(|c| c.lease && (c.cost != 1 || c.floor != 0 || c.prior.is_some()));
    match malformed {
        None => Ok(()),
        Some(c) => Err(StoreError::Backend(
            format!(
                "a malformed set of leases {}: cost {}, floor {}, {} (a set of leases costs \
                 1, has floor 0 and no prior)",
                c.key,
                c.cost,
                c.floor,
                if c.prior.is_some() {
                    "a prior"
                } else {
                    "no prior"
                }
            )
            .into(),
        )),
    }
}

/// The reply of a counter call that always applies (a count, a refund).
fn applied(counts: Vec<u64>) -> Reservation {
    Reservation {
        applied: true,
        counts,
    }
}

impl Named for SqliteStore {
    fn name(&self) -> &'static str {
        "sqlite"
    }
}

#[async_trait]
impl CounterStore for SqliteStore {
    async fn count(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let replied = well_formed(counters)?;
        let counters = counters.to_vec();
        let call = Once::new(id, deadline);
        let reply = self
            .call(deadline, move |conn, now| {
                ops::once(conn, &call, replied, now, || {
                    ops::count(conn, &counters, id, now).map(applied)
                })
            })
            .await?;
        Ok(reply.counts)
    }

    async fn reserve(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let replied = well_formed(counters)?;
        let counters = counters.to_vec();
        let call = Once::new(id, deadline);
        self.call(deadline, move |conn, now| {
            ops::once(conn, &call, replied, now, || {
                ops::reserve(conn, &counters, id, now)
            })
        })
        .await
    }

    async fn refund(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        leases_well_formed(counters)?;
        let counters = counters.to_vec();
        let call = Once::new(id, deadline);
        let reply = self
            .call(deadline, move |conn, now| {
                ops::once(conn, &call, counters.len(), now, || {
                    ops::refund(conn, &counters, now).map(applied)
                })
            })
            .await?;
        Ok(reply.counts)
    }

    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        let keys = keys.to_vec();
        self.call(deadline, move |conn, now| ops::get(conn, &keys, now))
            .await
    }

    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        let key = key.to_owned();
        self.call(deadline, move |conn, now| ops::delete(conn, &key, now))
            .await
    }

    /// Ends the lease `id` at `key` in one transaction (its set's expired
    /// leases removed first); whether it was held.
    async fn end_lease(
        &self,
        key: &str,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let key = key.to_owned();
        self.call(deadline, move |conn, now| leases::end(conn, &key, id, now))
            .await
    }

    /// Makes the lease `id` at `key` end `lifetime` from now, in one
    /// transaction (its set's expired leases removed first); whether it was
    /// held. A lease not held is not taken.
    async fn renew_lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let key = key.to_owned();
        self.call(deadline, move |conn, now| {
            leases::renew(conn, &key, id, lifetime, now)
        })
        .await
    }

    /// The leases held at `key` and the time until the first ends, read in
    /// one transaction that changes nothing.
    async fn leases(&self, key: &str, deadline: Deadline) -> Result<Leases, StoreError> {
        let key = key.to_owned();
        self.call(deadline, move |conn, now| leases::status(conn, &key, now))
            .await
    }
}

#[async_trait]
impl MarkStore for SqliteStore {
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.call(deadline, move |conn, now| {
            marks::claim(conn, &key, &token, ttl, now)
        })
        .await
    }

    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.call(deadline, move |conn, now| {
            marks::finish(conn, &key, &token, ttl, now)
        })
        .await
    }

    async fn release(
        &self,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let (key, token) = (key.to_owned(), token.to_owned());
        self.call(deadline, move |conn, now| {
            marks::release(conn, &key, &token, now)
        })
        .await
    }
}
