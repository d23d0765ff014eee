//! A provided-buffer ring: receive buffers a shard lends to the kernel as a group, so a socket
//! with a receive armed holds no memory of its own. The kernel picks a buffer only when data
//! arrives, names it in the completion (`IORING_CQE_F_BUFFER`, the id in the upper 16 bits of
//! the flags), and the shard copies the bytes out and gives the buffer straight back.
//!
//! This is why 10,000 idle clients cost no receive memory: the ring's `count` buffers of
//! `size` bytes are shared by every client of the shard, whatever their number.
//!
//! Layout (`io_uring_register_buf_ring(3)`): a page-aligned array of `count` 16-byte entries
//! `{addr: u64, len: u32, bid: u16, resv: u16}`, whose first entry's `resv` is the tail the
//! shard advances; the kernel keeps the head. The buffers themselves are one allocation.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

/// One ring entry, as the kernel reads it.
#[repr(C)]
struct Entry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

pub(crate) struct BufRing {
    /// The mmap'd entry array (`count` entries), shared with the kernel.
    entries: *mut Entry,
    /// Bytes mapped for `entries`.
    map_bytes: usize,
    /// The buffers, `count * size` bytes; the kernel writes into those it was given.
    buffers: Box<[u8]>,
    count: u16,
    size: u32,
    /// Next tail value (entries published so far).
    tail: u16,
    pub group: u16,
}

impl BufRing {
    /// Maps and fills a ring of `count` buffers (a power of two, at most 32768) of `size`
    /// bytes; it is registered by the caller (`register_addr`), which must keep it alive until
    /// the io_uring it is registered with is gone.
    pub fn new(count: u16, size: u32, group: u16) -> io::Result<BufRing> {
        if !count.is_power_of_two() || size == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let map_bytes = usize::from(count) * std::mem::size_of::<Entry>();
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let buffers = vec![0u8; usize::from(count) * size as usize].into_boxed_slice();
        let mut ring = BufRing {
            entries: addr.cast::<Entry>(),
            map_bytes,
            buffers,
            count,
            size,
            tail: 0,
            group,
        };
        for bid in 0..count {
            ring.put(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// The entry array's address, for `register_buf_ring_with_flags`.
    pub(crate) fn register_addr(&self) -> u64 {
        self.entries as u64
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    /// The first `len` bytes of buffer `bid`, as the kernel filled them.
    pub fn filled(&self, bid: u16, len: usize) -> &[u8] {
        let start = usize::from(bid % self.count) * self.size as usize;
        let len = len.min(self.size as usize);
        &self.buffers[start..start + len]
    }

    /// Gives buffer `bid` back to the kernel (visible at the next `publish`).
    pub fn recycle(&mut self, bid: u16) {
        self.put(bid % self.count);
        self.publish();
    }

    fn put(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        let start = usize::from(bid) * self.size as usize;
        let addr = self.buffers[start..].as_mut_ptr() as u64;
        // SAFETY: `index < count`, inside the mapping; the kernel reads only entries between
        // its head and the published tail, and this one is past the tail until `publish`.
        unsafe {
            let entry = self.entries.add(index);
            (*entry).addr = addr;
            (*entry).len = self.size;
            (*entry).bid = bid;
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes every entry put so far visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail is the `resv` field of entry 0 (offset 14, 2-byte aligned, inside
        // the mapping); the kernel reads it with acquire semantics, so a release store
        // orders the entries written before it.
        let tail = unsafe {
            &*std::ptr::addr_of_mut!((*self.entries).resv)
                .cast::<u16>()
                .cast::<AtomicU16>()
        };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; the owner drops the ring only
        // after the io_uring it was registered with (field order in `UringRing`).
        unsafe { libc::munmap(self.entries.cast(), self.map_bytes) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_buffer_starts_in_the_ring_and_comes_back_at_the_tail() {
        let mut ring = BufRing::new(4, 64, 0).expect("ring");
        assert_eq!(ring.tail, 4);
        // SAFETY: reading entries of our own mapping in a single-threaded test.
        let bids: Vec<u16> = (0..4)
            .map(|i| unsafe { (*ring.entries.add(i)).bid })
            .collect();
        assert_eq!(bids, vec![0, 1, 2, 3]);
        ring.recycle(2);
        assert_eq!(ring.tail, 5);
        // SAFETY: as above.
        let first = unsafe { &*ring.entries };
        assert_eq!(first.bid, 2, "slot 0 reused for the recycled buffer");
        assert_eq!(first.len, 64);
        assert_eq!(ring.filled(2, 10).len(), 10);
        assert_eq!(ring.filled(2, 1000).len(), 64, "never past the buffer");
    }

    #[test]
    fn a_count_that_is_not_a_power_of_two_is_refused() {
        assert!(BufRing::new(3, 64, 0).is_err());
        assert!(BufRing::new(4, 0, 0).is_err());
    }
}
