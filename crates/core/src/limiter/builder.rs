//! [`LimiterBuilder`]: a limiter's store, clock, retry policy and cache.

use std::sync::Arc;

use crate::cache::LocalCache;
use crate::retry::Attempts;
use crate::{Clock, CounterStore, Limiter, RetryPolicy, SystemClock};

/// Builds a [`Limiter`]; every setting has a default.
///
/// ```
/// # fn demo(store: impl tollgate_core::CounterStore) {
/// use std::time::Duration;
/// use tollgate_core::{Limiter, RetryPolicy, SystemClock};
/// let limiter = Limiter::builder(store)
///     .clock(SystemClock)
///     .retry(RetryPolicy { retries: 1, delay: Duration::from_millis(50), timeout: Duration::from_millis(30) })
///     .cache(1_000)
///     .build();
/// # let _ = limiter;
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct LimiterBuilder {
    store: Arc<dyn CounterStore>,
    clock: Arc<dyn Clock>,
    retry: RetryPolicy,
    cache: usize,
}

impl LimiterBuilder {
    pub(super) fn new(store: impl CounterStore) -> LimiterBuilder {
        LimiterBuilder {
            store: store.into_shared(),
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::default(),
            cache: Limiter::DEFAULT_CACHE_CAPACITY,
        }
    }

    /// The clock windows are read from ([`SystemClock`] by default; a
    /// `ManualClock` in tests).
    pub fn clock(mut self, clock: impl Clock) -> LimiterBuilder {
        self.clock = Arc::new(clock);
        self
    }

    /// The one time budget of every store call the limiter makes
    /// ([`RetryPolicy::default`]: 2 retries 100 ms apart, 50 ms per
    /// attempt). The store is told it with each call, and bounds by it
    /// whatever outlives one attempt.
    pub fn retry(mut self, retry: RetryPolicy) -> LimiterBuilder {
        self.retry = retry;
        self
    }

    /// How many full counters the limiter remembers
    /// ([`Limiter::DEFAULT_CACHE_CAPACITY`] by default; 0: none, every
    /// check goes to the store). Under attack, reservations that cannot fit
    /// a counter already seen full are then refused without a store round
    /// trip (they would spend nothing anyway); a cached answer never admits
    /// a call the store would refuse (see
    /// [`Verdict::is_local`](crate::Verdict::is_local)). Counting
    /// ([`Mode::Count`](crate::Mode::Count)) always reaches the store: a
    /// counted call is counted even when over.
    pub fn cache(mut self, capacity: usize) -> LimiterBuilder {
        self.cache = capacity;
        self
    }

    /// The limiter.
    pub fn build(self) -> Limiter {
        Limiter {
            attempts: Arc::new(Attempts::new(self.store.name(), self.retry)),
            store: self.store,
            clock: self.clock,
            shadows: Arc::default(),
            failures: Arc::default(),
            cache: (self.cache > 0).then(|| Arc::new(LocalCache::new(self.cache))),
        }
    }
}
