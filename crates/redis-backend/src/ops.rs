//! The [`CounterStore`] operations of [`RedisStore`]: one `EVALSHA` per write.

use std::time::Duration;

use tollgate_core::{
    Claim, Counter, CounterStore, Deadline, MarkStore, Reservation, StoreError, async_trait,
};

use tollgate_redis_scripts::{Counters, Single};

use crate::{RedisStore, reply};

#[async_trait]
impl CounterStore for RedisStore {
    /// One `EVALSHA` of [`COUNT_SCRIPT`](crate::COUNT_SCRIPT).
    async fn count(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let script = &self.inner.scripts.count;
        let cmd = self.counters(script, Counters::Count, counters, deadline);
        reply::counts(self.eval(script, cmd, deadline).await?, counters.len())
    }

    /// One `EVALSHA` of [`RESERVE_SCRIPT`](crate::RESERVE_SCRIPT).
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
        let script = &self.inner.scripts.reserve;
        let cmd = self.counters(script, Counters::Reserve, counters, deadline);
        reply::reservation(self.eval(script, cmd, deadline).await?, counters.len())
    }

    /// One `EVALSHA` of [`REFUND_SCRIPT`](crate::REFUND_SCRIPT).
    async fn refund(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let script = &self.inner.scripts.refund;
        let cmd = self.counters(script, Counters::Refund, counters, deadline);
        reply::counts(self.eval(script, cmd, deadline).await?, counters.len())
    }

    /// `MGET` (a read: no deadline check).
    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        for key in keys {
            self.key(&mut cmd, key);
        }
        reply::stored_counts(self.command(cmd, deadline).await?, keys.len())
    }

    /// One `EVALSHA` of [`DELETE_SCRIPT`](crate::DELETE_SCRIPT).
    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        let script = &self.inner.scripts.delete;
        let cmd = self.single(script, Single::Delete, key, deadline);
        reply::deleted(self.eval(script, cmd, deadline).await?)
    }
}

#[async_trait]
impl MarkStore for RedisStore {
    /// One `EVALSHA` of [`CLAIM_SCRIPT`](crate::CLAIM_SCRIPT).
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let script = &self.inner.scripts.claim;
        let cmd = self.single(script, Single::Claim { token, ttl }, key, deadline);
        reply::claim(self.eval(script, cmd, deadline).await?)
    }

    /// One `EVALSHA` of [`FINISH_SCRIPT`](crate::FINISH_SCRIPT).
    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let script = &self.inner.scripts.finish;
        let cmd = self.single(script, Single::Finish { token, ttl }, key, deadline);
        reply::flag(self.eval(script, cmd, deadline).await?)
    }

    /// One `EVALSHA` of [`RELEASE_SCRIPT`](crate::RELEASE_SCRIPT).
    async fn release(
        &self,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let script = &self.inner.scripts.release;
        let cmd = self.single(script, Single::Release { token }, key, deadline);
        reply::flag(self.eval(script, cmd, deadline).await?)
    }
}
