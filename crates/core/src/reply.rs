//! What a store's reply to a check means: the one place that decides it.
//!
//! Stores apply the atomic operation and report counts; this module checks
//! that the counts can be right and decides, per limit, whether it refuses
//! the call.

use std::sync::Arc;

use crate::store::MAX_COUNT;
use std::time::Duration;

use crate::{Algorithm, Counter, Limit, Mode, Reservation, StoreError, Usage, algorithm, gcra};

/// What a store answers after the counts of a check: its priors' counts
/// and, per set of leases, when its first lease ends and how many it found
/// expired.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    /// One per counter with a [`prior`](Counter::prior), in order.
    pub(crate) priors: Vec<u64>,
    /// One per [`lease`](Counter::lease) counter, in order: ms until its
    /// first lease ends, and the leases it found expired.
    pub(crate) leases: Vec<(u64, u64)>,
}

/// The reply to a check of `counters` split: the counters' counts, and
/// what the store answered after them ([`Tail`]).
pub(crate) fn tail(
    counters: &[Counter],
    mut reply: Reservation,
) -> Result<(Reservation, Tail), StoreError> {
    let priors = counters.iter().filter(|c| c.prior.is_some()).count();
    let leases = counters.iter().filter(|c| c.lease).count();
    if priors == 0 && leases == 0 {
        return Ok((reply, Tail::default()));
    }
    let mut counts = same_len(counters.len() + priors + 2 * leases, reply.counts)?;
    let rest = counts.split_off(counters.len());
    for &count in &rest {
        not_past_max_count(count)?;
    }
    let (read, pairs) = rest.split_at(priors);
    // Another instance's rule may give longer leases than this one's:
    // a set's first lease ends within the longest window.
    let most = crate::Window::MAX_SECS.saturating_mul(1_000);
    let leases = pairs
        .chunks_exact(2)
        .map(|pair| match *pair {
            [first_ends, reclaimed] if first_ends <= most => Ok((first_ends, reclaimed)),
            _ => Err(StoreError::InvalidReply(
                "a lease ends past the longest window".into(),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    reply.counts = counts;
    Ok((
        reply,
        Tail {
            priors: read.to_vec(),
            leases,
        },
    ))
}

/// The usage of each limit after a check, from the store's reply (its
/// [`tail`] split off); the usage takes over the
/// counters' keys. `previous` holds, per limit, its previous window's
/// count (a sliding window's; 0 for a fixed one), which the counter's max
/// was lowered by as it weighs now, or which its prior read; for a
/// concurrency limit, the ms until its first lease ends.
pub(crate) fn usage(
    limits: &[Limit],
    counters: Vec<Counter>,
    mode: Mode,
    reply: Reservation,
    previous: &[u64],
    at: Duration,
) -> Result<Arc<[Usage]>, StoreError> {
    let counts = same_len(counters.len(), reply.counts)?;
    let applied = reply.applied;
    let mut blocked = false;
    for (i, (counter, &count)) in counters.iter().zip(&counts).enumerate() {
        not_past_max_count(count)?;
        // A lease counter's `previous` is a time, no prior.
        let prior = previous
            .get(i)
            .copied()
            .filter(|_| !counter.lease)
            .unwrap_or(0);
        // Raised to its floor first: a store that ignores floors (a GCRA
        // arrival time left near the epoch) is found here.
        if applied && count < counter.added_to(0) {
            return Err(StoreError::InvalidReply(
                "a counter reads less than the cost just added".into(),
            ));
        }
        if mode == Mode::Reserve && applied && count > counter.max_after(prior) {
            return Err(StoreError::InvalidReply(
                "a reservation was applied past a counter's max".into(),
            ));
        }
        blocked |= mode == Mode::Reserve && !applied && !counter.fits_after(count, prior);
    }
    if !applied && !blocked {
        return Err(StoreError::InvalidReply(
            "a reservation was refused with every cost fitting".into(),
        ));
    }
    let refused = mode == Mode::Reserve && !applied;
    // One allocation: the iterator knows its length.
    Ok(limits
        .iter()
        .zip(counters)
        .zip(counts)
        .enumerate()
        .map(|(i, ((limit, counter), count))| {
            let previous = previous.get(i).copied().unwrap_or(0);
            seen(limit, counter.key, previous, count, at, refused)
        })
        .collect())
}

/// The usage of `limit` whose counter `key` stands at `current` and its
/// previous window's at `previous` (read for a sliding window only; for a
/// concurrency limit, the ms until its first lease held ends), at
/// `at`: its count (a sliding window's estimate; for GCRA, `max` less the
/// units that fit now), whether it refuses the call (`refused`: a
/// reservation that was not applied), and how long to wait.
pub(crate) fn seen(
    limit: &Limit,
    key: String,
    previous: u64,
    current: u64,
    at: Duration,
    refused: bool,
) -> Usage {
    let rule = limit.rule();
    let now = at.as_secs();
    match rule.algorithm() {
        Algorithm::Sliding => {
            let window = rule.window();
            let count = algorithm::estimate(window, now, previous, current);
            let wait = algorithm::wait(window, now, previous, current, limit.cost(), rule.max());
            Usage::new(limit, key, count, now, past_max(limit, count, refused)).waiting(wait, now)
        }
        Algorithm::Gcra => {
            let state = gcra::state(rule, current, limit.cost(), at);
            // Past its burst: a refused reservation whose cost does not
            // fit, or a count that took the bucket past it.
            let past = if refused {
                state.refuses
            } else {
                state.remaining < 0
            };
            let max = i64::try_from(rule.max()).unwrap_or(i64::MAX);
            let count = u64::try_from(max.saturating_sub(state.remaining)).unwrap_or(0);
            Usage::new(limit, key, count, now, past).gcra(&state, now)
        }
        Algorithm::Concurrency => {
            // `previous` is the ms until the first lease held ends.
            let wait = previous.div_ceil(1_000).min(rule.window().secs());
            Usage::new(limit, key, current, now, past_max(limit, current, refused))
                .leased(wait, now)
        }
        Algorithm::Fixed => Usage::new(limit, key, current, now, past_max(limit, current, refused)),
    }
}

/// Whether `limit` at `count` refuses the call, against its rule's own max
/// (a shadow rule's counter has a higher one): a refused reservation when
/// its cost does not fit on top of `count`, anything else when `count` is
/// past the max.
fn past_max(limit: &Limit, count: u64, refused: bool) -> bool {
    let max = limit.rule().max();
    if refused {
        count.saturating_add(limit.cost()) > max
    } else {
        count > max
    }
}

/// The usage of each limit of a reservation that the local cache refused,
/// at the counts it last saw of them (`counts`, one per limit): nothing
/// spent, and no counter key (nothing to refund or note).
pub(crate) fn refused_locally(limits: &[Limit], counts: Vec<u64>, now: u64) -> Arc<[Usage]> {
    // One allocation: the iterator knows its length.
    limits
        .iter()
        .zip(counts)
        .map(|(limit, count)| {
            Usage::new(
                limit,
                String::new(),
                count,
                now,
                past_max(limit, count, true),
            )
        })
        .collect()
}

/// An error when a store answers a count over [`MAX_COUNT`], which no
/// counter holds.
pub(crate) fn not_past_max_count(count: u64) -> Result<(), StoreError> {
    if count > MAX_COUNT {
        return Err(StoreError::InvalidReply(format!(
            "a count of {count} is over {MAX_COUNT}"
        )));
    }
    Ok(())
}

/// `counts` when there is one per counter asked for.
pub(crate) fn same_len(expected: usize, counts: Vec<u64>) -> Result<Vec<u64>, StoreError> {
    if counts.len() == expected {
        Ok(counts)
    } else {
        Err(StoreError::InvalidReply(format!(
            "{} counts for {expected} counters",
            counts.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Rule, Window};

    fn limits(costs: &[u64]) -> (Vec<Limit>, Vec<Counter>) {
        let rule = Rule::new("r", 10, Window::HOUR).and_then(|r| r.with_key(&["n"]));
        let rule = rule.unwrap_or_else(|e| panic!("{e}"));
        let limits: Vec<Limit> = costs
            .iter()
            .enumerate()
            .map(|(i, &c)| rule.limit(&[i.to_string()]).and_then(|l| l.with_cost(c)))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{e}"));
        let counters = limits.iter().map(|l| l.counter(0)).collect();
        (limits, counters)
    }

    fn read(mode: Mode, costs: &[u64], applied: bool, counts: &[u64]) -> Result<Vec<bool>, String> {
        let (limits, counters) = limits(costs);
        let reply = Reservation {
            applied,
            counts: counts.to_vec(),
        };
        usage(&limits, counters, mode, reply, &[], Duration::ZERO)
            .map(|u| u.iter().map(Usage::is_over).collect())
            .map_err(|e| e.kind().to_owned())
    }

    #[test]
    fn a_count_is_over_past_max_and_a_refused_reservation_names_what_does_not_fit() {
        assert_eq!(
            read(Mode::Count, &[1, 4], true, &[10, 11]),
            Ok(vec![false, true])
        );
        assert_eq!(
            read(Mode::Reserve, &[1, 4], true, &[10, 8]),
            Ok(vec![false, false])
        );
        // 7 + 4 > 10 does not fit; 9 + 1 does.
        assert_eq!(
            read(Mode::Reserve, &[1, 4], false, &[9, 7]),
            Ok(vec![false, true])
        );
        assert_eq!(read(Mode::Reserve, &[11], false, &[0]), Ok(vec![true]));
    }

    #[test]
    fn a_shadow_rule_is_reported_but_never_refuses_or_blocks() {
        let shadow = Rule::new("dark", 2, Window::HOUR).map(|r| r.with_shadow(true));
        let shadow = shadow.unwrap_or_else(|e| panic!("{e}"));
        let limits = [shadow.limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}"))];
        let counters: Vec<Counter> = limits.iter().map(|l| l.counter(0)).collect();
        assert_eq!(counters[0].max, MAX_COUNT, "a shadow counter never blocks");
        for (mode, applied) in [(Mode::Count, true), (Mode::Reserve, true)] {
            let reply = Reservation {
                applied,
                counts: vec![3],
            };
            let usage = usage(&limits, counters.clone(), mode, reply, &[], Duration::ZERO)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!usage[0].is_over(), "{mode:?}: a shadow rule refused");
            assert!(usage[0].is_shadow_over(), "{mode:?}: not reported");
        }
    }

    #[test]
    fn replies_that_cannot_be_right_are_invalid() {
        let invalid = Err("invalid-reply".to_owned());
        assert_eq!(read(Mode::Count, &[1], true, &[]), invalid, "short");
        assert_eq!(read(Mode::Count, &[1], true, &[1, 1]), invalid, "long");
        assert_eq!(
            read(Mode::Count, &[5], true, &[4]),
            invalid,
            "below the cost"
        );
        assert_eq!(read(Mode::Count, &[1], true, &[MAX_COUNT + 1]), invalid);
        assert_eq!(read(Mode::Reserve, &[1], true, &[11]), invalid, "past max");
        assert_eq!(
            read(Mode::Reserve, &[1, 4], false, &[9, 6]),
            invalid,
            "all fit"
        );
    }
}
