//! [`Longest`]: the longest check budget among a store's calls so far.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::Deadline;

/// The longest check budget ([`Deadline::check_budget`]) of the calls a
/// store has served: what it bounds the work that serves more than one call
/// by (a connection being made, a silent connection's probe, a cluster
/// client's own waits). Never shorter than the budget of any call that may
/// be waiting for that work, so one limiter with a short policy cannot cut
/// it short for another sharing the store; and with one policy, that
/// policy's budget.
#[derive(Debug, Default)]
pub(crate) struct Longest(AtomicU64);

impl Longest {
    /// Notes `deadline`'s check budget; the longest so far, its own included.
    pub(crate) fn note(&self, deadline: Deadline) -> Duration {
        let nanos = u64::try_from(deadline.check_budget().as_nanos()).unwrap_or(u64::MAX);
        let before = self.0.fetch_max(nanos, Ordering::Relaxed);
        Duration::from_nanos(before.max(nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_budget_so_far_is_never_shortened_by_a_shorter_one() {
        let longest = Longest::default();
        let short = Duration::from_millis(25);
        let default = Duration::from_millis(350);
        assert_eq!(longest.note(Deadline::after(short)), short);
        assert_eq!(longest.note(Deadline::after(default)), default);
        assert_eq!(longest.note(Deadline::after(short)), default);
        let huge = Longest::default();
        assert!(huge.note(Deadline::after(Duration::MAX)) > Duration::from_secs(86_400));
    }
}
