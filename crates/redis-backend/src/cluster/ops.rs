//! The [`CounterStore`] operations of [`RedisClusterStore`]: per hash slot,
//! one script call, all slots at once.

use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use redis::Cmd;
use tollgate_core::{
    Claim, Counter, CounterStore, Deadline, MarkStore, Reservation, StoreError, async_trait,
};
use tollgate_redis_scripts::{Counters, Single};

use super::slots::{self, Group};
use super::{Lua, RedisClusterStore};
use crate::{command, reply};

impl RedisClusterStore {
    /// `counters` grouped by the slot of their keys.
    pub(super) fn groups(&self, counters: &[Counter]) -> Vec<Group> {
        slots::group(self.prefix(), counters.iter().map(|c| c.key.as_str()))
    }

    /// One script call of `lua` (laid out as `layout`) on `group`'s counters.
    fn group_cmd(
        &self,
        lua: &Lua,
        layout: Counters,
        counters: &[Counter],
        group: &Group,
        deadline: Deadline,
    ) -> Cmd {
        let members = group.members.iter().filter_map(|&i| counters.get(i));
        let cutoff = deadline.cutoff_unix_millis();
        command::counters(&lua.script, layout, members, cutoff, self.prefix())
    }

    /// [`COUNT_SCRIPT`](crate::COUNT_SCRIPT) on one group: its new counts.
    async fn count_group(
        &self,
        counters: &[Counter],
        group: &Group,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let lua = &self.inner.scripts.count;
        let cmd = self.group_cmd(lua, Counters::Count, counters, group, deadline);
        let value = self.eval(lua, group.slot, cmd, deadline).await?;
        reply::counts(value, group.members.len())
    }

    /// [`RESERVE_SCRIPT`](crate::RESERVE_SCRIPT) on one group.
    pub(super) async fn reserve_group(
        &self,
        counters: &[Counter],
        group: &Group,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let lua = &self.inner.scripts.reserve;
        let cmd = self.group_cmd(lua, Counters::Reserve, counters, group, deadline);
        let value = self.eval(lua, group.slot, cmd, deadline).await?;
        reply::reservation(value, group.members.len())
    }

    /// [`REFUND_SCRIPT`](crate::REFUND_SCRIPT) (or, to give back a
    /// reservation, the give-back script) on one group: its new counts.
    pub(super) async fn refund_group(
        &self,
        counters: &[Counter],
        group: &Group,
        deadline: Deadline,
        giving_back: bool,
    ) -> Result<Vec<u64>, StoreError> {
        let scripts = &self.inner.scripts;
        let lua = if giving_back {
            &scripts.give_back
        } else {
            &scripts.refund
        };
        let cmd = self.group_cmd(lua, Counters::Refund, counters, group, deadline);
        let value = self.eval(lua, group.slot, cmd, deadline).await?;
        reply::counts(value, group.members.len())
    }

    /// `MGET` of one group's keys.
    async fn get_group(
        &self,
        keys: &[String],
        group: &Group,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let mut cmd = redis::cmd("MGET");
        for key in group.members.iter().filter_map(|&i| keys.get(i)) {
            self.key(&mut cmd, key);
        }
        let value = self.command(group.slot, cmd, deadline).await?;
        reply::stored_counts(value, group.members.len())
    }

    /// One script call of `lua` (laid out as `layout`) on `key`'s slot.
    async fn on_key(
        &self,
        lua: &Lua,
        layout: Single<'_>,
        key: &str,
        deadline: Deadline,
    ) -> Result<redis::Value, StoreError> {
        let cutoff = deadline.cutoff_unix_millis();
        let cmd = command::single(&lua.script, layout, key, cutoff, self.prefix());
        let slot = slots::slot_of(self.prefix(), key);
        self.eval(lua, slot, cmd, deadline).await
    }
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

#[async_trait]
impl CounterStore for RedisClusterStore {
    fn name(&self) -> &'static str {
        "redis-cluster"
    }

    /// Per slot, one `EVALSHA` of [`COUNT_SCRIPT`](crate::COUNT_SCRIPT);
    /// all slots at once.
    async fn count(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.groups(counters);
        per_slot(&groups, counters.len(), |group| {
            self.count_group(counters, group, deadline)
        })
        .await
    }

    /// Per slot, one `EVALSHA` of [`RESERVE_SCRIPT`](crate::RESERVE_SCRIPT),
    /// all slots at once; when a slot refuses, one `EVALSHA` of
    /// [`REFUND_SCRIPT`](crate::REFUND_SCRIPT) on each slot that applied.
    async fn reserve(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        if counters.is_empty() {
            return Ok(Reservation {
                applied: true,
                counts: Vec::new(),
            });
        }
        self.reserve_across(counters, deadline).await
    }

    /// Per slot, one `EVALSHA` of [`REFUND_SCRIPT`](crate::REFUND_SCRIPT);
    /// all slots at once.
    async fn refund(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.groups(counters);
        per_slot(&groups, counters.len(), |group| {
            self.refund_group(counters, group, deadline, false)
        })
        .await
    }

    /// Per slot, one `MGET` (a read: no deadline check); all slots at once.
    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let groups = slots::group(self.prefix(), keys.iter().map(String::as_str));
        per_slot(&groups, keys.len(), |group| {
            self.get_group(keys, group, deadline)
        })
        .await
    }

    /// One `EVALSHA` of [`DELETE_SCRIPT`](crate::DELETE_SCRIPT) on the key's slot.
    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        let lua = &self.inner.scripts.delete;
        let value = self.on_key(lua, Single::Delete, key, deadline).await?;
        reply::deleted(value)
    }
}

#[async_trait]
impl MarkStore for RedisClusterStore {
    fn name(&self) -> &'static str {
        "redis-cluster"
    }

    /// One `EVALSHA` of [`CLAIM_SCRIPT`](crate::CLAIM_SCRIPT) on the key's slot.
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let lua = &self.inner.scripts.claim;
        let claim = Single::Claim { token, ttl };
        let value = self.on_key(lua, claim, key, deadline).await?;
        reply::claim(value)
    }

    /// One `EVALSHA` of [`FINISH_SCRIPT`](crate::FINISH_SCRIPT) on the key's slot.
    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let lua = &self.inner.scripts.finish;
        let finish = Single::Finish { token, ttl };
        let value = self.on_key(lua, finish, key, deadline).await?;
        reply::flag(value)
    }

    /// One `EVALSHA` of [`RELEASE_SCRIPT`](crate::RELEASE_SCRIPT) on the key's slot.
    async fn release(
        &self,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let lua = &self.inner.scripts.release;
        let release = Single::Release { token };
        let value = self.on_key(lua, release, key, deadline).await?;
        reply::flag(value)
    }
}
