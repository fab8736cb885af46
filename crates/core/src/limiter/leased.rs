//! The leases of a check: what the store said of each set, and the
//! [`Lease`] handles of an allowed check.

use crate::observe::{self, LeaseEvent, Op};
use crate::reply::Tail;
use crate::{Algorithm, CheckId, Counter, Lease, Limiter, Usage};

/// Puts each lease counter's wait (ms until its first lease ends) where a
/// sliding window's previous count goes, for [`reply::seen`](crate::reply).
pub(super) fn waits(counters: &[Counter], tail: &Tail, previous: &mut Vec<u64>) {
    if tail.leases.is_empty() {
        return;
    }
    previous.resize(counters.len(), 0);
    let mut waits = tail.leases.iter();
    for (counter, slot) in counters.iter().zip(previous.iter_mut()) {
        if counter.lease
            && let Some(&(first_ends, _)) = waits.next()
        {
            *slot = first_ends;
        }
    }
}

/// The handles of the leases a check took (`leases`: each lease counter's
/// key, and whether the check was applied; `usage`, the check's), counting
/// in metrics the leases taken, those refused (a limit that was over),
/// and the expired ones the store found.
pub(super) fn handles(
    limiter: &Limiter,
    usage: &[Usage],
    leases: Vec<(String, bool)>,
    id: CheckId,
    tail: &Tail,
) -> Vec<Lease> {
    if leases.is_empty() {
        return Vec::new();
    }
    let usages = usage
        .iter()
        .filter(|u| u.algorithm() == Algorithm::Concurrency);
    let mut held = Vec::new();
    for ((usage, (key, applied)), &(_, reclaimed)) in usages.zip(leases).zip(&tail.leases) {
        let rule = usage.rule();
        observe::lease(rule, LeaseEvent::Reclaimed, reclaimed);
        if applied {
            observe::lease(rule, LeaseEvent::Acquired, 1);
            held.push(Lease::new(limiter.clone(), rule.clone(), key, id));
        } else if usage.is_over() {
            observe::lease(rule, LeaseEvent::Refused, 1);
        }
    }
    held
}

/// Ends, in the background, the leases `id` may have taken at `leases`'
/// keys in a check that failed (the store may have applied it and lost its
/// answer): no handle holds them, and each would otherwise stay held until
/// its expiry. A lease the check never took ends as nothing.
pub(super) fn end_unheld(limiter: &Limiter, leases: Vec<(String, bool)>, id: CheckId) {
    if leases.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let limiter = limiter.clone();
    runtime.spawn(async move {
        for (key, _) in leases {
            let ended = limiter
                .attempts()
                .run(Op::EndLease, |deadline| {
                    limiter.store().end_lease(&key, id, deadline)
                })
                .await;
            if let Err(err) = ended {
                tracing::warn!(error = %err, "a failed check's lease was not ended; it ends at its expiry");
            }
        }
    });
}
