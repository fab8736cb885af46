#![doc = include_str!("../README.md")]

mod leases;
mod map;
mod records;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use map::Map;
use records::Records;
use tollgate_core::{
    CheckId, Claim, Clock, Counter, CounterStore, Deadline, Leases, MARK_DONE, MarkStore, Named,
    Reservation, StoreError, SystemClock, async_trait,
};

/// An in-memory [`CounterStore`] and [`MarkStore`] for tests. Clones share
/// one map, like several clients of one server.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

/// The keys, and what recent calls applied.
#[derive(Debug, Default)]
struct State {
    map: Map<Entry>,
    records: Records,
}

#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    /// When the entry expires, as time since the epoch on the store's clock.
    expires_at: Duration,
}

#[derive(Clone, Debug)]
enum Value {
    Count(u64),
    Mark(Box<str>),
    /// A concurrency limit's leases.
    Leases(leases::Set),
}

impl Entry {
    fn mark(value: &str, now: Duration, ttl: Duration) -> Entry {
        Entry {
            value: Value::Mark(value.into()),
            expires_at: now.saturating_add(ttl),
        }
    }
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store expiring counters by the system clock.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(SystemClock)
    }

    /// An empty store expiring counters by `clock` (e.g. a `ManualClock`).
    pub fn with_clock(clock: impl Clock) -> MemoryStore {
        MemoryStore {
            state: Arc::default(),
            clock: Arc::new(clock),
        }
    }

    /// How many live (unexpired) keys the store holds.
    pub fn len(&self) -> usize {
        let now = self.clock.now();
        self.lock()
            .map
            .values()
            .filter(|e| e.expires_at > now)
            .count()
    }

    /// Whether the store holds no live key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The remaining lifetime of `key`, `None` when absent or expired: for
    /// tests that check lifetimes (not part of the store contract).
    pub fn expiry(&self, key: &str) -> Option<Duration> {
        let now = self.clock.now();
        live(&mut self.lock().map, key, now).map(|e| e.expires_at.saturating_sub(now))
    }

    /// The ids of the leases held in the set at `key`, in the order they
    /// were taken: for tests (not part of the store contract).
    pub fn lease_ids(&self, key: &str) -> Vec<CheckId> {
        let now = self.clock.now();
        leases::ids(&mut self.lock().map, key, now)
    }

    /// How many calls the store remembers by [`CheckId`], so that a retry
    /// of one is not applied twice (expired ones not yet dropped included):
    /// for tests (not part of the store contract).
    pub fn recorded_calls(&self) -> usize {
        self.lock().records.len()
    }

    /// Runs `apply` on the map unless the call `id` was applied before:
    /// then answers what it applied, and records what `apply` gives.
    fn once(
        &self,
        id: CheckId,
        deadline: Deadline,
        apply: impl FnOnce(&mut Map<Entry>, Duration) -> Reservation,
    ) -> Reservation {
        let now = self.clock.now();
        let mut state = self.lock();
        if let Some(reply) = state.records.get(id, now) {
            return reply;
        }
        let reply = apply(&mut state.map, now);
        state.records.put(id, &reply, now, deadline);
        reply
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave an entry half-written
        // (entries are plain values), so a poisoned map is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The live entry of `key`, if any (an expired one stays until overwritten
/// or removed, and is never read).
fn live<'a>(map: &'a mut Map<Entry>, key: &str, now: Duration) -> Option<&'a mut Entry> {
    map.get_mut(key).filter(|e| e.expires_at > now)
}

/// The live count of `key`; 0 when absent (or a mark, which no counter shares a key with).
fn count(map: &mut Map<Entry>, key: &str, now: Duration) -> u64 {
    match live(map, key, now).map(|e| &e.value) {
        Some(Value::Count(n)) => *n,
        _ => 0,
    }
}

/// The live entry of `key`, or else `fresh()` put in its place (of an
/// absent or expired one); and whether it was put there. One hash of the
/// key either way.
fn live_or<'a>(
    map: &'a mut Map<Entry>,
    key: &str,
    now: Duration,
    fresh: impl Fn() -> Entry,
) -> (&'a mut Entry, bool) {
    let (entry, new) = map.get_or_insert_with(key, &fresh);
    if !new && entry.expires_at <= now {
        *entry = fresh();
        return (entry, true);
    }
    (entry, new)
}

/// What each lease counter's set held, in order, its expired leases
/// removed.
fn found(map: &mut Map<Entry>, counters: &[Counter], now: Duration) -> Vec<leases::Found> {
    counters
        .iter()
        .filter(|c| c.lease)
        .map(|c| leases::held(map, &c.key, now))
        .collect()
}

/// Per lease counter, in order: ms until its first lease ends, and the
/// expired leases the call removed.
fn tail(
    map: &mut Map<Entry>,
    counters: &[Counter],
    found: &[leases::Found],
    now: Duration,
) -> Vec<u64> {
    counters
        .iter()
        .filter(|c| c.lease)
        .zip(found)
        .flat_map(|(c, found)| {
            let first = leases::first_ends(map, &c.key, now);
            let ms = u64::try_from(first.as_millis()).unwrap_or(u64::MAX);
            [ms, found.reclaimed]
        })
        .collect()
}

/// Adds a counter's cost, or takes a lease counter's lease `id`.
fn add_or_take(map: &mut Map<Entry>, counter: &Counter, id: CheckId, now: Duration) -> u64 {
    if counter.lease {
        leases::take(map, &counter.key, id, counter.ttl, now)
    } else {
        add(map, counter, now)
    }
}

/// The live count of each counter's prior, in order.
fn priors(map: &mut Map<Entry>, counters: &[Counter], now: Duration) -> Vec<u64> {
    counters
        .iter()
        .filter_map(|c| c.prior.as_ref())
        .map(|prior| count(map, &prior.key, now))
        .collect()
}

/// Adds a counter's cost: a live counter keeps its lifetime (one with a
/// floor gets [`Counter::lifetime_at`] afresh), a new one lives `ttl` (or
/// that) from now. One hash of
/// the key either way (as [`live_or`], without its second test of the
/// entry: this is the measured path).
fn add(map: &mut Map<Entry>, counter: &Counter, now: Duration) -> u64 {
    let fresh = || {
        let count = counter.added_to(0);
        let life = if counter.floor > 0 {
            counter.lifetime_at(count)
        } else {
            counter.ttl
        };
        Entry {
            value: Value::Count(count),
            expires_at: now.saturating_add(life),
        }
    };
    let (entry, new) = map.get_or_insert_with(&counter.key, fresh);
    if !new {
        if let Value::Count(n) = &mut entry.value
            && entry.expires_at > now
        {
            *n = counter.added_to(*n);
            if counter.floor > 0 {
                entry.expires_at = now.saturating_add(counter.lifetime_at(*n));
            }
            return *n;
        }
        *entry = fresh();
    }
    counter.added_to(0)
}

impl Named for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }
}

#[async_trait]
impl CounterStore for MemoryStore {
    async fn count(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let reply = self.once(id, deadline, |map, now| {
            let priors = priors(map, counters, now);
            let found = found(map, counters, now);
            let mut counts: Vec<u64> = counters
                .iter()
                .map(|c| add_or_take(map, c, id, now))
                .collect();
            counts.extend(priors);
            counts.extend(tail(map, counters, &found, now));
            Reservation {
                applied: true,
                counts,
            }
        });
        Ok(reply.counts)
    }

    async fn reserve(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        Ok(self.once(id, deadline, |map, now| {
            let priors = priors(map, counters, now);
            let found = found(map, counters, now);
            let mut held = found.iter();
            let mut counts: Vec<u64> = counters
                .iter()
                .map(|c| match c.lease {
                    true => held.next().map_or(0, |f| f.held),
                    false => count(map, &c.key, now),
                })
                .collect();
            let mut prior = priors.iter();
            // A set holding this call's lease already fits it.
            let fits = counters.iter().zip(&counts).all(|(c, &n)| match c.prior {
                Some(_) => c.fits_after(n, prior.next().copied().unwrap_or(0)),
                None => c.fits(n) || (c.lease && leases::ids(map, &c.key, now).contains(&id)),
            });
            if fits {
                counts = counters
                    .iter()
                    .map(|c| add_or_take(map, c, id, now))
                    .collect();
            }
            counts.extend(priors);
            counts.extend(tail(map, counters, &found, now));
            Reservation {
                applied: fits,
                counts,
            }
        }))
    }

    async fn refund(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let reply = self.once(id, deadline, |map, now| Reservation {
            applied: true,
            counts: counters
                .iter()
                .map(|c| match live(map, &c.key, now).map(|e| &mut e.value) {
                    _ if c.lease => leases::status(map, &c.key, now).held,
                    Some(Value::Count(n)) => {
                        *n = c.refunded_from(*n);
                        *n
                    }
                    _ => 0,
                })
                .collect(),
        });
        Ok(reply.counts)
    }

    async fn get(&self, keys: &[String], _: Deadline) -> Result<Vec<u64>, StoreError> {
        let now = self.clock.now();
        let map = &mut self.lock().map;
        Ok(keys.iter().map(|k| count(map, k, now)).collect())
    }

    async fn delete(&self, key: &str, _: Deadline) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let map = &mut self.lock().map;
        Ok(map.remove(key).is_some_and(|e| e.expires_at > now))
    }

    async fn end_lease(&self, key: &str, id: CheckId, _: Deadline) -> Result<bool, StoreError> {
        let now = self.clock.now();
        Ok(leases::end(&mut self.lock().map, key, id, now))
    }

    async fn renew_lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Duration,
        _: Deadline,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now();
        Ok(leases::renew(&mut self.lock().map, key, id, lifetime, now))
    }

    async fn leases(&self, key: &str, _: Deadline) -> Result<Leases, StoreError> {
        let now = self.clock.now();
        Ok(leases::status(&mut self.lock().map, key, now))
    }
}

#[async_trait]
impl MarkStore for MemoryStore {
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        _: Deadline,
    ) -> Result<Claim, StoreError> {
        let now = self.clock.now();
        let map = &mut self.lock().map;
        let (entry, made) = live_or(map, key, now, || Entry::mark(token, now, ttl));
        let ours = made || matches!(&entry.value, Value::Mark(held) if &**held == token);
        Ok(if ours { Claim::Acquired } else { Claim::Held })
    }

    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        _: Deadline,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let map = &mut self.lock().map;
        let done = || Entry::mark(MARK_DONE, now, ttl);
        let (entry, made) = live_or(map, key, now, done);
        if !made {
            let held = |mark: &str| mark == token || mark == MARK_DONE;
            if !matches!(&entry.value, Value::Mark(mark) if held(mark)) {
                return Ok(false);
            }
            *entry = done();
        }
        Ok(true)
    }

    async fn release(&self, key: &str, token: &str, _: Deadline) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let map = &mut self.lock().map;
        match live(map, key, now).map(|e| &e.value) {
            Some(Value::Mark(held)) if &**held == token => {
                map.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
