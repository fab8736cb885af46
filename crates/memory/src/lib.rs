#![doc = include_str!("../README.md")]

mod map;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use map::Map;
use tollgate_core::{
    Claim, Clock, Counter, CounterStore, Deadline, MARK_DONE, MarkStore, Named, Reservation,
    StoreError, SystemClock, async_trait,
};

/// An in-memory [`CounterStore`] and [`MarkStore`] for tests. Clones share
/// one map, like several clients of one server.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    entries: Arc<Mutex<Map<Entry>>>,
    clock: Arc<dyn Clock>,
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
            entries: Arc::default(),
            clock: Arc::new(clock),
        }
    }

    /// How many live (unexpired) keys the store holds.
    pub fn len(&self) -> usize {
        let now = self.clock.now();
        self.lock().values().filter(|e| e.expires_at > now).count()
    }

    /// Whether the store holds no live key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The remaining lifetime of `key`, `None` when absent or expired: for
    /// tests that check lifetimes (not part of the store contract).
    pub fn expiry(&self, key: &str) -> Option<Duration> {
        let now = self.clock.now();
        live(&mut self.lock(), key, now).map(|e| e.expires_at.saturating_sub(now))
    }

    fn lock(&self) -> MutexGuard<'_, Map<Entry>> {
        // A panic while holding the lock cannot leave an entry half-written
        // (entries are plain values), so a poisoned map is still consistent.
        self.entries
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

/// Adds a counter's cost: a live counter keeps its lifetime, a new one
/// lives `ttl` from now. One hash of the key either way (as [`live_or`],
/// without its second test of the entry: this is the measured path).
fn add(map: &mut Map<Entry>, counter: &Counter, now: Duration) -> u64 {
    let fresh = || Entry {
        value: Value::Count(counter.added_to(0)),
        expires_at: now.saturating_add(counter.ttl),
    };
    let (entry, new) = map.get_or_insert_with(&counter.key, fresh);
    if !new {
        if let Value::Count(n) = &mut entry.value
            && entry.expires_at > now
        {
            *n = counter.added_to(*n);
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
    async fn count(&self, counters: &[Counter], _: Deadline) -> Result<Vec<u64>, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(counters.iter().map(|c| add(&mut map, c, now)).collect())
    }

    async fn reserve(&self, counters: &[Counter], _: Deadline) -> Result<Reservation, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        let counts: Vec<u64> = counters
            .iter()
            .map(|c| count(&mut map, &c.key, now))
            .collect();
        if !counters.iter().zip(&counts).all(|(c, &n)| c.fits(n)) {
            return Ok(Reservation {
                applied: false,
                counts,
            });
        }
        let counts = counters.iter().map(|c| add(&mut map, c, now)).collect();
        Ok(Reservation {
            applied: true,
            counts,
        })
    }

    async fn refund(&self, counters: &[Counter], _: Deadline) -> Result<Vec<u64>, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(counters
            .iter()
            .map(
                |c| match live(&mut map, &c.key, now).map(|e| &mut e.value) {
                    Some(Value::Count(n)) => {
                        *n = c.refunded_from(*n);
                        *n
                    }
                    _ => 0,
                },
            )
            .collect())
    }

    async fn get(&self, keys: &[String], _: Deadline) -> Result<Vec<u64>, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(keys.iter().map(|k| count(&mut map, k, now)).collect())
    }

    async fn delete(&self, key: &str, _: Deadline) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(map.remove(key).is_some_and(|e| e.expires_at > now))
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
        let mut map = self.lock();
        let (entry, made) = live_or(&mut map, key, now, || Entry::mark(token, now, ttl));
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
        let mut map = self.lock();
        let done = || Entry::mark(MARK_DONE, now, ttl);
        let (entry, made) = live_or(&mut map, key, now, done);
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
        let mut map = self.lock();
        match live(&mut map, key, now).map(|e| &e.value) {
            Some(Value::Mark(held)) if &**held == token => {
                map.remove(key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
