//! All-or-nothing reservations whose counters span hash slots.
//!
//! Redis runs a script on the keys of one slot only, so a reservation
//! across slots is one conditional reservation per slot
//! ([`CHECK`](crate::scripts::CHECK)'s reservation of that slot's counters), all at
//! once. When every slot applies, the reservation is applied. When any slot
//! refuses (or fails), each slot that applied gets its costs back (the
//! give-back, `CHECK`'s op `g`: a refund of the same
//! costs, which also removes a counter it brings back to 0, or to its floor
//! or below, so a counter the reservation created is absent again), all
//! at once, and the reservation is refused.
//!
//! - A window's counter never over-admits: each slot's reservation is
//!   conditional, so no counter ever goes past its max, and a call is
//!   answered applied only when every slot applied. A GCRA counter (one
//!   with a floor) can: its give-back subtracts the cost from whatever it
//!   holds, so when another caller's reservation moved it on in between,
//!   that caller's arrival time moves back by the cost, and up to the
//!   cost may be admitted again early (by the emission intervals it
//!   stands for).
//! - Between a slot's reservation and its give-back (one round trip to the
//!   slowest slot of the check, and one more), the costs taken there are
//!   visible: a racing caller may be refused by them.
//! - A give-back that fails is logged: those counters over-count (the safe
//!   direction) until their window ends (a GCRA counter: until its bucket
//!   drains).

use futures_util::future::join_all;
use tollgate_core::{CheckId, Counter, Deadline, Reservation, StoreError};

use super::slots::{Group, scatter};
use super::{Cluster, RedisClusterStore};
use crate::reply;

impl RedisClusterStore {
    /// [`CounterStore::reserve`](tollgate_core::CounterStore::reserve) on
    /// any number of slots.
    pub(super) async fn reserve_across(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let groups = Cluster::groups(counters);
        // The priors in other slots than their counters', read first.
        let read = self.cluster.read_priors(counters, deadline).await?;
        if let [group] = groups.as_slice() {
            // One slot: the script is atomic across the whole batch.
            let (reservation, _) = self
                .cluster
                .reserve_group((counters, &read), group, id, deadline)
                .await?;
            let mut counts = vec![0; reply::answered(counters)];
            scatter(&mut counts, group, &reservation.counts, true)?;
            return Ok(Reservation {
                applied: reservation.applied,
                counts,
            });
        }
        // In a task of its own: a caller cut off at its deadline drops only
        // its wait, and the task still gives back what the slots took.
        let store = self.clone();
        let counters = counters.to_vec();
        let task = tokio::spawn(async move {
            let call = (counters.as_slice(), read.as_slice());
            store.reserve_slots(call, &groups, id, deadline).await
        });
        task.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(
                "a cross-slot reservation task ended early".into(),
            ))
        })
    }

    /// The reservation `id` of `counters`, with their priors from `read`,
    /// on each of `groups` at once, given back where applied when any
    /// refused.
    async fn reserve_slots(
        &self,
        (counters, read): (&[Counter], &[Option<u64>]),
        groups: &[Group],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let replies = join_all(groups.iter().map(|group| {
            self.cluster
                .reserve_group((counters, read), group, id, deadline)
        }))
        .await;
        let mut counts = vec![0; reply::answered(counters)];
        let mut taken = Vec::new();
        let mut refused = false;
        let mut failure = None;
        for (group, reply) in groups.iter().zip(replies) {
            match reply {
                Ok((reservation, recorded)) => {
                    if reservation.applied {
                        taken.push((group, recorded));
                    } else {
                        refused = true;
                    }
                    if let Err(err) = scatter(&mut counts, group, &reservation.counts, true) {
                        failure.get_or_insert(err);
                    }
                }
                // Applied or not, nobody can tell: an over-count at worst.
                Err(err) => {
                    failure.get_or_insert(err);
                }
            }
        }
        if !refused && failure.is_none() {
            return Ok(Reservation {
                applied: true,
                counts,
            });
        }
        // The give-back finds the reservation's record by the reservation's
        // own deadline, and runs by a deadline of its own.
        let give_back = (id, deadline, give_back_deadline(deadline));
        self.give_back(counters, &taken, &mut counts, give_back)
            .await;
        match failure {
            Some(err) => Err(err),
            None => Ok(Reservation {
                applied: false,
                counts,
            }),
        }
    }

    /// Refunds each group of `taken` its costs, all at once, by `deadline`,
    /// the reservation `id` made under `reserved` (which names its record),
    /// writing the counts after the give-back into `counts`; logs each that
    /// fails (`counts` then keeps the count with the reservation in it).
    async fn give_back(
        &self,
        counters: &[Counter],
        taken: &[(&Group, bool)],
        counts: &mut [u64],
        (id, reserved, deadline): (CheckId, Deadline, Deadline),
    ) {
        if taken.is_empty() {
            return;
        }
        let replies = join_all(taken.iter().map(|&(group, recorded)| {
            self.cluster
                .give_back_group(counters, group, (id, recorded, reserved), deadline)
        }))
        .await;
        for (&(group, _), reply) in taken.iter().zip(replies) {
            let scattered = reply.and_then(|after| scatter(counts, group, &after, false));
            if scattered.is_ok() {
                settle_leases(counters, group, counts);
            }
            if let Err(err) = scattered {
                tracing::warn!(
                    slot = ?group.slot,
                    counters = group.members.len(),
                    kind = err.kind(),
                    error = %err,
                    "a refused cross-slot reservation could not give back what it took on one slot; \
                     those counters over-count until their window ends"
                );
            }
        }
    }
}

/// After a give-back on `group`, the wait of each set of leases it left
/// empty: none (the reservation's answer counted the lease given back). A
/// set left holding others keeps its wait: the lease given back, the
/// newest, ended last.
fn settle_leases(counters: &[Counter], group: &Group, counts: &mut [u64]) {
    let sets = group
        .members
        .iter()
        .filter(|&&i| counters.get(i).is_some_and(|c| c.lease));
    for (&i, places) in sets.zip(group.leases.chunks(2)) {
        if counts.get(i) == Some(&0)
            && let Some(wait) = places.first().and_then(|&at| counts.get_mut(at))
        {
            *wait = 0;
        }
    }
}

/// The deadline of a give-back after a reservation under `deadline`: the
/// reservation's whole check budget from now. A give-back restores counts
/// that a reservation took moments ago, so it is sent even when the
/// caller's own deadline has passed (it never spends, and applying it late
/// is still right), but no later than a whole check would take: a limiter
/// with a shorter policy gives back within its own budget.
fn give_back_deadline(deadline: Deadline) -> Deadline {
    Deadline::after(deadline.check_budget())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_set_a_give_back_left_empty_has_no_wait() {
        let counter = |key: &str, lease: bool| Counter {
            key: key.into(),
            ttl: Duration::from_secs(60),
            cost: 1,
            max: 2,
            floor: 0,
            prior: None,
            lease,
        };
        let counters = [counter("a", false), counter("b", true)];
        let group = Group {
            slot: redis::cluster_routing::Slot::for_key("b"),
            members: vec![0, 1],
            priors: Vec::new(),
            leases: vec![2, 3],
        };
        let mut emptied = [5, 0, 60_000, 0];
        settle_leases(&counters, &group, &mut emptied);
        assert_eq!(emptied, [5, 0, 0, 0]);
        let mut held = [5, 1, 30_000, 0];
        settle_leases(&counters, &group, &mut held);
        assert_eq!(held, [5, 1, 30_000, 0]);
    }

    #[test]
    fn a_give_back_has_the_checks_whole_budget_from_when_it_starts() {
        for budget in [Duration::from_millis(30), Duration::from_millis(350)] {
            let reservation = Deadline::after(budget);
            let before = Instant::now();
            let give_back = give_back_deadline(reservation);
            assert!(give_back.instant() >= before + budget);
            assert!(give_back.instant() <= Instant::now() + budget);
            assert_eq!(give_back.check_budget(), budget);
        }
    }
}
