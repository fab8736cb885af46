//! The operations of [`RedisClusterStore`]: per hash slot, one call of the
//! script path ([`crate::ops`]), all slots at once.
//!
//! **Priors.** A counter's [`prior`](Counter::prior) (a sliding window's
//! previous window, `limit:<key>:<i-1>` beside `limit:<key>:<i>`) is
//! generally in another slot than its counter, and a script reads only
//! keys of its own slot. So a count or reservation with priors first reads
//! every prior in another slot than its counter's: one `MGET` per slot,
//! all slots at once, under the call's deadline (a value that is not a
//! count refuses the call, as the script refuses a counter holding one;
//! `MGET` reads a key of another type as absent). Then each slot's script
//! gets those counts in its counters' arguments (`~part/whole=count`), so
//! that its record holds them and a retry answers them; a prior in its
//! counter's slot is read by the script itself, in the same atomic step.
//! A call whose priors all sit in their counters' slots (hash-tagged keys),
//! like a call without priors, is one round trip; any other call with
//! priors is two. A prior read beforehand is not read atomically with the
//! write: a caller racing in the previous window (which has ended; only
//! a late attempt or retry of a check that began in it still adds) may be
//! missed by at most one round trip.

use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster_routing::Slot;
use tollgate_core::{
    CheckId, Counter, CounterStore, Deadline, Leases, Named, Reservation, StoreError, async_trait,
};

use super::slots::{self, Group};
use super::{Cluster, RedisClusterStore, Target};
use crate::call::Priors;
use crate::record::Record;
use crate::transport::mget;
use crate::{failure, ops, reply};

impl Cluster {
    /// `counters` grouped by the slot of their keys, each group with the
    /// places of its members' priors' counts in a count's or
    /// reservation's reply (after every counter's count, in counter
    /// order), then of its leases' two numbers each (after every prior's).
    pub(super) fn groups(counters: &[Counter]) -> Vec<Group> {
        let mut groups = slots::group(counters.iter().map(|c| c.key.as_str()));
        let mut place = counters.len();
        for (i, counter) in counters.iter().enumerate() {
            if counter.prior.is_some() {
                if let Some(group) = groups.iter_mut().find(|g| g.members.contains(&i)) {
                    group.priors.push(place);
                }
                place += 1;
            }
        }
        for (i, counter) in counters.iter().enumerate() {
            if counter.lease {
                if let Some(group) = groups.iter_mut().find(|g| g.members.contains(&i)) {
                    group.leases.extend([place, place + 1]);
                }
                place += 2;
            }
        }
        groups
    }

    /// The counts of `counters`' priors read before the call, per prior in
    /// counter order: `Some` for a prior in another slot than its counter
    /// (all of them read at once, one `MGET` per slot), `None` for one in
    /// its counter's slot, which the script reads. Nothing is sent when no
    /// prior is in another slot.
    pub(super) async fn read_priors(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<Option<u64>>, StoreError> {
        let mut read = Vec::new();
        let mut keys: Vec<&str> = Vec::new();
        let mut at = Vec::new();
        for counter in counters {
            if let Some(prior) = &counter.prior {
                if Slot::for_key(&prior.key) != Slot::for_key(&counter.key) {
                    at.push(read.len());
                    keys.push(&prior.key);
                }
                read.push(None);
            }
        }
        if keys.is_empty() {
            return Ok(read);
        }
        let groups = slots::group(keys.iter().copied());
        let counts = per_slot(&groups, keys.len(), false, |group| {
            self.read_group(&keys, group, deadline)
        })
        .await?;
        for (j, count) in at.into_iter().zip(counts) {
            if let Some(place) = read.get_mut(j) {
                *place = Some(count);
            }
        }
        Ok(read)
    }

    /// The priors of `group`'s members, in order, from `read` (the call's,
    /// as [`read_priors`](Cluster::read_priors) gives them): each read
    /// beforehand or `None`, read by the script.
    fn group_priors(counters: &[Counter], group: &Group, read: &[Option<u64>]) -> Vec<Option<u64>> {
        group
            .priors
            .iter()
            .map(|&place| {
                let j = place.saturating_sub(counters.len());
                read.get(j).copied().flatten()
            })
            .collect()
    }

    /// `MGET` of one group of the priors `keys`, read as priors.
    async fn read_group(
        &self,
        keys: &[&str],
        group: &Group,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let keys: Vec<&str> = group
            .members
            .iter()
            .filter_map(|&i| keys.get(i).copied())
            .collect();
        let target = &mut Target::Slot(group.slot);
        let answer = mget(self, &keys, target, deadline).await?;
        reply::prior_counts(answer, keys.len())
    }

    /// The counters of `group`, in order.
    fn members<'a>(counters: &'a [Counter], group: &'a Group) -> impl ops::Batch<'a> + use<'a> {
        group.members.iter().filter_map(|&i| counters.get(i))
    }

    /// The record of the call `id` on `group`, in the group's slot.
    fn record(group: &Group, id: CheckId, deadline: Deadline) -> Record {
        Record::tagged(slots::tag(group.slot), id, deadline)
    }

    /// [`ops::count`] of the call `id` on one group, with its priors from
    /// `read` (the call's). While the group's slot migrates, its counters
    /// on one node and the new record on neither, the call is refused
    /// (`TRYAGAIN`) and sent again without a record.
    async fn count_group(
        &self,
        (counters, read): (&[Counter], &[Option<u64>]),
        group: &Group,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let members = Cluster::members(counters, group);
        let priors = Cluster::group_priors(counters, group, read);
        let batch = (members, Priors::Read(&priors));
        let target = &mut Target::Slot(group.slot);
        let record = Cluster::record(group, id, deadline);
        match ops::count(self, batch.clone(), &record, target, deadline).await {
            Err(err) if failure::is_try_again(&err) => {
                ops::count(self, batch, &Record::none(id), target, deadline).await
            }
            result => result,
        }
    }

    /// [`ops::reserve`] of the call `id` on one group, with its priors
    /// from `read` (the call's; sent again without a record while the slot
    /// migrates, as [`count_group`](Cluster::count_group)), and whether it
    /// was recorded.
    pub(super) async fn reserve_group(
        &self,
        (counters, read): (&[Counter], &[Option<u64>]),
        group: &Group,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<(Reservation, bool), StoreError> {
        let members = Cluster::members(counters, group);
        let priors = Cluster::group_priors(counters, group, read);
        let batch = (members, Priors::Read(&priors));
        let target = &mut Target::Slot(group.slot);
        let record = Cluster::record(group, id, deadline);
        match ops::reserve(self, batch.clone(), &record, target, deadline).await {
            Err(err) if failure::is_try_again(&err) => {
                let none = Record::none(id);
                let reservation = ops::reserve(self, batch, &none, target, deadline).await?;
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
                let unrecorded = (&Record::none(id), false);
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
            Record::none(id)
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
/// returns the `n` counts in the caller's order (with its priors' counts
/// after, for a count: `priors`); the first failure, if any. A call on a
/// slot that failed may have been applied on the others.
async fn per_slot<'a, F, Fut>(
    groups: &'a [Group],
    n: usize,
    priors: bool,
    call: F,
) -> Result<Vec<u64>, StoreError>
where
    F: Fn(&'a Group) -> Fut,
    Fut: Future<Output = Result<Vec<u64>, StoreError>>,
{
    let mut out = vec![0; n];
    if let [group] = groups {
        slots::scatter(&mut out, group, &call(group).await?, priors)?;
        return Ok(out);
    }
    let replies = join_all(groups.iter().map(&call)).await;
    for (group, counts) in groups.iter().zip(replies) {
        slots::scatter(&mut out, group, &counts?, priors)?;
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
    /// slots at once; first, for priors in other slots than their
    /// counters', per slot one `MGET` of them, all slots at once.
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
        let read = self.cluster.read_priors(counters, deadline).await?;
        per_slot(&groups, reply::answered(counters), true, |group| {
            let call = (counters, read.as_slice());
            self.cluster.count_group(call, group, id, deadline)
        })
        .await
    }

    /// Per slot, one `EVALSHA` of [`CHECK`](crate::scripts::CHECK) (reserve), all
    /// slots at once (first, for priors in other slots than their
    /// counters', per slot one `MGET` of them); when a slot refuses, one
    /// `EVALSHA` of the give-back script on each slot that applied.
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
        per_slot(&groups, counters.len(), false, |group| {
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
        per_slot(&groups, keys.len(), false, |group| {
            self.cluster.get_group(keys, group, deadline)
        })
        .await
    }

    /// One `EVALSHA` of [`DELETE`](crate::scripts::DELETE) on the key's slot.
    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        ops::delete(&*self.cluster, key, &mut slot_of(key), deadline).await
    }

    /// One `EVALSHA` of [`END_LEASE`](crate::scripts::END_LEASE) on the set's slot.
    async fn end_lease(
        &self,
        key: &str,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        ops::end_lease(&*self.cluster, (key, id), &mut slot_of(key), deadline).await
    }

    /// One `EVALSHA` of [`RENEW_LEASE`](crate::scripts::RENEW_LEASE) on the set's slot.
    async fn renew_lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let call = (key, id, lifetime);
        ops::renew_lease(&*self.cluster, call, &mut slot_of(key), deadline).await
    }

    /// One `EVALSHA` of [`LEASES`](crate::scripts::LEASES) on the set's slot.
    async fn leases(&self, key: &str, deadline: Deadline) -> Result<Leases, StoreError> {
        ops::leases(&*self.cluster, key, &mut slot_of(key), deadline).await
    }
}

// One `EVALSHA` of `CLAIM`, `FINISH` or `RELEASE` on the key's slot.
ops::mark_store!(RedisClusterStore, cluster, |key| slot_of(key));

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use tollgate_core::Prior;

    use super::*;

    fn counter(key: &str, prior: bool, lease: bool) -> Counter {
        Counter {
            key: key.into(),
            ttl: Duration::from_secs(60),
            cost: 1,
            max: 2,
            floor: 0,
            prior: prior.then(|| Prior {
                key: format!("{key}:previous"),
                part: 1,
                whole: 2,
            }),
            lease,
        }
    }

    /// A reply holds every counter's count, then every prior's count, then
    /// every set of leases' two numbers, in counter order: each group finds
    /// its own members' at their places, whichever slot it is in.
    #[test]
    fn each_group_finds_its_priors_and_leases_where_the_reply_puts_them() {
        let counters = [
            counter("{a}count", true, false),
            counter("{a}lease", false, true),
            counter("{b}lease", true, true),
            counter("{a}other", false, true),
        ];
        let groups = Cluster::groups(&counters);
        let places = |tag: &str| {
            let slot = redis::cluster_routing::Slot::for_key(format!("{{{tag}}}"));
            let group = groups.iter().find(|g| g.slot == slot).unwrap();
            (
                group.members.clone(),
                group.priors.clone(),
                group.leases.clone(),
            )
        };
        assert_eq!(places("a"), (vec![0, 1, 3], vec![4], vec![6, 7, 10, 11]));
        assert_eq!(places("b"), (vec![2], vec![5], vec![8, 9]));
        assert_eq!(groups.len(), 2);
    }
}
