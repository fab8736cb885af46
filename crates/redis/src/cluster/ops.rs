//! The operations of [`RedisClusterStore`]: per hash slot, one call of the
//! script path ([`crate::ops`]), all slots at once.

use std::future::Future;

use futures_util::future::join_all;
use tollgate_core::{
    CheckId, Counter, CounterStore, Deadline, Named, Reservation, StoreError, async_trait,
};

use super::slots::{self, Group};
use super::{Cluster, RedisClusterStore, Target};
use crate::record::Record;
use crate::{failure, ops};

impl Cluster {
    /// `counters` grouped by the slot of their keys.
    pub(super) fn groups(counters: &[Counter]) -> Vec<Group> {
        slots::group(counters.iter().map(|c| c.key.as_str()))
    }

    /// The counters of `group`, in order.
    fn members<'a>(counters: &'a [Counter], group: &'a Group) -> impl ops::Batch<'a> + use<'a> {
        group.members.iter().filter_map(|&i| counters.get(i))
    }

    /// The record of the call `id` on `group`, in the group's slot.
    fn record(group: &Group, id: CheckId, deadline: Deadline) -> Record {
        Record::tagged(slots::tag(group.slot), id, deadline)
    }

    /// [`ops::count`] of the call `id` on one group. While the group's slot
    /// migrates, its counters on one node and the new record on neither,
    /// the call is refused (`TRYAGAIN`) and sent again without a record.
    async fn count_group(
        &self,
        counters: &[Counter],
        group: &Group,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let members = Cluster::members(counters, group);
        let target = &mut Target::Slot(group.slot);
        let record = Cluster::record(group, id, deadline);
        match ops::count(self, members.clone(), &record, target, deadline).await {
            Err(err) if failure::is_try_again(&err) => {
                ops::count(self, members, &Record::none(), target, deadline).await
            }
            result => result,
        }
    }

    /// [`ops::reserve`] of the call `id` on one group (sent again without
    /// a record while the slot migrates, as [`count_group`](Cluster::count_group)),
    /// and whether it was recorded.
    pub(super) async fn reserve_group(
        &self,
        counters: &[Counter],
        group: &Group,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<(Reservation, bool), StoreError> {
        let members = Cluster::members(counters, group);
        let target = &mut Target::Slot(group.slot);
        let record = Cluster::record(group, id, deadline);
        match ops::reserve(self, members.clone(), &record, target, deadline).await {
            Err(err) if failure::is_try_again(&err) => {
                let none = Record::none();
                let reservation = ops::reserve(self, members, &none, target, deadline).await?;
                Ok((reservation, false))
            }
            result => Ok((result?, true)),
        }
    }

    /// [`ops::refund`] of the call `id` on one group (sent again without a
    /// record while the slot migrates).
    async fn refund_group(
        &self,
        counters: &[Counter],
        group: &Group,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let members = Cluster::members(counters, group);
        let target = &mut Target::Slot(group.slot);
        let record = Cluster::record(group, id, deadline);
        match ops::refund(self, members.clone(), (&record, false), target, deadline).await {
            Err(err) if failure::is_try_again(&err) => {
                let unrecorded = (&Record::none(), false);
                ops::refund(self, members, unrecorded, target, deadline).await
            }
            result => result,
        }
    }

    /// The give-back on one group of the reservation `id`, which was
    /// `recorded` there or not.
    pub(super) async fn give_back_group(
        &self,
        counters: &[Counter],
        group: &Group,
        (id, recorded, reserved): (CheckId, bool, Deadline),
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let members = Cluster::members(counters, group);
        let target = &mut Target::Slot(group.slot);
        let record = if recorded {
            Cluster::record(group, id, reserved)
        } else {
            Record::none()
        };
        ops::refund(self, members, (&record, true), target, deadline).await
    }

    /// [`ops::get`] of one group's keys.
    async fn get_group(
        &self,
        keys: &[String],
        group: &Group,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let keys: Vec<&str> = group
            .members
            .iter()
            .filter_map(|&i| keys.get(i).map(String::as_str))
            .collect();
        ops::get(self, &keys, &mut Target::Slot(group.slot), deadline).await
    }
}

/// The slot of one key, as a call's first target.
fn slot_of(key: &str) -> Target {
    Target::Slot(redis::cluster_routing::Slot::for_key(key))
}

/// Runs `call` on every group at once (directly when there is one) and
/// returns the counts in the caller's order; the first failure, if any.
/// A call on a slot that failed may have been applied on the others.
async fn per_slot<'a, F, Fut>(
    groups: &'a [Group],
    n: usize,
    call: F,
) -> Result<Vec<u64>, StoreError>
where
    F: Fn(&'a Group) -> Fut,
    Fut: Future<Output = Result<Vec<u64>, StoreError>>,
{
    let mut out = vec![0; n];
    if let [group] = groups {
        slots::scatter(&mut out, group, &call(group).await?)?;
        return Ok(out);
    }
    let replies = join_all(groups.iter().map(&call)).await;
    for (group, counts) in groups.iter().zip(replies) {
        slots::scatter(&mut out, group, &counts?)?;
    }
    Ok(out)
}

impl Named for RedisClusterStore {
    fn name(&self) -> &'static str {
        "redis-cluster"
    }
}

#[async_trait]
impl CounterStore for RedisClusterStore {
    /// Per slot, one `EVALSHA` of [`CHECK`](crate::scripts::CHECK) (count); all
    /// slots at once.
    async fn count(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let groups = Cluster::groups(counters);
        per_slot(&groups, counters.len(), |group| {
            self.cluster.count_group(counters, group, id, deadline)
        })
        .await
    }

    /// Per slot, one `EVALSHA` of [`CHECK`](crate::scripts::CHECK) (reserve), all
    /// slots at once; when a slot refuses, one `EVALSHA` of the give-back
    /// script on each slot that applied.
    async fn reserve(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        if counters.is_empty() {
            return Ok(Reservation {
                applied: true,
                counts: Vec::new(),
            });
        }
        self.reserve_across(counters, id, deadline).await
    }

    /// Per slot, one `EVALSHA` of [`CHECK`](crate::scripts::CHECK) (refund); all
    /// slots at once.
    async fn refund(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let groups = Cluster::groups(counters);
        per_slot(&groups, counters.len(), |group| {
            self.cluster.refund_group(counters, group, id, deadline)
        })
        .await
    }

    /// Per slot, one `MGET` (a read: no deadline check); all slots at once.
    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let groups = slots::group(keys.iter().map(String::as_str));
        per_slot(&groups, keys.len(), |group| {
            self.cluster.get_group(keys, group, deadline)
        })
        .await
    }

    /// One `EVALSHA` of [`DELETE`](crate::scripts::DELETE) on the key's slot.
    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        ops::delete(&*self.cluster, key, &mut slot_of(key), deadline).await
    }
}

// One `EVALSHA` of `CLAIM`, `FINISH` or `RELEASE` on the key's slot.
ops::mark_store!(RedisClusterStore, cluster, |key| slot_of(key));
