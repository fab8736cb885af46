//! The [`CounterStore`] operations of [`UpstashStore`]: one script call per
//! write, one `MGET` per read, each one HTTP request.

use std::time::Duration;

use tollgate_core::{
    Claim, Counter, CounterStore, Deadline, MARK_DONE, Reservation, StoreError, async_trait,
};

use crate::command::{self, Tail};
use crate::store::millis;
use crate::{UpstashStore, reply};

/// The start of a script call's arguments: `numkeys`, the keys, then the
/// deadline (`ARGV[1]` of every write script).
fn tail(keys: &[&str], args: usize, deadline: Deadline) -> Tail {
    let bytes = keys.iter().map(|k| k.len() + 3).sum::<usize>() + args * 24;
    let mut tail = Tail::new(keys.len(), bytes);
    for key in keys {
        tail.string(key);
    }
    tail.number(deadline.cutoff_unix_millis());
    tail
}

fn keys(counters: &[Counter]) -> Vec<&str> {
    counters.iter().map(|c| c.key.as_str()).collect()
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
        let mut args = tail(&keys(counters), 2 * counters.len(), deadline);
        for counter in counters {
            args.number(millis(counter.ttl));
            args.number(counter.cost);
        }
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
        let mut args = tail(&keys(counters), 3 * counters.len(), deadline);
        for counter in counters {
            args.number(millis(counter.ttl));
            args.number(counter.cost);
            args.number(counter.max);
        }
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
        let mut args = tail(&keys(counters), counters.len(), deadline);
        for counter in counters {
            args.number(counter.cost);
        }
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
        let args = tail(&[key], 0, deadline);
        let value = self
            .eval(&self.inner.scripts.delete, args, deadline)
            .await?;
        reply::deleted(&value)
    }

    /// One request: `EVALSHA` of the claim script (`tollgate_redis_scripts::CLAIM`).
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let mut args = tail(&[key], 2 + token.len() / 24, deadline);
        args.string(token);
        args.number(millis(ttl));
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
        let mut args = tail(&[key], 3 + token.len() / 24, deadline);
        args.string(token);
        args.number(millis(ttl));
        args.string(MARK_DONE);
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
        let mut args = tail(&[key], 1 + token.len() / 24, deadline);
        args.string(token);
        let value = self
            .eval(&self.inner.scripts.release, args, deadline)
            .await?;
        reply::flag(&value)
    }
}
