#![doc = include_str!("../README.md")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tollgate_core::{
    Clock, Counter, CounterStore, Expiry, Reservation, StoreError, SystemClock, async_trait,
};

/// An in-memory [`CounterStore`] for tests. Clones share one map, like
/// several clients of one server.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    clock: Arc<dyn Clock>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    value: u64,
    /// When the entry expires, as time since the epoch on the store's clock.
    expires_at: Duration,
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

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock cannot leave an entry half-written
        // (entries are plain values), so a poisoned map is still consistent.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The live value of `key`, dropping it when it has expired.
fn live(map: &mut HashMap<String, Entry>, key: &str, now: Duration) -> Option<Entry> {
    match map.get(key) {
        Some(entry) if entry.expires_at > now => Some(*entry),
        Some(_) => {
            map.remove(key);
            None
        }
        None => None,
    }
}

fn bump(map: &mut HashMap<String, Entry>, counter: &Counter, now: Duration) -> u64 {
    let expires_at = now.saturating_add(counter.ttl);
    match map.get_mut(&counter.key) {
        Some(entry) => {
            let value = if entry.expires_at > now {
                entry.value.saturating_add(1)
            } else {
                1
            };
            *entry = Entry { value, expires_at };
            value
        }
        None => {
            map.insert(
                counter.key.clone(),
                Entry {
                    value: 1,
                    expires_at,
                },
            );
            1
        }
    }
}

#[async_trait]
impl CounterStore for MemoryStore {
    async fn increment(&self, counters: &[Counter]) -> Result<Vec<u64>, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(counters.iter().map(|c| bump(&mut map, c, now)).collect())
    }

    async fn increment_within(&self, counters: &[Counter]) -> Result<Reservation, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        let counts: Vec<u64> = counters
            .iter()
            .map(|c| live(&mut map, &c.key, now).map_or(0, |e| e.value))
            .collect();
        let fits = counters.iter().zip(&counts).all(|(c, &n)| n < c.max);
        if !fits {
            return Ok(Reservation {
                applied: false,
                counts,
            });
        }
        let counts = counters.iter().map(|c| bump(&mut map, c, now)).collect();
        Ok(Reservation {
            applied: true,
            counts,
        })
    }

    async fn get(&self, keys: &[String]) -> Result<Vec<u64>, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(keys
            .iter()
            .map(|k| live(&mut map, k, now).map_or(0, |e| e.value))
            .collect())
    }

    async fn set_if_absent(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        if live(&mut map, key, now).is_some() {
            return Ok(false);
        }
        let expires_at = now.saturating_add(ttl);
        map.insert(
            key.to_owned(),
            Entry {
                value: 1,
                expires_at,
            },
        );
        Ok(true)
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        let existed = live(&mut map, key, now).is_some();
        map.remove(key);
        Ok(existed)
    }

    async fn expiry(&self, key: &str) -> Result<Expiry, StoreError> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(match live(&mut map, key, now) {
            Some(entry) => Expiry::In(entry.expires_at.saturating_sub(now)),
            None => Expiry::Absent,
        })
    }
}
