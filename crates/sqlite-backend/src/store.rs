//! [`SqliteStore`]: the async handle, sending calls to the worker thread.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;
use tollgate_core::{Counter, CounterStore, Expiry, Reservation, StoreError, async_trait};

use crate::error::worker_gone;
use crate::job::{Call, Job};
use crate::worker::Worker;
use crate::{Error, SqliteOptions, ops, schema};

/// A durable [`CounterStore`] in one SQLite file.
///
/// Cheap to clone: clones share one connection, served by one worker thread
/// that runs concurrent calls together in one write transaction. Several
/// stores, in one process or several, may open the same file; each check
/// is atomic across all of them. Dropping the last clone stops the worker and
/// closes the file.
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
    queue: Sender<Box<dyn Job>>,
    path: Arc<Path>,
}

impl SqliteStore {
    /// Opens (or creates) the counter store at `path` with the default
    /// [`SqliteOptions`]: survives a process crash, 5 s busy timeout.
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
        let (queue, jobs) = mpsc::channel();
        let worker = Worker::new(conn, jobs, &options);
        std::thread::Builder::new()
            .name("tollgate-sqlite".into())
            .spawn(move || worker.run())
            .map_err(Error::Worker)?;
        Ok(SqliteStore {
            queue,
            path: path.into(),
        })
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `op` for the worker and waits for its answer, given after the
    /// batch holding it has committed.
    async fn call<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection, Duration) -> rusqlite::Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Box::new(Call::new(op, reply)))
            .map_err(|_| worker_gone())?;
        answer.await.map_err(|_| worker_gone())?
    }
}

#[async_trait]
impl CounterStore for SqliteStore {
    async fn increment(&self, counters: &[Counter]) -> Result<Vec<u64>, StoreError> {
        let counters = counters.to_vec();
        self.call(move |conn, now| ops::increment(conn, &counters, now))
            .await
    }

    async fn increment_within(&self, counters: &[Counter]) -> Result<Reservation, StoreError> {
        let counters = counters.to_vec();
        self.call(move |conn, now| ops::increment_within(conn, &counters, now))
            .await
    }

    async fn get(&self, keys: &[String]) -> Result<Vec<u64>, StoreError> {
        let keys = keys.to_vec();
        self.call(move |conn, now| ops::get(conn, &keys, now)).await
    }

    async fn set_if_absent(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        let key = key.to_owned();
        self.call(move |conn, now| ops::set_if_absent(conn, &key, ttl, now))
            .await
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let key = key.to_owned();
        self.call(move |conn, now| ops::delete(conn, &key, now))
            .await
    }

    async fn expiry(&self, key: &str) -> Result<Expiry, StoreError> {
        let key = key.to_owned();
        self.call(move |conn, now| ops::expiry(conn, &key, now))
            .await
    }
}
