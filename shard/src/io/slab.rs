//! A slab of cancel connections with generations, so a stale completion (for a slot that
//! was closed and reused) can be recognised and dropped. (Client and server ids are the
//! engine's; this slab is for the one-shot connections only the driver knows.)
//!
//! Capacity is fixed at construction (a configured limit), so the slab never reallocates; the
//! kernel still never points into slab entries: buffers it reads or writes live on the heap.

use crate::io::op_key::GENERATION_MASK;

/// Index plus generation of a slot; the typed ids below wrap it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotRef {
    pub index: u32,
    pub generation: u32,
}

macro_rules! slot_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub SlotRef);
        impl From<SlotRef> for $name {
            fn from(slot: SlotRef) -> Self {
                $name(slot)
            }
        }
        impl From<$name> for SlotRef {
            fn from(id: $name) -> SlotRef {
                id.0
            }
        }
    };
}

slot_id!(
    /// A one-shot cancel-request connection.
    CancelConnId
);

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// Fixed-capacity generational slab.
pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    capacity: usize,
    len: usize,
}

impl<T> Slab<T> {
    pub fn with_capacity(capacity: usize) -> Slab<T> {
        Slab {
            entries: Vec::with_capacity(capacity),
            free: Vec::new(),
            capacity,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `None` when the slab is at its configured capacity.
    pub fn insert(&mut self, value: T) -> Option<SlotRef> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.entries.len() < self.capacity => {
                self.entries.push(Entry {
                    generation: 0,
                    value: None,
                });
                (self.entries.len() - 1) as u32
            }
            None => return None,
        };
        let entry = &mut self.entries[index as usize];
        debug_assert!(entry.value.is_none());
        entry.value = Some(value);
        self.len += 1;
        Some(SlotRef {
            index,
            generation: entry.generation,
        })
    }

    /// The live value for `slot`, or `None` if the slot was freed (and maybe reused) since.
    pub fn get(&self, slot: SlotRef) -> Option<&T> {
        let entry = self.entries.get(slot.index as usize)?;
        if entry.generation != slot.generation & GENERATION_MASK {
            return None;
        }
        entry.value.as_ref()
    }

    pub fn get_mut(&mut self, slot: SlotRef) -> Option<&mut T> {
        let entry = self.entries.get_mut(slot.index as usize)?;
        if entry.generation != slot.generation & GENERATION_MASK {
            return None;
        }
        entry.value.as_mut()
    }

    /// Frees the slot and bumps its generation so older keys no longer resolve.
    pub fn remove(&mut self, slot: SlotRef) -> Option<T> {
        let entry = self.entries.get_mut(slot.index as usize)?;
        if entry.generation != slot.generation & GENERATION_MASK {
            return None;
        }
        let value = entry.value.take()?;
        entry.generation = (entry.generation + 1) & GENERATION_MASK;
        self.free.push(slot.index);
        self.len -= 1;
        Some(value)
    }

    /// Live slots, for periodic sweeps (timeouts, shutdown).
    pub fn slots(&self) -> impl Iterator<Item = (SlotRef, &T)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, entry)| {
                entry.value.as_ref().map(|value| {
                    (
                        SlotRef {
                            index: index as u32,
                            generation: entry.generation,
                        },
                        value,
                    )
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_reference_does_not_resolve_after_reuse() {
        let mut slab = Slab::with_capacity(1);
        let first = slab.insert("a").expect("room");
        assert_eq!(slab.remove(first), Some("a"));
        let second = slab.insert("b").expect("room");
        assert_eq!(first.index, second.index);
        assert_eq!(slab.get(first), None);
        assert_eq!(slab.get(second), Some(&"b"));
        assert_eq!(slab.remove(first), None);
    }

    #[test]
    fn capacity_is_a_hard_limit() {
        let mut slab = Slab::with_capacity(2);
        assert!(slab.insert(1).is_some());
        assert!(slab.insert(2).is_some());
        assert!(slab.insert(3).is_none());
        assert_eq!(slab.len(), 2);
    }
}
