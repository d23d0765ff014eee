//! Connection ids and the generational slab that hands them out.
//!
//! The engine allocates every id; the driver keeps its own per-connection I/O state in a
//! table indexed by the same slot index and checks the generation, so a completion for a
//! slot that was freed and reused is recognised as stale. Generations are 24 bits: the
//! driver packs them into an io_uring `user_data` beside the slot index and an op kind.

/// Bits of a slot generation that survive a round trip through the driver's op keys.
pub const GENERATION_BITS: u32 = 24;
const GENERATION_MASK: u32 = (1 << GENERATION_BITS) - 1;

/// Index plus generation of a slot; the typed ids wrap it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotRef {
    pub index: u32,
    pub generation: u32,
}

macro_rules! slot_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub SlotRef);

        impl $name {
            /// The slot index (the driver's table position).
            pub fn index(self) -> u32 {
                self.0.index
            }

            /// The slot generation (24 bits).
            pub fn generation(self) -> u32 {
                self.0.generation
            }
        }
    };
}

slot_id!(
    /// A client connection of this engine.
    ClientId
);
slot_id!(
    /// A server connection of this engine.
    ServerId
);

/// The number `SHOW CLIENTS`, `SERVERS` and `SOCKETS` list as `id` and `KILL_CLIENT` takes:
/// unique in the process and never reused, drawn from one counter for clients and servers
/// on every shard (`Shared::next_socket_id`), as PgBouncer numbers its sockets. A slot id
/// is reused and per shard, so it cannot serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SocketId(pub u64);

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// A fixed-capacity generational slab: the configured connection limit is its capacity, so
/// it never grows past it.
pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    capacity: usize,
    len: usize,
}

impl<T> Slab<T> {
    /// A slab that refuses inserts beyond `capacity` live values. Memory grows with use.
    pub fn with_capacity(capacity: usize) -> Slab<T> {
        Slab {
            entries: Vec::new(),
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

    /// Stores `value`; `None` when the slab holds `capacity` values already.
    pub fn insert(&mut self, value: T) -> Option<SlotRef> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.entries.len() < self.capacity => {
                let index = u32::try_from(self.entries.len()).ok()?;
                self.entries.push(Entry {
                    generation: 0,
                    value: None,
                });
                index
            }
            None => return None,
        };
        let entry = &mut self.entries[index as usize];
        debug_assert!(entry.value.is_none(), "a free slot holds a value");
        entry.value = Some(value);
        self.len += 1;
        Some(SlotRef {
            index,
            generation: entry.generation,
        })
    }

    /// The live value of `slot`; `None` if the slot was freed (and maybe reused) since.
    pub fn get(&self, slot: SlotRef) -> Option<&T> {
        let entry = self.entries.get(slot.index as usize)?;
        (entry.generation == slot.generation)
            .then_some(entry.value.as_ref())
            .flatten()
    }

    pub fn get_mut(&mut self, slot: SlotRef) -> Option<&mut T> {
        let entry = self.entries.get_mut(slot.index as usize)?;
        if entry.generation != slot.generation {
            return None;
        }
        entry.value.as_mut()
    }

    /// Frees the slot; its generation moves on so the old id no longer resolves.
    pub fn remove(&mut self, slot: SlotRef) -> Option<T> {
        let entry = self.entries.get_mut(slot.index as usize)?;
        if entry.generation != slot.generation {
            return None;
        }
        let value = entry.value.take()?;
        entry.generation = next_generation(entry.generation);
        self.free.push(slot.index);
        self.len -= 1;
        Some(value)
    }

    /// Every live slot with its value, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (SlotRef, &T)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, entry)| {
                let value = entry.value.as_ref()?;
                let index = u32::try_from(index).ok()?;
                Some((
                    SlotRef {
                        index,
                        generation: entry.generation,
                    },
                    value,
                ))
            })
    }

    /// Every live value, to change in place.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries
            .iter_mut()
            .filter_map(|entry| entry.value.as_mut())
    }

    /// The slots of every live value (a copy, so the caller may mutate while walking it).
    pub fn slots(&self) -> Vec<SlotRef> {
        self.iter().map(|(slot, _)| slot).collect()
    }
}

/// The generation after `generation`, wrapping within `GENERATION_BITS`.
fn next_generation(generation: u32) -> u32 {
    (generation + 1) & GENERATION_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_slot_is_reused_with_a_new_generation() {
        let mut slab = Slab::with_capacity(2);
        let first = slab.insert("a").expect("room");
        assert_eq!(slab.remove(first), Some("a"));
        let second = slab.insert("b").expect("room");
        assert_eq!(second.index, first.index);
        assert_ne!(second.generation, first.generation);
        assert_eq!(slab.get(first), None, "the old id is stale");
        assert_eq!(slab.get(second), Some(&"b"));
        assert_eq!(slab.remove(first), None, "a stale remove does nothing");
    }

    #[test]
    fn capacity_is_a_hard_limit() {
        let mut slab = Slab::with_capacity(1);
        assert!(slab.insert(1).is_some());
        assert!(slab.insert(2).is_none());
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn generations_wrap_within_24_bits() {
        assert_eq!(next_generation(0), 1);
        assert_eq!(next_generation(GENERATION_MASK), 0);
    }

    #[test]
    fn iteration_sees_live_values_only() {
        let mut slab = Slab::with_capacity(3);
        let a = slab.insert('a').expect("room");
        let _b = slab.insert('b').expect("room");
        slab.remove(a);
        let values: Vec<char> = slab.iter().map(|(_, v)| *v).collect();
        assert_eq!(values, ['b']);
        assert_eq!(slab.slots().len(), 1);
    }
}
