//! [`SqliteOptions`] and [`Durability`]: how a store opens its file.

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Clock, SystemClock};

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
///     .busy_timeout(Duration::from_secs(2));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SqliteOptions {
    pub(crate) busy_timeout: Duration,
    pub(crate) durability: Durability,
    pub(crate) sweep_interval: Duration,
    pub(crate) sweep_batch: u32,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            durability: Durability::default(),
            sweep_interval: Duration::from_secs(60),
            sweep_batch: 10_000,
            clock: Arc::new(SystemClock),
        }
    }
}

impl SqliteOptions {
    /// How long a write waits for another process holding the file's write
    /// lock before failing as busy (5 s by default).
    pub fn busy_timeout(mut self, timeout: Duration) -> SqliteOptions {
        self.busy_timeout = timeout;
        self
    }

    /// What a committed count survives ([`Durability::Process`] by default).
    pub fn durability(mut self, durability: Durability) -> SqliteOptions {
        self.durability = durability;
        self
    }

    /// Removes at most `batch` expired counters every `interval` of the
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
