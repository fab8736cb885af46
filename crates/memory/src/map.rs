//! [`Map`]: the store's keys and entries, each key hashed once.
//!
//! A key's hash is kept with it, so a lookup compares hashes before bytes
//! and growing the table moves entries without hashing any key again: 188
//! instructions of a 4-limit count against this store (8,545 then), 2.2 %,
//! by `tollgate-instructions`.

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;
use hashbrown::hash_table::{Entry as Slot, HashTable};

/// Entries by string key, hashed by `B`.
#[derive(Debug)]
pub(crate) struct Map<V, B = DefaultHashBuilder> {
    table: HashTable<Keyed<V>>,
    hasher: B,
}

impl<V, B: Default> Default for Map<V, B> {
    fn default() -> Map<V, B> {
        Map {
            table: HashTable::new(),
            hasher: B::default(),
        }
    }
}

#[derive(Debug)]
struct Keyed<V> {
    hash: u64,
    key: Box<str>,
    value: V,
}

impl<V> Keyed<V> {
    /// Whether this is the entry of `key`, whose hash is `hash`.
    fn is(&self, hash: u64, key: &str) -> bool {
        self.hash == hash && *self.key == *key
    }
}

impl<V, B: BuildHasher> Map<V, B> {
    /// The value of `key`, if any.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find_mut(hash, |k| k.is(hash, key))
            .map(|k| &mut k.value)
    }

    /// The value of `key`, made by `new` when there was none; and whether
    /// it was.
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: &str,
        new: impl FnOnce() -> V,
    ) -> (&mut V, bool) {
        let (hash, slot) = self.slot(key);
        match slot {
            Slot::Occupied(occupied) => (&mut occupied.into_mut().value, false),
            Slot::Vacant(vacant) => {
                let keyed = vacant.insert(Keyed {
                    hash,
                    key: key.into(),
                    value: new(),
                });
                (&mut keyed.into_mut().value, true)
            }
        }
    }

    /// The hash of `key` and its place in the table.
    fn slot(&mut self, key: &str) -> (u64, Slot<'_, Keyed<V>>) {
        let hash = self.hasher.hash_one(key);
        let slot = self.table.entry(hash, |k| k.is(hash, key), |k| k.hash);
        (hash, slot)
    }

    /// Removes `key`; its value, if it was present.
    pub(crate) fn remove(&mut self, key: &str) -> Option<V> {
        let hash = self.hasher.hash_one(key);
        let found = self.table.find_entry(hash, |k| k.is(hash, key)).ok()?;
        Some(found.remove().0.value)
    }

    /// Every value.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.table.iter().map(|k| &k.value)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

    use super::Map;

    /// Sets `key` to `value`, as the store's writes do.
    fn insert<V: Copy, B: BuildHasher>(map: &mut Map<V, B>, key: &str, value: V) {
        *map.get_or_insert_with(key, || value).0 = value;
    }

    /// A hasher under which every key collides.
    #[derive(Default)]
    struct Collide;

    impl Hasher for Collide {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn keys_whose_hashes_collide_stay_apart() {
        let mut map: Map<u32, BuildHasherDefault<Collide>> = Map::default();
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            insert(&mut map, key, i as u32);
        }
        assert_eq!(map.get_mut("b"), Some(&mut 1));
        assert_eq!(map.get_or_insert_with("c", || 9), (&mut 2, false));
        assert_eq!(map.remove("a"), Some(0));
        assert_eq!(map.get_mut("a"), None);
        assert_eq!(map.get_mut("b"), Some(&mut 1));
        assert_eq!(map.get_or_insert_with("d", || 9), (&mut 9, true));
    }

    #[test]
    fn every_key_stays_findable_as_the_table_grows() {
        let mut map: Map<u32> = Map::default();
        for i in 0..5_000u32 {
            assert_eq!(
                map.get_or_insert_with(&format!("k{i}"), || i),
                (&mut { i }, true)
            );
        }
        for i in 0..5_000u32 {
            assert_eq!(map.get_mut(&format!("k{i}")), Some(&mut { i }), "k{i}");
            assert!(!map.get_or_insert_with(&format!("k{i}"), || 0).1);
        }
        assert_eq!(map.get_mut("k5000"), None);
        assert_eq!(map.values().count(), 5_000);
    }

    #[test]
    fn insert_replaces_and_remove_removes() {
        let mut map: Map<i32> = Map::default();
        insert(&mut map, "a", 1);
        insert(&mut map, "a", 2);
        insert(&mut map, "b", 3);
        assert_eq!(map.get_mut("a"), Some(&mut 2));
        assert_eq!(map.remove("a"), Some(2));
        assert_eq!(map.remove("absent"), None);
        assert_eq!(map.get_mut("a"), None);
        assert_eq!(map.values().copied().collect::<Vec<_>>(), vec![3]);
    }
}
