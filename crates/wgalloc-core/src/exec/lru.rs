//! A map that drops its least recently used entry past a capacity: the device's pipeline
//! cache and a shape cache's executors.

use std::collections::HashMap;
use std::hash::Hash;

pub(crate) struct Lru<K, V> {
    map: HashMap<K, (V, u64)>,
    /// Use stamps: larger is more recent.
    tick: u64,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    pub fn new(capacity: usize) -> Self {
        Lru { map: HashMap::new(), tick: 0, capacity }
    }

    /// The value of `key`, now the most recently used.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(v, used)| {
            *used = tick;
            &*v
        })
    }

    /// The entry an insert of a new key would drop now (None below the capacity).
    pub fn victim(&self) -> Option<&V> {
        if self.map.len() < self.capacity {
            return None;
        }
        self.map.values().min_by_key(|(_, used)| *used).map(|(v, _)| v)
    }

    /// Inserts `value` as the most recently used; returns the entry dropped past the capacity.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.tick += 1;
        self.map.insert(key, (value, self.tick));
        if self.map.len() <= self.capacity {
            return None;
        }
        // A scan, only when an entry was made (a compile, far costlier than the scan).
        let oldest = self.map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone())?;
        self.map.remove(&oldest).map(|(v, _)| v)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values().map(|(v, _)| v)
    }

    /// Empties the map, handing out its values.
    pub fn drain(&mut self) -> impl Iterator<Item = V> + '_ {
        self.map.drain().map(|(_, (v, _))| v)
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn the_least_recently_used_entry_goes_past_the_capacity() {
        let mut lru: Lru<u32, u32> = Lru::new(2);
        assert_eq!((lru.insert(1, 10), lru.insert(2, 20)), (None, None));
        assert_eq!(lru.get(&1), Some(&10), "1 is now the most recent");
        assert_eq!(lru.insert(3, 30), Some(20), "2 goes");
        let got = [2, 1, 3].map(|k| lru.get(&k).copied());
        assert_eq!((got, lru.len()), ([None, Some(10), Some(30)], 2));
        let mut left: Vec<u32> = lru.drain().collect();
        left.sort();
        assert_eq!((left, lru.len()), (vec![10, 30], 0));
    }
}
