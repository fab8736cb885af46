//! [`Flawed`]: the memory store with one rule of the contract broken.

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{
    CheckId, Claim, Counter, CounterStore, Deadline, Leases, MAX_COUNT, MarkStore, Named,
    Reservation, StoreError, async_trait,
};
use tollgate_memory::MemoryStore;

/// One broken rule of the store contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flaw {
    /// None: the wrapper passes every check (the control).
    None,
    /// Not a flaw either: every increment gives the counter a fresh
    /// lifetime of its ttl (as Redis `PEXPIRE` on each count does), which
    /// the contract allows; a second control.
    RenewsTtlOnIncrement,
    /// Counts, reserves and refunds 1, whatever the cost.
    CostIsOne,
    /// A count past 2^53 wraps around instead of saturating.
    CountWraps,
    /// A refund of more than the count wraps below zero (read as 2^53).
    RefundWraps,
    /// A refund of an absent counter creates it, at 0.
    RefundCreates,
    /// A refund gives the counter a fresh lifetime of its ttl.
    RefundRenewsTtl,
    /// Every counter lives 60 s, whatever its ttl.
    TtlSixty,
    /// Every counter lives twice its ttl (still within two windows).
    TtlDoubled,
    /// Every counter lives half its ttl: a sliding window's previous
    /// counter is gone before its weight is.
    TtlHalved,
    /// Reads every counter as 0: a sliding window never sees its previous
    /// window.
    GetReadsZero,
    /// Ignores a counter's floor: a GCRA arrival time in the past is not
    /// raised to now.
    FloorIgnored,
    /// Never reads a counter's prior (answers 0 for it): a sliding window
    /// whose store ignores the previous window.
    PriorIgnored,
    /// Weighs a prior by the part of its window elapsed (`f`) instead of
    /// the part left (`1 − f`).
    PriorWeighedByElapsed,
    /// A refused reservation still adds the costs that fit.
    ReservePartial,
    /// A reservation adds every cost, whatever the max.
    ReserveIgnoresMax,
    /// Every window's counter of a key is one counter.
    MergesWindows,
    /// A claim finds its own token held.
    ClaimHeldForOwnToken,
    /// A claim overwrites any mark (SET without NX).
    ClaimOverwrites,
    /// A mark lives a day, whatever the lease.
    LeaseNeverEnds,
    /// Finishing overwrites another token's mark.
    FinishOverwrites,
    /// Releasing deletes any token's mark.
    ReleaseDeletesOthers,
    /// Releasing does nothing.
    ReleaseNever,
    /// A set of leases takes any number of leases.
    LeaseIgnoresMax,
    /// A lease lasts a day, whatever its lifetime: a crashed holder's
    /// lease is never free in time.
    LeaseNeverExpires,
    /// Renewing a lease answers that it was held and changes nothing.
    RenewNever,
    /// Ending a lease that is not held ends another holder's.
    EndsAnyLease,
    /// A refused reservation still takes its leases.
    RefusedTakesLease,
    /// A refused reservation still counts its rate limits.
    RefusedSpendsRate,
    /// Every attempt is applied, whatever its [`CheckId`]: a retry of an
    /// applied call applies it again.
    IdIgnored,
}

/// The memory store, broken by `flaw`. Every call holds one lock, so the
/// flaws built of several inner calls are still atomic.
#[derive(Clone, Debug)]
pub(crate) struct Flawed {
    pub(crate) inner: MemoryStore,
    pub(crate) flaw: Flaw,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl Flawed {
    /// `inner` broken by `flaw`.
    pub(crate) fn new(inner: MemoryStore, flaw: Flaw) -> Flawed {
        Flawed {
            inner,
            flaw,
            lock: Arc::default(),
        }
    }

    /// The id the inner store is given: a fresh one when ids are ignored.
    fn id(&self, id: CheckId) -> CheckId {
        if self.flaw == Flaw::IdIgnored {
            CheckId::new()
        } else {
            id
        }
    }

    fn counters(&self, counters: &[Counter]) -> Vec<Counter> {
        counters
            .iter()
            .map(|c| {
                let mut c = c.clone();
                match self.flaw {
                    Flaw::CostIsOne => c.cost = 1,
                    Flaw::TtlSixty => c.ttl = Duration::from_secs(60),
                    Flaw::TtlDoubled => c.ttl *= 2,
                    Flaw::TtlHalved => c.ttl /= 2,
                    Flaw::FloorIgnored => c.floor = 0,
                    Flaw::PriorIgnored => c.prior = None,
                    Flaw::LeaseIgnoresMax if c.lease => c.max = MAX_COUNT,
                    Flaw::LeaseNeverExpires if c.lease => c.ttl = Duration::from_secs(86_400),
                    Flaw::PriorWeighedByElapsed => {
                        if let Some(prior) = &mut c.prior {
                            prior.part = prior.whole - prior.part;
                        }
                    }
                    Flaw::MergesWindows => c.key = merged(&c.key),
                    _ => {}
                }
                c
            })
            .collect()
    }

    async fn get_one(&self, key: &str, deadline: Deadline) -> Result<u64, StoreError> {
        let counts = self.inner.get(&[key.to_owned()], deadline).await?;
        Ok(counts.first().copied().unwrap_or(0))
    }

    /// Sets `counter.key` to `count` by deleting and counting it again.
    async fn set(
        &self,
        counter: &Counter,
        count: u64,
        deadline: Deadline,
    ) -> Result<(), StoreError> {
        self.inner.delete(&counter.key, deadline).await?;
        if count > 0 {
            // Written afresh as it stands: no floor to raise it, and a
            // floored counter's lifetime past the time it holds.
            let ttl = if counter.floor > 0 {
                counter.lifetime_at(count)
            } else {
                counter.ttl
            };
            let again = Counter {
                cost: count,
                floor: 0,
                prior: None,
                lease: false,
                ttl,
                ..counter.clone()
            };
            self.inner.count(&[again], CheckId::new(), deadline).await?;
        }
        Ok(())
    }
}

/// A count of 0 for each prior of `counters`: what a store that never
/// reads them answers.
fn ignored(counters: &[Counter]) -> impl Iterator<Item = u64> + use<> {
    let asked = counters.iter().filter(|c| c.prior.is_some()).count();
    std::iter::repeat_n(0, asked)
}

/// The key without its window index.
fn merged(key: &str) -> String {
    key.rsplit_once(':')
        .map_or(key, |(head, _)| head)
        .to_owned()
}

impl Named for Flawed {}

#[async_trait]
impl CounterStore for Flawed {
    async fn count(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let _one = self.lock.lock().await;
        let original = counters;
        let counters = self.counters(counters);
        let id = self.id(id);
        if self.flaw == Flaw::RenewsTtlOnIncrement {
            let counts = self.inner.count(&counters, id, deadline).await?;
            for c in counters.iter().filter(|c| !c.lease) {
                // The stored count, not the answer: a retry is answered
                // what its first attempt applied.
                let stored = self.get_one(&c.key, deadline).await?;
                self.set(c, stored, deadline).await?;
            }
            return Ok(counts);
        }
        if self.flaw == Flaw::PriorIgnored {
            let mut counts = self.inner.count(&counters, id, deadline).await?;
            counts.extend(ignored(original));
            return Ok(counts);
        }
        if self.flaw != Flaw::CountWraps {
            return self.inner.count(&counters, id, deadline).await;
        }
        let mut counts = Vec::new();
        for c in &counters {
            let count = (self.get_one(&c.key, deadline).await? + c.cost) % MAX_COUNT;
            self.set(c, count, deadline).await?;
            counts.push(count);
        }
        Ok(counts)
    }

    async fn reserve(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let _one = self.lock.lock().await;
        let original = counters;
        let counters = self.counters(counters);
        let id = self.id(id);
        match self.flaw {
            Flaw::ReserveIgnoresMax => {
                let counts = self.inner.count(&counters, id, deadline).await?;
                Ok(Reservation {
                    applied: true,
                    counts,
                })
            }
            Flaw::ReservePartial => {
                let reply = self.inner.reserve(&counters, id, deadline).await?;
                if !reply.applied {
                    for c in &counters {
                        self.inner
                            .reserve(std::slice::from_ref(c), CheckId::new(), deadline)
                            .await?;
                    }
                }
                Ok(reply)
            }
            Flaw::RenewsTtlOnIncrement => {
                let reply = self.inner.reserve(&counters, id, deadline).await?;
                if reply.applied {
                    for c in counters.iter().filter(|c| !c.lease) {
                        // The stored count, not the answer (as `count`).
                        let stored = self.get_one(&c.key, deadline).await?;
                        self.set(c, stored, deadline).await?;
                    }
                }
                Ok(reply)
            }
            Flaw::RefusedTakesLease | Flaw::RefusedSpendsRate => {
                let reply = self.inner.reserve(&counters, id, deadline).await?;
                if !reply.applied {
                    let lease = self.flaw == Flaw::RefusedTakesLease;
                    let spent: Vec<Counter> = counters
                        .iter()
                        .filter(|c| c.lease == lease)
                        .cloned()
                        .collect();
                    self.inner.count(&spent, CheckId::new(), deadline).await?;
                }
                Ok(reply)
            }
            Flaw::PriorIgnored => {
                let mut reply = self.inner.reserve(&counters, id, deadline).await?;
                reply.counts.extend(ignored(original));
                Ok(reply)
            }
            _ => self.inner.reserve(&counters, id, deadline).await,
        }
    }

    async fn refund(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let _one = self.lock.lock().await;
        let counters = self.counters(counters);
        let id = self.id(id);
        let refund_flaws = [
            Flaw::RefundWraps,
            Flaw::RefundCreates,
            Flaw::RefundRenewsTtl,
        ];
        if !refund_flaws.contains(&self.flaw) {
            return self.inner.refund(&counters, id, deadline).await;
        }
        let mut counts = Vec::new();
        for c in &counters {
            let before = self.get_one(&c.key, deadline).await?;
            let exists = self.inner.expiry(&c.key).is_some();
            let one = std::slice::from_ref(c);
            let after = match self.flaw {
                Flaw::RefundWraps if c.cost > before => {
                    self.set(c, MAX_COUNT, deadline).await?;
                    MAX_COUNT
                }
                Flaw::RefundCreates if !exists => {
                    let probe = Counter {
                        cost: 1,
                        ..c.clone()
                    };
                    self.inner
                        .count(std::slice::from_ref(&probe), CheckId::new(), deadline)
                        .await?;
                    self.inner
                        .refund(std::slice::from_ref(&probe), CheckId::new(), deadline)
                        .await?;
                    0
                }
                Flaw::RefundRenewsTtl if exists => {
                    let after = c.refunded_from(before);
                    self.set(c, after, deadline).await?;
                    after
                }
                _ => self.inner.refund(one, CheckId::new(), deadline).await?[0],
            };
            counts.push(after);
        }
        Ok(counts)
    }

    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        let _one = self.lock.lock().await;
        if self.flaw == Flaw::MergesWindows {
            let keys: Vec<String> = keys.iter().map(|k| merged(k)).collect();
            return self.inner.get(&keys, deadline).await;
        }
        if self.flaw == Flaw::GetReadsZero {
            return Ok(vec![0; keys.len()]);
        }
        self.inner.get(keys, deadline).await
    }

    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        let _one = self.lock.lock().await;
        if self.flaw == Flaw::MergesWindows {
            return self.inner.delete(&merged(key), deadline).await;
        }
        self.inner.delete(key, deadline).await
    }

    async fn end_lease(
        &self,
        key: &str,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let _one = self.lock.lock().await;
        if self.flaw == Flaw::EndsAnyLease && !self.inner.end_lease(key, id, deadline).await? {
            // Ends the first lease held, whoever holds it.
            let first = self.inner.lease_ids(key).first().copied();
            return match first {
                Some(first) => self.inner.end_lease(key, first, deadline).await,
                None => Ok(false),
            };
        }
        self.inner.end_lease(key, id, deadline).await
    }

    async fn renew_lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let _one = self.lock.lock().await;
        if self.flaw == Flaw::RenewNever {
            return Ok(true);
        }
        self.inner.renew_lease(key, id, lifetime, deadline).await
    }

    async fn leases(&self, key: &str, deadline: Deadline) -> Result<Leases, StoreError> {
        let _one = self.lock.lock().await;
        self.inner.leases(key, deadline).await
    }
}

#[async_trait]
impl MarkStore for Flawed {
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let _one = self.lock.lock().await;
        let existed = self.inner.expiry(key).is_some();
        match self.flaw {
            Flaw::ClaimHeldForOwnToken if existed => Ok(Claim::Held),
            Flaw::ClaimOverwrites => {
                self.inner.delete(key, deadline).await?;
                self.inner.claim(key, token, ttl, deadline).await
            }
            Flaw::LeaseNeverEnds => {
                let day = Duration::from_secs(86_400);
                self.inner.claim(key, token, day, deadline).await
            }
            _ => self.inner.claim(key, token, ttl, deadline).await,
        }
    }

    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let _one = self.lock.lock().await;
        let done = self.inner.finish(key, token, ttl, deadline).await?;
        if !done && self.flaw == Flaw::FinishOverwrites {
            self.inner.delete(key, deadline).await?;
            return self.inner.finish(key, token, ttl, deadline).await;
        }
        Ok(done)
    }

    async fn release(
        &self,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let _one = self.lock.lock().await;
        match self.flaw {
            Flaw::ReleaseDeletesOthers => self.inner.delete(key, deadline).await,
            Flaw::ReleaseNever => Ok(false),
            _ => self.inner.release(key, token, deadline).await,
        }
    }
}
