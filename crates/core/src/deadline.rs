//! [`Deadline`]: the one time budget of a store call.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The instant by which a store call must be done, on this process's
/// monotonic clock and on the wall clock (for stores that compare it with
/// their own time).
///
/// The [`Limiter`](crate::Limiter)'s [`RetryPolicy`](crate::RetryPolicy) sets
/// one deadline per check, which every attempt of it shares; every layer
/// below reads it instead of keeping its own timers. A store
/// that can tell (a Redis script reading `TIME`, the SQLite worker before it
/// applies a call) applies nothing once the deadline has passed, so a call
/// whose caller gave up spends nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline {
    at: Instant,
    unix_millis: u64,
    check: Duration,
}

impl Deadline {
    /// How late, by its own clock, a store may still apply a call: the clock
    /// skew allowed between the application's machine and the store's
    /// (20 ms). Stores keep what a call applied under its
    /// [`CheckId`](crate::CheckId) this much past the check's budget, so
    /// that no attempt of the check can apply it again.
    pub const SKEW_MARGIN: Duration = Duration::from_millis(20);

    /// A deadline `budget` from now, for a call that is a whole check of
    /// its own: its [`check_budget`](Deadline::check_budget) is `budget`.
    pub fn after(budget: Duration) -> Deadline {
        Deadline::starting(now(), SystemTime::now(), budget)
    }

    /// A deadline `budget` after `now`, read as `wall` on the wall clock; its
    /// check's budget is `budget`.
    pub(crate) fn starting(now: Instant, wall: SystemTime, budget: Duration) -> Deadline {
        let (at, budget) = match now.checked_add(budget) {
            Some(at) => (at, budget),
            None => (now + FAR, FAR),
        };
        let wall = wall
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .saturating_add(budget);
        let millis = wall.as_secs().saturating_mul(1_000);
        Deadline {
            at,
            unix_millis: millis.saturating_add(u64::from(wall.subsec_millis())),
            check: budget,
        }
    }

    /// The time budget of the whole check this attempt belongs to: the
    /// limiter's [`RetryPolicy::worst_case`](crate::RetryPolicy::worst_case)
    /// (350 ms by default). A store bounds by it whatever serves more than
    /// this attempt or outlives it: a connection being made (which later
    /// attempts wait for), a connection that answers nothing, a give-back
    /// after a refused reservation. So a limiter with a shorter policy
    /// never waits longer anywhere.
    #[inline]
    pub fn check_budget(&self) -> Duration {
        self.check
    }

    /// The deadline on this process's monotonic clock.
    #[inline]
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// The deadline on the wall clock, in milliseconds since the Unix epoch.
    #[inline]
    pub fn unix_millis(&self) -> u64 {
        self.unix_millis
    }

    /// The last wall-clock millisecond at which a store may apply the call:
    /// [`unix_millis`](Deadline::unix_millis) plus [`SKEW_MARGIN`](Deadline::SKEW_MARGIN).
    #[inline]
    pub fn cutoff_unix_millis(&self) -> u64 {
        self.unix_millis
            .saturating_add(Deadline::SKEW_MARGIN.as_millis() as u64)
    }

    /// The time left, zero once passed.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(now())
    }

    /// Whether the deadline has passed.
    pub fn has_passed(&self) -> bool {
        now() >= self.at
    }

    /// The earlier of two deadlines.
    pub fn min(self, other: Deadline) -> Deadline {
        if other.at < self.at { other } else { self }
    }
}

/// The monotonic clock's reading now: tokio's, which is the system's except
/// in a test that paused tokio's time, where it is the paused clock that
/// the retry loop's timers run on. Every reading of a deadline takes it.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A budget too large for the monotonic clock is cut to about 30 years.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_the_same_moment_on_both_clocks() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let deadline = Deadline::after(Duration::from_millis(350));
        assert!(deadline.unix_millis() >= before + 350);
        assert!(deadline.unix_millis() <= before + 350 + 1_000);
        assert_eq!(deadline.cutoff_unix_millis(), deadline.unix_millis() + 20);
        assert!(!deadline.has_passed());
        assert!(deadline.remaining() <= Duration::from_millis(350));
        // Just made: nearly all of it is left (a generous margin for a busy machine).
        assert!(deadline.remaining() > Duration::from_millis(100));
    }

    #[test]
    fn a_passed_deadline_has_nothing_left_and_huge_budgets_saturate() {
        let passed = Deadline::after(Duration::ZERO);
        assert!(passed.has_passed());
        assert_eq!(passed.remaining(), Duration::ZERO);
        let far = Deadline::after(Duration::MAX);
        assert!(!far.has_passed());
        assert_eq!(
            far.check_budget(),
            FAR,
            "a deadline of its own is its check"
        );
        assert!(
            far.remaining() > Duration::from_secs(29 * 365 * 86_400),
            "a huge budget is cut to about 30 years, no less"
        );
        assert_eq!(far.min(passed), passed);
        assert_eq!(passed.min(far), passed);
    }
}
