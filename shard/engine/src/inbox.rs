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
