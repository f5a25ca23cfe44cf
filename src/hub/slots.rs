//! The slot table: an engine's connections by index, each index with a
//! generation, so that a key naming a connection that is gone (a late
//! wake-up, a stale timer entry, an old id from a handle) never reaches
//! the connection that took its place. The generation is checked here,
//! once, and nowhere else.

use std::collections::VecDeque;

/// A connection's place in its engine: its slot, and which use of the
/// slot (a slot is reused once its connection is gone; a late wake-up for
/// the old one must not serve the new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

/// Values by [`Key`], with a bounded number of indices and of uses per
/// index.
#[derive(Debug)]
pub(crate) struct Slots<T> {
    entries: Vec<Entry<T>>,
    /// Free indices, oldest first: reuse goes round them all, so that no
    /// index's generation runs far ahead of the others'.
    free: VecDeque<u32>,
    /// Indices in use.
    len: usize,
    /// Indices a key may name: past them, inserting is refused.
    max_len: usize,
    /// The last generation of an index: after it, the index is retired.
    last_generation: u32,
}

#[derive(Debug)]
struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

impl<T> Slots<T> {
    /// A table of at most `max_len` indices, each used for generations
    /// `0..=last_generation`.
    pub(crate) fn new(max_len: usize, last_generation: u32) -> Self {
        Slots {
            entries: Vec::new(),
            free: VecDeque::new(),
            len: 0,
            max_len,
            last_generation,
        }
    }

    /// Values in the table.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Inserts what `make` makes with the key it will have; `None` if
    /// every index is taken (or retired), or `make` gave up (the index is
    /// then the first to be used next).
    pub(crate) fn insert_with(
        &mut self,
        make: impl FnOnce(Key) -> Option<T>,
    ) -> Option<(Key, &mut T)> {
        let index = match self.free.pop_front() {
            Some(index) => index,
            None if self.entries.len() >= self.max_len => return None,
            None => {
                self.entries.push(Entry {
                    generation: 0,
                    value: None,
                });
                (self.entries.len() - 1) as u32
            }
        };
        let entry = &mut self.entries[index as usize];
        let key = Key {
            slot: index,
            generation: entry.generation,
        };
        match make(key) {
            Some(value) => {
                self.len += 1;
                Some((key, entry.value.insert(value)))
            }
            None => {
                self.free.push_front(index);
                None
            }
        }
    }

    /// The value `key` names, if it is still there.
    #[inline]
    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        match self.entries.get(key.slot as usize) {
            Some(Entry {
                generation,
                value: Some(value),
            }) if *generation == key.generation => Some(value),
            _ => None,
        }
    }

    /// The value `key` names, if it is still there, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.entries.get_mut(key.slot as usize) {
            Some(Entry {
                generation,
                value: Some(value),
            }) if *generation == key.generation => Some(value),
            _ => None,
        }
    }

    /// The value at `index` whatever its generation, with its key: for
    /// what names an index alone (a poller's token, the turn's list of
    /// connections to write).
    #[inline]
    pub(crate) fn at_mut(&mut self, index: u32) -> Option<(Key, &mut T)> {
        match self.entries.get_mut(index as usize) {
            Some(Entry {
                generation,
                value: Some(value),
            }) => Some((
                Key {
                    slot: index,
                    generation: *generation,
                },
                value,
            )),
            _ => None,
        }
    }

    /// Takes the value `key` names out. Its index is free again under the
    /// next generation, or retired for good after the last: a key must
    /// never name a later value.
    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let entry = self.entries.get_mut(key.slot as usize)?;
        if entry.generation != key.generation {
            return None;
        }
        let value = entry.value.take()?;
        if entry.generation < self.last_generation {
            entry.generation += 1;
            self.free.push_back(key.slot);
        }
        self.len -= 1;
        Some(value)
    }

    /// The keys of the values in the table, by index.
    pub(crate) fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.entries.iter().enumerate().filter_map(|(index, e)| {
            e.value.as_ref().map(|_| Key {
                slot: index as u32,
                generation: e.generation,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(slots: &mut Slots<&'static str>, value: &'static str) -> Key {
        slots.insert_with(|_| Some(value)).expect("room").0
    }

    #[test]
    fn a_key_is_stale_once_its_value_is_removed() {
        let mut slots = Slots::new(8, 100);
        let a = insert(&mut slots, "a");
        assert_eq!(slots.get(a), Some(&"a"));
        assert_eq!(slots.remove(a), Some("a"));
        assert_eq!(slots.get(a), None);
        assert_eq!(slots.get_mut(a), None);
        assert_eq!(slots.remove(a), None, "removed once");
        assert_eq!(slots.len(), 0);
    }

    #[test]
    fn a_reused_index_has_a_new_generation() {
        let mut slots = Slots::new(1, 100);
        let old = insert(&mut slots, "old");
        slots.remove(old);
        let new = insert(&mut slots, "new");
        assert_eq!(new.slot, old.slot);
        assert_eq!(new.generation, old.generation + 1);
        assert_eq!(
            slots.get(old),
            None,
            "the old key does not reach the new value"
        );
        assert_eq!(slots.remove(old), None);
        assert_eq!(slots.get(new), Some(&"new"));
        assert_eq!(
            slots.at_mut(new.slot).map(|(k, v)| (k, *v)),
            Some((new, "new"))
        );
    }

    #[test]
    fn free_indices_are_reused_oldest_first() {
        let mut slots = Slots::new(8, 100);
        let keys: Vec<Key> = (0..3).map(|_| insert(&mut slots, "x")).collect();
        slots.remove(keys[2]);
        slots.remove(keys[0]);
        assert_eq!(insert(&mut slots, "y").slot, keys[2].slot);
        assert_eq!(insert(&mut slots, "z").slot, keys[0].slot);
    }

    #[test]
    fn an_index_is_retired_after_its_last_generation() {
        let mut slots = Slots::new(1, 1);
        let first = insert(&mut slots, "a");
        slots.remove(first);
        let last = insert(&mut slots, "b");
        assert_eq!(last.generation, 1);
        slots.remove(last);
        assert!(slots.insert_with(|_| Some("c")).is_none(), "retired");
    }

    #[test]
    fn inserting_stops_at_the_index_limit() {
        let mut slots = Slots::new(2, 100);
        insert(&mut slots, "a");
        insert(&mut slots, "b");
        assert!(slots.insert_with(|_| Some("c")).is_none());
        assert_eq!(slots.len(), 2);
    }

    #[test]
    fn a_value_not_made_leaves_its_index_first_in_line() {
        let mut slots = Slots::new(8, 100);
        let a = insert(&mut slots, "a");
        slots.remove(a);
        let offered = std::cell::Cell::new(None);
        assert!(
            slots
                .insert_with(|key| {
                    offered.set(Some(key));
                    None
                })
                .is_none()
        );
        assert_eq!(slots.len(), 0);
        let b = insert(&mut slots, "b");
        assert_eq!(Some(b), offered.get(), "the same index and generation");
    }

    #[test]
    fn keys_name_every_value_in_index_order() {
        let mut slots = Slots::new(8, 100);
        let keys: Vec<Key> = ["a", "b", "c", "d"]
            .into_iter()
            .map(|v| insert(&mut slots, v))
            .collect();
        slots.remove(keys[1]);
        let e = insert(&mut slots, "e");
        assert_eq!(e.slot, keys[1].slot);
        let listed: Vec<Key> = slots.keys().collect();
        assert_eq!(listed, [keys[0], e, keys[2], keys[3]]);
        let values: Vec<&str> = listed.iter().map(|&k| *slots.get(k).unwrap()).collect();
        assert_eq!(values, ["a", "e", "c", "d"]);
        assert_eq!(slots.len(), 4);
    }
}
