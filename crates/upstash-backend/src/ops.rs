//! The [`CounterStore`] operations of [`UpstashStore`]: one script call per
//! write, one `MGET` per read, each one HTTP request.

use std::time::Duration;

use tollgate_core::{
    Claim, Counter, CounterStore, Deadline, MarkStore, Reservation, StoreError, async_trait,
};

use tollgate_redis_scripts::{Counters, Single};

use crate::command::{self, Tail};
use crate::{UpstashStore, reply};

/// The arguments of a call of the counter script laid out as `layout`.
fn counters_tail(layout: Counters, counters: &[Counter], deadline: Deadline) -> Tail {
    let keys = counters.iter().map(|c| c.key.len());
    let room = command::room(keys, layout.per_counter(), counters.len());
    let mut tail = Tail::new(counters.len(), room);
    layout.write(&mut tail, counters, deadline.cutoff_unix_millis());
    tail
}

/// The arguments of a call of the one-key script laid out as `layout`.
fn single_tail(layout: Single<'_>, key: &str, deadline: Deadline) -> Tail {
    let room = command::room([key.len(), layout.text_bytes()], layout.args(), 1);
    let mut tail = Tail::new(1, room);
    layout.write(&mut tail, key, deadline.cutoff_unix_millis());
    tail
}

#[async_trait]
impl CounterStore for UpstashStore {
    fn name(&self) -> &'static str {
        "upstash"
    }

    /// One request: `EVALSHA` of the count script (`tollgate_redis_scripts::COUNT`).
    async fn count(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let args = counters_tail(Counters::Count, counters, deadline);
        let value = self.eval(&self.inner.scripts.count, args, deadline).await?;
        reply::counts(value, counters.len())
    }

    /// One request: `EVALSHA` of the reserve script (`tollgate_redis_scripts::RESERVE`).
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
        let args = counters_tail(Counters::Reserve, counters, deadline);
        let value = self
            .eval(&self.inner.scripts.reserve, args, deadline)
            .await?;
        reply::reservation(value, counters.len())
    }

    /// One request: `EVALSHA` of the refund script (`tollgate_redis_scripts::REFUND`).
    async fn refund(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let args = counters_tail(Counters::Refund, counters, deadline);
        let value = self
            .eval(&self.inner.scripts.refund, args, deadline)
            .await?;
        reply::counts(value, counters.len())
    }

    /// One request: `MGET` (a read: no deadline check on the server).
    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let value = self.command(command::mget(keys), deadline).await?;
        reply::stored_counts(value, keys.len())
    }

    /// One request: `EVALSHA` of the delete script (`tollgate_redis_scripts::DELETE`).
    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        let args = single_tail(Single::Delete, key, deadline);
        let value = self
            .eval(&self.inner.scripts.delete, args, deadline)
            .await?;
        reply::deleted(&value)
    }
}

#[async_trait]
impl MarkStore for UpstashStore {
    fn name(&self) -> &'static str {
        "upstash"
    }

    /// One request: `EVALSHA` of the claim script (`tollgate_redis_scripts::CLAIM`).
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let args = single_tail(Single::Claim { token, ttl }, key, deadline);
        let value = self.eval(&self.inner.scripts.claim, args, deadline).await?;
        reply::claim(&value)
    }

    /// One request: `EVALSHA` of the finish script (`tollgate_redis_scripts::FINISH`).
    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let args = single_tail(Single::Finish { token, ttl }, key, deadline);
        let value = self
            .eval(&self.inner.scripts.finish, args, deadline)
            .await?;
        reply::flag(&value)
    }

    /// One request: `EVALSHA` of the release script (`tollgate_redis_scripts::RELEASE`).
    async fn release(
        &self,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let args = single_tail(Single::Release { token }, key, deadline);
        let value = self
            .eval(&self.inner.scripts.release, args, deadline)
            .await?;
        reply::flag(&value)
    }
}
