//! All-or-nothing reservations whose counters span hash slots.
//!
//! Redis runs a script on the keys of one slot only, so a reservation
//! across slots is one conditional reservation per slot
//! ([`RESERVE_SCRIPT`](crate::RESERVE_SCRIPT) on that slot's counters), all
//! at once. When every slot applies, the reservation is applied. When any
//! slot refuses (or fails), each slot that applied gets its costs back
//! ([`REFUND_SCRIPT`](crate::REFUND_SCRIPT) with the same costs), all at
//! once, and the reservation is refused. The give-back also removes a
//! counter it brings back to 0, so a counter the reservation created is
//! absent again (see `give_back`).
//!
//! - It never over-admits: each slot's reservation is conditional, so no
//!   counter ever goes past its max, and a call is answered applied only
//!   when every slot applied.
//! - Between a slot's reservation and its give-back (one round trip to the
//!   slowest slot of the check, and one more), the costs taken there are
//!   visible: a racing caller may be refused by them.
//! - A give-back that fails is logged: those counters over-count (the safe
//!   direction) until their window ends.

use std::time::Duration;

use futures_util::future::join_all;
use tollgate_core::{Counter, Deadline, Reservation, StoreError};

use super::RedisClusterStore;
use super::slots::{Group, scatter};
use crate::link::CONNECT_TIMEOUT;

/// The deadline of a give-back, from when it starts: the default
/// [`RetryPolicy::worst_case`](tollgate_core::RetryPolicy::worst_case)
/// (350 ms). A give-back restores counts that a reservation took moments
/// ago, so it is sent even when the caller's own deadline has passed: it
/// never spends, and applying it late is still right.
pub(crate) const GIVE_BACK_BUDGET: Duration = CONNECT_TIMEOUT;

impl RedisClusterStore {
    /// [`CounterStore::reserve`](tollgate_core::CounterStore::reserve) on
    /// any number of slots.
    pub(super) async fn reserve_across(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let groups = self.groups(counters);
        if let [group] = groups.as_slice() {
            // One slot: the script is atomic across the whole batch.
            let reservation = self.reserve_group(counters, group, deadline).await?;
            let mut counts = vec![0; counters.len()];
            scatter(&mut counts, group, &reservation.counts)?;
            return Ok(Reservation {
                applied: reservation.applied,
                counts,
            });
        }
        // In a task of its own: a caller cut off at its deadline drops only
        // its wait, and the task still gives back what the slots took.
        let store = self.clone();
        let counters = counters.to_vec();
        let task =
            tokio::spawn(async move { store.reserve_slots(&counters, &groups, deadline).await });
        task.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(
                "a cross-slot reservation task ended early".into(),
            ))
        })
    }

    async fn reserve_slots(
        &self,
        counters: &[Counter],
        groups: &[Group],
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let replies = join_all(
            groups
                .iter()
                .map(|group| self.reserve_group(counters, group, deadline)),
        )
        .await;
        let mut counts = vec![0; counters.len()];
        let mut taken = Vec::new();
        let mut refused = false;
        let mut failure = None;
        for (group, reply) in groups.iter().zip(replies) {
            match reply {
                Ok(reservation) => {
                    if reservation.applied {
                        taken.push(group);
                    } else {
                        refused = true;
                    }
                    if let Err(err) = scatter(&mut counts, group, &reservation.counts) {
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
        self.give_back(counters, &taken, &mut counts).await;
        match failure {
            Some(err) => Err(err),
            None => Ok(Reservation {
                applied: false,
                counts,
            }),
        }
    }

    /// Refunds each group of `taken` its costs, all at once, writing the
    /// counts after the give-back into `counts`; logs each that fails
    /// (`counts` then keeps the count with the reservation in it).
    async fn give_back(&self, counters: &[Counter], taken: &[&Group], counts: &mut [u64]) {
        if taken.is_empty() {
            return;
        }
        let deadline = Deadline::after(GIVE_BACK_BUDGET);
        let replies = join_all(
            taken
                .iter()
                .map(|group| self.refund_group(counters, group, deadline, true)),
        )
        .await;
        for (group, reply) in taken.iter().zip(replies) {
            if let Err(err) = reply.and_then(|after| scatter(counts, group, &after)) {
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
