//! [`Table`]: the cache's counters by the parts of their keys, bounded,
//! the oldest evicted first.
//!
//! A counter is known by `limit:<key>:` and its window index, so that a
//! check is looked up without building its keys. The parts name a counter
//! as its key does: `limit:<key>:` ends at the key's last `:`, which no
//! index holds, so two keys are the same exactly when their parts are.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// Values by counter, at most a given number, evicted in the order they
/// were first inserted.
#[derive(Debug)]
pub(crate) struct Table<V> {
    entries: HashTable<Entry<V>>,
    /// `(hash, serial)` of the entries in the order they were first
    /// inserted (some may have been removed since; they are skipped, and
    /// compacted away in time).
    order: VecDeque<(u64, u64)>,
    /// The serial of the next entry.
    serial: u64,
    /// Hashes a counter's parts: foldhash, seeded at random per table (the
    /// memory store hashes its keys alike). Keys come from callers; a seed
    /// they cannot see keeps them from aiming at one bucket, and the table
    /// never holds more than its capacity.
    hasher: DefaultHashBuilder,
}

#[derive(Debug)]
struct Entry<V> {
    /// The hash of `(stored, index)`, kept so the table grows without
    /// hashing again.
    hash: u64,
    /// The counter key without its window index, `limit:<key>:`.
    stored: Box<str>,
    /// The window index.
    index: u64,
    /// Its place in `order`.
    serial: u64,
    value: V,
}

impl<V> Entry<V> {
    /// Whether this is the entry of counter `(stored, index)`, whose hash is `hash`.
    fn is(&self, hash: u64, stored: &str, index: u64) -> bool {
        self.hash == hash && self.index == index && *self.stored == *stored
    }
}

impl<V> Default for Table<V> {
    fn default() -> Table<V> {
        Table {
            entries: HashTable::new(),
            order: VecDeque::new(),
            serial: 0,
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl<V> Table<V> {
    /// How many counters the table holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    fn hash(&self, stored: &str, index: u64) -> u64 {
        self.hasher.hash_one((stored, index))
    }

    /// The value of counter `(stored, index)`, if held.
    #[inline]
    pub(crate) fn get(&self, stored: &str, index: u64) -> Option<&V> {
        let hash = self.hash(stored, index);
        let entry = self.entries.find(hash, |e| e.is(hash, stored, index));
        entry.map(|e| &e.value)
    }

    /// The value of counter `(stored, index)`, if held, to change.
    pub(crate) fn get_mut(&mut self, stored: &str, index: u64) -> Option<&mut V> {
        let hash = self.hash(stored, index);
        let entry = self.entries.find_mut(hash, |e| e.is(hash, stored, index));
        entry.map(|e| &mut e.value)
    }

    /// Inserts counter `(stored, index)`, not held yet, evicting the oldest
    /// first while `capacity` are held.
    pub(crate) fn insert(&mut self, capacity: usize, stored: &str, index: u64, value: V) {
        while self.entries.len() >= capacity {
            let Some((hash, serial)) = self.order.pop_front() else {
                break;
            };
            if let Ok(oldest) = self.entries.find_entry(hash, |e| e.serial == serial) {
                oldest.remove();
            }
        }
        self.compact(capacity);
        let hash = self.hash(stored, index);
        let serial = self.serial;
        self.serial += 1;
        let entry = Entry {
            hash,
            stored: stored.into(),
            index,
            serial,
            value,
        };
        self.entries.insert_unique(hash, entry, |e| e.hash);
        self.order.push_back((hash, serial));
    }

    /// Removes counter `(stored, index)`; whether it was held.
    pub(crate) fn remove(&mut self, stored: &str, index: u64) -> bool {
        let hash = self.hash(stored, index);
        match self.entries.find_entry(hash, |e| e.is(hash, stored, index)) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Removed entries linger in `order`; drops them now and then
    /// (amortised: at most once per `capacity` insertions), so that `order`
    /// stays within twice the capacity.
    fn compact(&mut self, capacity: usize) {
        if self.order.len() >= 2 * capacity {
            let entries = &self.entries;
            self.order
                .retain(|&(hash, serial)| entries.find(hash, |e| e.serial == serial).is_some());
        }
    }

    /// How many places `order` holds, removed entries included.
    #[cfg(test)]
    pub(crate) fn order_len(&self) -> usize {
        self.order.len()
    }
}
