//! The aggregator's row index: where in the window's rows each distinct sample is.
//!
//! A `HashMap<Sample, u32>` would hold every sample a second time, beside the row that holds
//! it already: 80 bytes a bucket (`size_of::<(Sample, u32)>()`), so about 5 MB for a busy 60 s
//! window of 48,000 rows (computed: 65,536 buckets of 81 bytes; nearly every sample of a traced
//! service names a span of its own), kept from one window to the next so that the
//! sampling path does not allocate once warm. This index holds only row numbers, in an
//! open-addressing table with linear probing, at most half full: 4 bytes a slot, so 8 to 16
//! bytes a row. Keys are hashed and compared through the rows themselves.

use std::hash::{BuildHasher, Hash};

use crate::mixhash::MixBuild;

/// A free slot.
const EMPTY: u32 = u32::MAX;
/// Slots of the first table: a quiet window never grows it.
const MIN_SLOTS: usize = 1024;

/// Row numbers of `entries[..]` by key, where `entries` is a slice of `(key, value)` rows that
/// only grows between [`RowIndex::clear`]s.
#[derive(Debug, Default)]
pub(crate) struct RowIndex {
    /// Row numbers, [`EMPTY`] where free; the length is a power of two, at least twice `len`.
    slots: Vec<u32>,
    len: usize,
}

impl RowIndex {
    /// The slot `key` probes from. The table must have slots: `get` checks, and `place` runs
    /// only after `grow`.
    #[inline]
    fn home<K: Hash>(&self, key: &K) -> usize {
        MixBuild::default().hash_one(key) as usize & (self.slots.len() - 1)
    }

    /// Rows indexed.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The row of `key` among `entries`, if it was inserted.
    #[inline]
    pub(crate) fn get<K: Hash + Eq, V>(&self, entries: &[(K, V)], key: &K) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        // Ends: at most half the slots are taken, so an empty one is always reached.
        loop {
            let row = self.slots[i];
            if row == EMPTY {
                return None;
            }
            if entries.get(row as usize).is_some_and(|(k, _)| k == key) {
                return Some(row);
            }
            i = (i + 1) & mask;
        }
    }

    /// Indexes `entries[row]`, which the caller has just pushed (rows are inserted in order,
    /// each once). Grows the table, the only allocation, when it would pass half full.
    pub(crate) fn insert<K: Hash, V>(&mut self, entries: &[(K, V)], row: u32) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow(entries);
        }
        if let Some((key, _)) = entries.get(row as usize) {
            self.place(key, row);
            self.len += 1;
        }
    }

    fn place<K: Hash>(&mut self, key: &K, row: u32) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = row;
    }

    /// Doubles the table and places the rows indexed so far again.
    fn grow<K: Hash, V>(&mut self, entries: &[(K, V)]) {
        let slots = (self.slots.len() * 2).max(MIN_SLOTS);
        self.slots = vec![EMPTY; slots];
        for (row, (key, _)) in entries.iter().enumerate().take(self.len) {
            self.place(key, row as u32);
        }
    }

    /// Forgets every row and keeps the table's size, for the next window.
    pub(crate) fn clear(&mut self) {
        self.slots.fill(EMPTY);
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(index: &mut RowIndex, rows: &mut Vec<(u64, ())>, key: u64) -> u32 {
        let row = rows.len() as u32;
        rows.push((key, ()));
        index.insert(rows, row);
        row
    }

    #[test]
    fn every_key_finds_its_own_row_and_absent_keys_find_none() {
        let (mut index, mut rows) = (RowIndex::default(), Vec::new());
        // Keys a regular stride apart, as interned ids are, across several growths.
        let keys: Vec<u64> = (0..10_000u64).map(|k| k * 4096).collect();
        for &k in &keys {
            push(&mut index, &mut rows, k);
        }
        assert_eq!(index.len(), keys.len());
        for (row, k) in keys.iter().enumerate() {
            assert_eq!(index.get(&rows, k), Some(row as u32));
        }
        assert_eq!(index.get(&rows, &1), None);
        assert_eq!(index.get(&rows, &(10_000 * 4096)), None);
    }

    #[test]
    fn the_table_stays_at_most_half_full_at_four_bytes_a_slot() {
        let (mut index, mut rows) = (RowIndex::default(), Vec::new());
        for k in 0..48_000u64 {
            push(&mut index, &mut rows, k);
        }
        let slots = index.slots.len();
        assert!(
            slots >= 2 * 48_000 && slots.is_power_of_two(),
            "{slots} slots"
        );
        assert!(
            slots * std::mem::size_of::<u32>() <= 512 * 1024,
            "{slots} slots"
        );
    }

    #[test]
    fn clear_forgets_the_rows_and_keeps_the_table_for_the_next_window() {
        let (mut index, mut rows) = (RowIndex::default(), Vec::new());
        for k in 0..5_000u64 {
            push(&mut index, &mut rows, k);
        }
        let slots = index.slots.len();
        index.clear();
        rows.clear();
        assert_eq!((index.len(), index.get(&rows, &7)), (0, None));
        // The next window refills the same table: no growth, so no allocation.
        for k in 100..5_100u64 {
            push(&mut index, &mut rows, k);
        }
        assert_eq!(index.slots.len(), slots);
        assert_eq!(index.get(&rows, &100), Some(0));
    }
}
