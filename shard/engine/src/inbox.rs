//! A connection's received bytes not consumed yet: appended as they arrive, read by the
//! parsers in place, and dropped whole once consumed so an idle connection holds no memory.

use bytes::BytesMut;

/// Received bytes the engine has not consumed yet.
#[derive(Debug, Default)]
pub struct Inbox {
    bytes: BytesMut,
}

impl Inbox {
    /// Bytes arrived: they join what is waiting (taken whole when nothing waits, so the
    /// common case copies nothing).
    pub fn received(&mut self, data: BytesMut) {
        if self.bytes.is_empty() {
            self.bytes = data;
        } else {
            self.bytes.unsplit(data);
        }
    }

    /// Bytes taken off earlier go back in front of what waits (a statement that runs again
    /// on another server). Copies, but only on that rare path.
    pub(crate) fn put_back(&mut self, front: &[bytes::Bytes]) {
        let front_len: usize = front.iter().map(bytes::Bytes::len).sum();
        let mut bytes = BytesMut::with_capacity(front_len + self.bytes.len());
        for piece in front {
            bytes.extend_from_slice(piece);
        }
        bytes.extend_from_slice(&self.bytes);
        self.bytes = bytes;
    }

    /// An input consumed to the end is dropped: even empty, it would keep its allocation
    /// (and the chunks split off it, until they are sent, shared).
    pub(crate) fn release_if_consumed(&mut self) {
        if self.bytes.is_empty() && self.bytes.capacity() > 0 {
            self.bytes = BytesMut::new();
        }
    }

    /// The connection is going away: what waits is dropped with its allocation.
    pub fn discard(&mut self) {
        self.bytes = BytesMut::new();
    }

    /// What waits is dropped, the allocation kept.
    pub fn clear(&mut self) {
        self.bytes.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn first(&self) -> Option<u8> {
        self.bytes.first().copied()
    }

    /// What waits, to be read in place.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The buffer, for the parsers that consume from it.
    pub(crate) fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.bytes
    }
}
