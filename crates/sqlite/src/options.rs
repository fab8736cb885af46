//! [`SqliteOptions`] and [`Durability`]: how a store opens its file.

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Clock, SystemClock};

use crate::worker::MAX_WAIT;

/// What a committed count survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// Survives the crash or kill of any process (`synchronous = NORMAL` in
    /// WAL mode): a commit is in the operating system before a call returns.
    /// A power loss or kernel crash may lose the last commits (never corrupt
    /// the file). The default.
    #[default]
    Process,
    /// Also survives a power loss (`synchronous = FULL`): every commit waits
    /// for an fsync of the log. Batching keeps this to one fsync per batch.
    PowerLoss,
}

impl Durability {
    /// The value of `PRAGMA synchronous` for this setting.
    pub(crate) fn synchronous(self) -> &'static str {
        match self {
            Durability::Process => "NORMAL",
            Durability::PowerLoss => "FULL",
        }
    }
}

/// How [`SqliteStore::open_with`](crate::SqliteStore::open_with) opens a store.
///
/// ```
/// use std::time::Duration;
/// use tollgate_sqlite::{Durability, SqliteOptions};
/// let options = SqliteOptions::default()
///     .durability(Durability::PowerLoss)
///     .queue_capacity(1_024)
///     .sweep(Duration::from_secs(30), 5_000);
/// ```
///
/// Calls have no busy timeout to set: a batch of calls waits for another
/// process's write lock only until the latest deadline among its calls
/// (each call carries the [`Deadline`](tollgate_core::Deadline) its
/// [`Limiter`](tollgate_core::Limiter) gave it), and applies no call whose
/// deadline has passed by the time the lock is held. Only opening has one
/// ([`open_busy_timeout`](SqliteOptions::open_busy_timeout)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SqliteOptions {
    pub(crate) queue_capacity: usize,
    pub(crate) durability: Durability,
    pub(crate) sweep_interval: Duration,
    pub(crate) sweep_batch: u32,
    pub(crate) open_busy_timeout: Duration,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            queue_capacity: SqliteOptions::DEFAULT_QUEUE_CAPACITY,
            durability: Durability::default(),
            sweep_interval: Duration::from_secs(60),
            sweep_batch: 10_000,
            open_busy_timeout: SqliteOptions::DEFAULT_OPEN_BUSY_TIMEOUT,
            clock: Arc::new(SystemClock),
        }
    }
}

impl SqliteOptions {
    /// The default [`queue_capacity`](SqliteOptions::queue_capacity): 4,096 calls.
    pub const DEFAULT_QUEUE_CAPACITY: usize = 4_096;

    /// The default [`open_busy_timeout`](SqliteOptions::open_busy_timeout):
    /// 5 s. (It was the constant `OPEN_BUSY_TIMEOUT` before opening's wait
    /// became an option.)
    pub const DEFAULT_OPEN_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

    /// The most calls waiting for the worker thread ([`DEFAULT_QUEUE_CAPACITY`]
    /// by default, at least 1). A call made while the queue is full fails at
    /// once as a transient `StoreError::Busy`, so a stalled file (another
    /// process holding its lock) never piles up memory.
    ///
    /// [`DEFAULT_QUEUE_CAPACITY`]: SqliteOptions::DEFAULT_QUEUE_CAPACITY
    pub fn queue_capacity(mut self, capacity: usize) -> SqliteOptions {
        self.queue_capacity = capacity.max(1);
        self
    }

    /// How long opening waits for another process holding the file's lock
    /// while it checks or creates the schema
    /// ([`DEFAULT_OPEN_BUSY_TIMEOUT`] by default; at most `i32::MAX`
    /// milliseconds, about 24 days, the most SQLite takes). Calls never
    /// wait this long; they wait until their own deadline.
    ///
    /// [`DEFAULT_OPEN_BUSY_TIMEOUT`]: SqliteOptions::DEFAULT_OPEN_BUSY_TIMEOUT
    pub fn open_busy_timeout(mut self, timeout: Duration) -> SqliteOptions {
        self.open_busy_timeout = timeout.min(MAX_WAIT);
        self
    }

    /// What a committed count survives ([`Durability::Process`] by default).
    pub fn durability(mut self, durability: Durability) -> SqliteOptions {
        self.durability = durability;
        self
    }

    /// Removes at most `batch` expired counters and marks every `interval` of the
    /// store's clock (10,000 every minute by default). An interval of zero
    /// sweeps before every batch of calls.
    pub fn sweep(mut self, interval: Duration, batch: u32) -> SqliteOptions {
        self.sweep_interval = interval;
        self.sweep_batch = batch;
        self
    }

    /// The clock that decides when counters expire and when to sweep
    /// ([`SystemClock`] by default); tests pass a `ManualClock`.
    pub fn clock(mut self, clock: impl Clock) -> SqliteOptions {
        self.clock = Arc::new(clock);
        self
    }
}
