//! [`LimiterBuilder`]: a limiter's store, clock, retry policy and cache.

use std::sync::Arc;
use std::time::Duration;

use super::previous::Previous;
use crate::cache::LocalCache;
use crate::retry::Attempts;
use crate::{BreakerPolicy, Clock, CounterStore, Limiter, RetryPolicy, SystemClock};

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
///     .cache_age(Duration::from_secs(5))
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
    breaker: BreakerPolicy,
    cache: usize,
    cache_age: Duration,
}

impl LimiterBuilder {
    pub(super) fn new(store: impl CounterStore) -> LimiterBuilder {
        LimiterBuilder {
            store: store.into_shared(),
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::default(),
            breaker: BreakerPolicy::default(),
            cache: Limiter::DEFAULT_CACHE_CAPACITY,
            cache_age: Limiter::DEFAULT_CACHE_AGE,
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

    /// When the limiter stops calling a store that keeps failing, and how
    /// often it then probes it ([`BreakerPolicy::default`]: open after 5
    /// calls in a row found no store over at least 500 ms, a probe at most
    /// every 200 ms). While
    /// open, checks are answered at once by their policy.
    pub fn breaker(mut self, breaker: BreakerPolicy) -> LimiterBuilder {
        self.breaker = breaker;
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

    /// How long a remembered full counter may answer
    /// ([`Limiter::DEFAULT_CACHE_AGE`] by default; zero: never, as with a
    /// capacity of 0), measured on the limiter's clock from the check the
    /// store answered; it never answers past its window's end either.
    /// After the age the next check goes to the store, and its answer is
    /// remembered afresh: under attack, one round trip per counter per age.
    ///
    /// This bounds how long a limiter keeps refusing a call that a refund
    /// or an operator reset made on *another* instance (`tollgate reset`,
    /// another process) made room for; refunds and resets through this
    /// limiter clear its entries at once.
    pub fn cache_age(mut self, age: Duration) -> LimiterBuilder {
        self.cache_age = age;
        self
    }

    /// The limiter.
    pub fn build(self) -> Limiter {
        Limiter {
            attempts: Arc::new(Attempts::new(self.store.name(), self.retry, self.breaker)),
            store: self.store,
            clock: self.clock,
            shadows: Arc::default(),
            failures: Arc::default(),
            previous: Arc::new(Previous::new(self.retry.worst_case())),
            cache: (self.cache > 0 && !self.cache_age.is_zero())
                .then(|| Arc::new(LocalCache::new(self.cache, self.cache_age))),
        }
    }
}

impl Limiter {
    /// How long a remembered full counter answers by default: 2 seconds
    /// ([`LimiterBuilder::cache_age`]). A reset or refund made on another
    /// instance is seen by this one at most this long after.
    pub const DEFAULT_CACHE_AGE: Duration = Duration::from_secs(2);
}
