//! Where the time comes from: [`SystemClock`] in production, a manual clock in tests.

use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time, as a duration since the Unix epoch.
pub trait Clock: Debug + Send + Sync + 'static {
    /// The time now, since 1970-01-01T00:00:00Z.
    fn now(&self) -> Duration;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        // A clock set before 1970 reads as the epoch rather than failing a check.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> Duration {
        (**self).now()
    }
}

#[cfg(feature = "test-util")]
pub use manual::ManualClock;

#[cfg(feature = "test-util")]
mod manual {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::Clock;

    /// A clock that only moves when told; its clones share one time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_core::{Clock, ManualClock};
    /// let clock = ManualClock::new(Duration::from_secs(100));
    /// let shared = clock.clone();
    /// clock.advance(Duration::from_secs(5));
    /// assert_eq!(shared.now(), Duration::from_secs(105));
    /// ```
    #[derive(Clone, Debug, Default)]
    pub struct ManualClock {
        nanos: Arc<AtomicU64>,
    }

    impl ManualClock {
        /// A clock reading `start` since the epoch.
        pub fn new(start: Duration) -> ManualClock {
            let clock = ManualClock::default();
            clock.set(start);
            clock
        }

        /// A clock reading the system time now, then moving only when told.
        pub fn starting_now() -> ManualClock {
            ManualClock::new(super::SystemClock.now())
        }

        /// Sets the time, for this clock and all its clones.
        pub fn set(&self, now: Duration) {
            let nanos = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
            self.nanos.store(nanos, Ordering::SeqCst);
        }

        /// Moves the time forward by `by`.
        pub fn advance(&self, by: Duration) {
            let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
            let _ = self
                .nanos
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    Some(n.saturating_add(by))
                });
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
        }
    }
}
