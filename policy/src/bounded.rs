//! A fixed-capacity list, so that decisions returned on the admission path never allocate.
//!
//! The capacity is part of the type; pushing beyond it is reported to the caller instead of
//! growing, and every list in this crate is sized so that its producer cannot exceed it.

use core::fmt;

/// Up to `N` values of a small `Copy` type stored inline.
#[derive(Clone, Copy)]
pub struct BoundedList<T: Copy, const N: usize> {
    items: [T; N],
    len: usize,
}

impl<T: Copy, const N: usize> BoundedList<T, N> {
    /// An empty list; `filler` only initialises unused slots and is never observable.
    pub(crate) const fn new(filler: T) -> Self {
        BoundedList {
            items: [filler; N],
            len: 0,
        }
    }

    /// Appends `item`; returns it back when the list is full.
    pub(crate) fn push(&mut self, item: T) -> Result<(), T> {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                *slot = item;
                self.len += 1;
                Ok(())
            }
            None => Err(item),
        }
    }

    /// The stored values in insertion order.
    pub fn as_slice(&self) -> &[T] {
        &self.items[..self.len]
    }

    /// Iterates over the stored values in insertion order.
    pub fn iter(&self) -> core::slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    /// Number of stored values.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is stored.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maximum number of values.
    pub const fn capacity(&self) -> usize {
        N
    }
}

impl<T: Copy + fmt::Debug, const N: usize> fmt::Debug for BoundedList<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<T: Copy + PartialEq, const N: usize> PartialEq for BoundedList<T, N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Copy + Eq, const N: usize> Eq for BoundedList<T, N> {}

impl<'a, T: Copy, const N: usize> IntoIterator for &'a BoundedList<T, N> {
    type Item = &'a T;
    type IntoIter = core::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
