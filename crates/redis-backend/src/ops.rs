//! The [`CounterStore`] operations of [`RedisStore`]: one `EVALSHA` per write.

use std::time::Duration;

use tollgate_core::{
    Claim, Counter, CounterStore, Deadline, MARK_DONE, Reservation, StoreError, async_trait,
};

use crate::store::millis;
use crate::{RedisStore, reply};

fn key_bytes(counters: &[Counter]) -> usize {
    counters.iter().map(|c| c.key.len()).sum()
}

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
        let n = counters.len();
        let mut cmd = self.evalsha(script, n, 1 + 2 * n, key_bytes(counters));
        for counter in counters {
            self.key(&mut cmd, &counter.key);
        }
        cmd.arg(deadline.cutoff_unix_millis());
        for counter in counters {
            cmd.arg(millis(counter.ttl)).arg(counter.cost);
        }
        reply::counts(self.eval(script, cmd, deadline).await?, n)
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
        let n = counters.len();
        let mut cmd = self.evalsha(script, n, 1 + 3 * n, key_bytes(counters));
        for counter in counters {
            self.key(&mut cmd, &counter.key);
        }
        cmd.arg(deadline.cutoff_unix_millis());
        for counter in counters {
            cmd.arg(millis(counter.ttl))
                .arg(counter.cost)
                .arg(counter.max);
        }
        reply::reservation(self.eval(script, cmd, deadline).await?, n)
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
        let n = counters.len();
        let mut cmd = self.evalsha(script, n, 1 + n, key_bytes(counters));
        for counter in counters {
            self.key(&mut cmd, &counter.key);
        }
        cmd.arg(deadline.cutoff_unix_millis());
        for counter in counters {
            cmd.arg(counter.cost);
        }
        reply::counts(self.eval(script, cmd, deadline).await?, n)
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
        let mut cmd = self.evalsha(script, 1, 1, key.len());
        self.key(&mut cmd, key);
        cmd.arg(deadline.cutoff_unix_millis());
        reply::deleted(self.eval(script, cmd, deadline).await?)
    }

    /// One `EVALSHA` of [`CLAIM_SCRIPT`](crate::CLAIM_SCRIPT).
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let script = &self.inner.scripts.claim;
        let mut cmd = self.evalsha(script, 1, 3, key.len() + token.len());
        self.key(&mut cmd, key);
        cmd.arg(deadline.cutoff_unix_millis())
            .arg(token)
            .arg(millis(ttl));
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
        let mut cmd = self.evalsha(script, 1, 4, key.len() + token.len());
        self.key(&mut cmd, key);
        cmd.arg(deadline.cutoff_unix_millis())
            .arg(token)
            .arg(millis(ttl))
            .arg(MARK_DONE);
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
        let mut cmd = self.evalsha(script, 1, 2, key.len() + token.len());
        self.key(&mut cmd, key);
        cmd.arg(deadline.cutoff_unix_millis()).arg(token);
        reply::flag(self.eval(script, cmd, deadline).await?)
    }
}
