//! GCRA (the generic cell rate algorithm: a token bucket as a leaky
//! bucket), the one place that knows its arithmetic.
//!
//! A GCRA rule of `max` units per window `W`, with a burst `b`, spends one
//! unit every emission interval `T = ⌈W / max⌉` µs. Its counter
//! (`limit:<key>:gcra`) holds the theoretical arrival time `tat`, in µs
//! since the epoch: when the bucket is full again. A call of cost `c` at
//! `now` fits when
//!
//! ```text
//! max(tat, now) + c·T − now ≤ b·T
//! ```
//!
//! and then stores `max(tat, now) + c·T`. In store terms that is a counter
//! with a floor of `now` (a `tat` in the past counts as now), a cost of `c·T`
//! and a max of `now + b·T`; every call gives it a lifetime of `b·T` past
//! the arrival time it stores, so it outlives the time the bucket is full
//! again, after which the bucket is full whether the counter is there or
//! not. A cost above the burst never fits, and a refused call is never
//! charged (a count with a GCRA limit is made as a reservation).
//!
//! Every quantity is exact: `T` is rounded up to whole µs (a rule never
//! admits faster than it says), times are µs since the epoch (2^53 µs is
//! the year 2255), and `b·T ≤ max·T` is at most a window and `max` µs.

use std::time::Duration;

use crate::store::MAX_COUNT;
use crate::{Counter, Rule};

/// `at` in whole µs since the epoch (saturating; exact until 2255).
pub(crate) fn at_micros(at: Duration) -> u64 {
    u64::try_from(at.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_COUNT)
}

/// The emission interval of `rule` in µs: `⌈W / max⌉`, at least 1.
pub(crate) fn interval(rule: &Rule) -> u64 {
    let window = rule.window().secs().saturating_mul(1_000_000);
    window.div_ceil(rule.max().max(1)).max(1)
}

/// How long `rule`'s counter lives past the arrival time each call stores:
/// the burst's worth of intervals, `b·T`, rounded up to whole milliseconds
/// (stores keep ms).
pub(crate) fn lifetime(rule: &Rule) -> Duration {
    let us = rule.burst().saturating_mul(interval(rule));
    Duration::from_millis(us.div_ceil(1_000).max(1))
}

/// The counter a call of `units` makes on `rule`'s counter `key` at `at`:
/// floor `now`, cost `units·T`, max `now + b·T` (a shadow rule's: 2^53, so
/// that it never blocks).
pub(crate) fn counter(rule: &Rule, key: String, units: u64, at: Duration) -> Counter {
    let now = at_micros(at);
    let t = interval(rule);
    let max = if rule.is_shadow() {
        MAX_COUNT
    } else {
        now.saturating_add(rule.burst().saturating_mul(t))
            .min(MAX_COUNT)
    };
    Counter {
        key,
        ttl: lifetime(rule),
        cost: units.saturating_mul(t).clamp(1, MAX_COUNT),
        max,
        floor: now,
        prior: None,
        lease: false,
    }
}

/// Where a GCRA limit of `cost` stands with its counter at `tat` at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct State {
    /// Units a call may spend at once now: `⌊(b·T − level) / T⌋`, `level`
    /// the time the bucket needs to drain (`max(tat, now) − now`); below
    /// zero when a count went past the burst.
    pub(crate) remaining: i64,
    /// Whether a call of the cost on top of `tat` does not fit.
    pub(crate) refuses: bool,
    /// Whole seconds until a call of the cost fits (`None`: never, a cost
    /// above the burst).
    pub(crate) wait: Option<u64>,
    /// The Unix second by which a call of the cost fits (rounded up from
    /// the exact µs; `None` as `wait`).
    pub(crate) fits_at: Option<u64>,
    /// When the bucket is full again, in Unix seconds (rounded up).
    pub(crate) full: u64,
}

/// The state of `rule` for a call of `cost` with its counter at `tat` at `at`.
pub(crate) fn state(rule: &Rule, tat: u64, cost: u64, at: Duration) -> State {
    let now = at_micros(at);
    let t = i128::from(interval(rule));
    let burst = i128::from(rule.burst()) * t;
    let start = i128::from(tat.max(now));
    let level = start - i128::from(now);
    let remaining = (burst - level).div_euclid(t);
    let needed = level + i128::from(cost) * t - burst;
    let refuses = needed > 0;
    let fits = cost <= rule.burst();
    let needed = u64::try_from(needed.max(0)).unwrap_or(u64::MAX);
    let wait = fits.then(|| secs_up(needed));
    let fits_at = fits.then(|| secs_up(now.saturating_add(needed)));
    let full = u64::try_from(start).unwrap_or(u64::MAX);
    State {
        remaining: i64::try_from(remaining).unwrap_or(i64::MIN),
        refuses,
        wait,
        fits_at,
        full: secs_up(full),
    }
}

/// `us` µs in whole seconds, rounded up.
fn secs_up(us: u64) -> u64 {
    us.div_ceil(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Window};

    /// 20 a minute, bursts of 5: one unit every 3 s.
    fn rule() -> Rule {
        Rule::new("ask-burst", 20, Window::MINUTE)
            .map(|r| r.with_algorithm(Algorithm::Gcra))
            .and_then(|r| r.with_burst(5))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_interval_is_the_window_over_max_rounded_up() {
        assert_eq!(interval(&rule()), 3_000_000);
        let ten = Rule::new("r", 3, Window::SECOND).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(interval(&ten), 333_334, "never faster than 3 a second");
        assert_eq!(lifetime(&rule()), Duration::from_secs(15));
    }

    #[test]
    fn a_quiet_bucket_takes_its_burst_then_one_per_interval() {
        let rule = rule();
        let at = Duration::from_secs(1_000);
        let mut tat = 0;
        for i in 0..5 {
            let state = state(&rule, tat, 1, at);
            assert!(!state.refuses, "ask {i}");
            assert_eq!(state.remaining, 5 - i);
            tat = counter(&rule, String::new(), 1, at).added_to(tat);
        }
        let sixth = state(&rule, tat, 1, at);
        assert!(sixth.refuses);
        assert_eq!(
            (sixth.remaining, sixth.wait, sixth.full),
            (0, Some(3), 1_015)
        );
        let later = state(&rule, tat, 1, at + Duration::from_secs(3));
        assert!(!later.refuses);
        assert_eq!(later.remaining, 1);
        assert_eq!(
            state(&rule, tat, 6, at).wait,
            None,
            "a cost above the burst"
        );
    }

    #[test]
    fn the_counter_says_it_in_store_terms() {
        let rule = rule();
        let at = Duration::from_millis(1_000_500);
        let counter = counter(&rule, "k".into(), 2, at);
        assert_eq!(counter.floor, 1_000_500_000);
        assert_eq!(counter.cost, 6_000_000);
        assert_eq!(counter.max, 1_000_500_000 + 15_000_000);
        assert!(counter.fits(0) && counter.fits(1_000_500_000 + 9_000_000));
        assert!(!counter.fits(1_000_500_000 + 9_000_001));
    }
}
