//! [`Previous`]: the previous window's counts of sliding limits, read from
//! the store and kept once they can no longer change.
//!
//! A window's counter stops growing when the window ends, but not at once:
//! a check that began before the end (on this machine's clock or another's)
//! may still be applied, or retried, until its deadline (a store applies
//! nothing past it). So a count read within the settle time of the
//! window's end ([`SETTLE`] or the check budget, and a second) is used for
//! that check and not kept; one read later is kept until the table's capacity evicts
//! it. A refund never lowers it: refunds skip a window that has ended; a
//! reset through this limiter forgets it (one through another instance is
//! not seen here: this instance refuses what the cleared count weighed
//! until the window ends, never admitting more than it should).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::cache::Table;
use crate::{Algorithm, Counter, Limit, Prior, algorithm};

/// The kept counts of ended windows, by counter.
#[derive(Debug)]
pub(super) struct Previous {
    table: Mutex<Table<u64>>,
    capacity: usize,
    settle: Duration,
}

/// How many previous counts a limiter keeps: 40,000 (10,000 callers of
/// four sliding limits; their keys' `limit:<key>:` parts, tens of MB at
/// most with the longest keys, a few MB with ordinary ones).
const CAPACITY: usize = 40_000;

/// The least time after a window's end before its count is kept: 5
/// seconds, more than any check's budget under the default retry policy
/// (350 ms) by far. A writer whose checks (or retries) run longer than
/// this could still add to a count this limiter kept; this limiter would
/// then admit up to what those late units weigh, until the window ends.
const SETTLE: Duration = Duration::from_secs(5);

impl Previous {
    /// A table that keeps a count read at least `settle` after its
    /// window ended: this limiter's check budget or [`SETTLE`], whichever
    /// is longer (another process may retry for longer than this one),
    /// plus a second for clocks that disagree across machines.
    pub(super) fn new(budget: Duration) -> Previous {
        Previous {
            table: Mutex::new(Table::default()),
            capacity: CAPACITY,
            settle: budget.max(SETTLE).saturating_add(Duration::from_secs(1)),
        }
    }

    /// Per limit, its previous window's count when kept; `None` for a
    /// sliding limit whose count must be read (a fixed one needs none: 0,
    /// nor a sliding one in window 0).
    pub(super) fn known(&self, limits: &[Limit], now_secs: u64) -> Vec<Option<u64>> {
        let table = self.lock();
        limits
            .iter()
            .map(|limit| match previous_index(limit, now_secs) {
                None => Some(0),
                Some(index) => table.get(limit.stored(), index).copied(),
            })
            .collect()
    }

    /// Keeps `count`, read at `at`, of `limit`'s previous window, when the
    /// window ended long enough before.
    pub(super) fn keep(&self, limit: &Limit, at: Duration, count: u64) {
        let now = at.as_secs();
        let Some(index) = previous_index(limit, now) else {
            return;
        };
        let ended = Duration::from_secs(limit.rule().window().start(index + 1));
        if at.saturating_sub(ended) < self.settle {
            return;
        }
        let mut table = self.lock();
        if table.get(limit.stored(), index).is_none() {
            table.insert(self.capacity, limit.stored(), index, count);
        }
    }

    /// Forgets `limit`'s count of window `index` (an operator reset it).
    pub(super) fn forget(&self, limit: &Limit, index: u64) {
        self.lock().remove(limit.stored(), index);
    }

    // Plain values: consistent even after a panic elsewhere.
    fn lock(&self) -> MutexGuard<'_, Table<u64>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one check knows of its limits' previous windows: nothing to know
/// when it has no sliding limit; else each one's count when kept, or else
/// a [`Prior`] for the store to read with the count or reservation.
#[derive(Debug)]
pub(super) struct Plan {
    /// Per limit its previous count when known (0 for a fixed or GCRA
    /// limit, and in a sliding limit's first window); empty when the check
    /// has no sliding limit.
    known: Vec<Option<u64>>,
}

impl Plan {
    /// The plan of a check of `limits` at `now_secs`.
    pub(super) fn new(previous: &Previous, limits: &[Limit], now_secs: u64) -> Plan {
        let sliding = limits
            .iter()
            .any(|l| l.rule().algorithm() == Algorithm::Sliding);
        let known = if sliding {
            previous.known(limits, now_secs)
        } else {
            Vec::new()
        };
        Plan { known }
    }

    /// The check's counters at `at`: each counter's max lowered by its
    /// previous window's count where kept, or with that count as its
    /// [`Prior`], read by the store in the same call.
    pub(super) fn counters(&self, limits: &[Limit], at: Duration) -> Vec<Counter> {
        if self.known.is_empty() {
            return limits.iter().map(|l| l.counter_at(at, 0)).collect();
        }
        let now = at.as_secs();
        limits
            .iter()
            .zip(&self.known)
            .map(|(limit, known)| match known {
                Some(count) => {
                    let window = limit.rule().window();
                    limit.counter_at(at, algorithm::weighted(window, now, *count))
                }
                None => Counter {
                    prior: prior(limit, now),
                    ..limit.counter_at(at, 0)
                },
            })
            .collect()
    }

    /// Per limit its previous window's count (empty for a check without a
    /// sliding limit): the kept ones, and the others from `read`, the
    /// priors' counts the store answered, in limit order.
    pub(super) fn previous(&self, read: &[u64]) -> Vec<u64> {
        let mut read = read.iter().copied();
        self.known
            .iter()
            .map(|known| known.or_else(|| read.next()).unwrap_or(0))
            .collect()
    }

    /// Keeps, in `previous`, the counts the store read for this plan
    /// (`counts`, per limit as [`previous`](Plan::previous) gave them at
    /// `at`) once final.
    pub(super) fn keep(&self, previous: &Previous, limits: &[Limit], counts: &[u64], at: Duration) {
        for ((limit, known), &count) in limits.iter().zip(&self.known).zip(counts) {
            if known.is_none() {
                previous.keep(limit, at, count);
            }
        }
    }
}

/// The previous window of a sliding `limit` at `now_secs` as a [`Prior`]:
/// its counter, weighed by the part of it still inside the last window
/// ([`algorithm::weighted`]); none in window 0.
fn prior(limit: &Limit, now_secs: u64) -> Option<Prior> {
    let index = previous_index(limit, now_secs)?;
    let window = limit.rule().window();
    let (part, whole) = algorithm::share(window, now_secs);
    Some(Prior {
        key: limit.counter_key(index),
        part,
        whole,
    })
}

/// The index of `limit`'s previous window at `now_secs`, for a sliding
/// limit (none in window 0).
pub(super) fn previous_index(limit: &Limit, now_secs: u64) -> Option<u64> {
    let rule = limit.rule();
    match rule.algorithm() {
        Algorithm::Sliding => rule.window().index(now_secs).checked_sub(1),
        Algorithm::Fixed | Algorithm::Gcra | Algorithm::Concurrency => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Rule, Window};

    fn limit(algorithm: Algorithm) -> Limit {
        let rule = Rule::new("r", 5, Window::MINUTE).map(|r| r.with_algorithm(algorithm));
        let rule = rule.unwrap_or_else(|e| panic!("{e}"));
        rule.limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn keeps_only_counts_read_once_the_window_has_settled() {
        let previous = Previous::new(Duration::from_millis(350));
        let sliding = [limit(Algorithm::Sliding)];
        // 65 s into window 1: window 0 ended 5.9 s ago, not settled yet.
        let early = Duration::from_millis(65_900);
        previous.keep(&sliding[0], early, 3);
        assert_eq!(previous.known(&sliding, 65), vec![None]);
        let later = Duration::from_millis(66_000);
        previous.keep(&sliding[0], later, 4);
        assert_eq!(previous.known(&sliding, 66), vec![Some(4)]);
        assert_eq!(previous.known(&sliding, 120), vec![None], "window 1 is new");
        assert_eq!(
            previous.known(&[limit(Algorithm::Fixed)], 61),
            vec![Some(0)]
        );
        assert_eq!(previous.known(&sliding, 30), vec![Some(0)], "window 0");
    }
}
