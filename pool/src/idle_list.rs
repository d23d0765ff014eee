//! A pool's idle servers on this worker, most recently used last, whose count is published on
//! the pool's [`IdleBoard`] as it changes (so other workers can borrow one instead of opening).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::idle_board::IdleBoard;
use crate::lease::Lease;

#[derive(Debug)]
pub(crate) struct IdleList<S> {
    leases: VecDeque<Lease<S>>,
    board: Arc<IdleBoard>,
    /// This worker's index on the board (out of range: not published).
    worker: usize,
}

impl<S> IdleList<S> {
    pub(crate) fn new(board: Arc<IdleBoard>, worker: usize) -> IdleList<S> {
        IdleList {
            leases: VecDeque::new(),
            board,
            worker,
        }
    }

    pub(crate) fn push_back(&mut self, lease: Lease<S>) {
        self.leases.push_back(lease);
        self.board.step(self.worker, true);
    }

    pub(crate) fn pop_front(&mut self) -> Option<Lease<S>> {
        let lease = self.leases.pop_front()?;
        self.board.step(self.worker, false);
        Some(lease)
    }

    pub(crate) fn pop_back(&mut self) -> Option<Lease<S>> {
        let lease = self.leases.pop_back()?;
        self.board.step(self.worker, false);
        Some(lease)
    }

    pub(crate) fn remove(&mut self, position: usize) -> Option<Lease<S>> {
        let lease = self.leases.remove(position)?;
        self.board.step(self.worker, false);
        Some(lease)
    }

    pub(crate) fn front(&self) -> Option<&Lease<S>> {
        self.leases.front()
    }

    pub(crate) fn len(&self) -> usize {
        self.leases.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    pub(crate) fn iter(&self) -> std::collections::vec_deque::Iter<'_, Lease<S>> {
        self.leases.iter()
    }

    /// The board moves to the pool's new limits (a reload keeps the same one: it is shared
    /// by key); the count published on the old one is taken back.
    pub(crate) fn set_board(&mut self, board: Arc<IdleBoard>) {
        if Arc::ptr_eq(&self.board, &board) {
            return;
        }
        for _ in 0..self.leases.len() {
            self.board.step(self.worker, false);
            board.step(self.worker, true);
        }
        self.board = board;
    }
}

impl<S> std::ops::Index<usize> for IdleList<S> {
    type Output = Lease<S>;

    fn index(&self, index: usize) -> &Lease<S> {
        &self.leases[index]
    }
}

impl<S> Drop for IdleList<S> {
    /// A forgotten pool holds no idle server; if one is dropped with some, its count must not
    /// stay published.
    fn drop(&mut self) {
        for _ in 0..self.leases.len() {
            self.board.step(self.worker, false);
        }
    }
}
