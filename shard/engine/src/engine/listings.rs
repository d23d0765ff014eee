//! The listings this shard's console sessions are gathering: each console query that
//! needs every shard's rows (`SHOW CLIENTS`...) waits here for the parts to arrive, or for
//! its deadline, and is then ready for the session (`admin_flows.rs`).

use std::time::Instant;

use crate::ids::ClientId;
use crate::listing::{Listing, ShardListing};

/// A listing being gathered for one console session.
#[derive(Debug)]
struct PendingListing {
    request_id: u64,
    client: ClientId,
    deadline: Instant,
    parts: Vec<ShardListing>,
    /// Set once every shard answered or the deadline passed.
    ready: Option<Listing>,
}

/// The listings this shard's console sessions are gathering.
#[derive(Debug, Default)]
pub(crate) struct Listings {
    next_request_id: u64,
    pending: Vec<PendingListing>,
}

impl Listings {
    pub(super) fn take_ready(&mut self, client: ClientId) -> Option<Listing> {
        let index = self
            .pending
            .iter()
            .position(|p| p.client == client && p.ready.is_some())?;
        self.pending.swap_remove(index).ready
    }

    pub(super) fn is_gathering(&self, client: ClientId) -> bool {
        self.pending.iter().any(|p| p.client == client)
    }
}

impl Listings {
    /// Console session `client` asks every one of `shards` for its rows, until
    /// `deadline`: the request id the parts carry.
    pub(super) fn start(&mut self, client: ClientId, deadline: Instant, shards: usize) -> u64 {
        self.next_request_id += 1;
        let request_id = self.next_request_id;
        self.pending.push(PendingListing {
            request_id,
            client,
            deadline,
            parts: Vec::with_capacity(shards),
            ready: None,
        });
        request_id
    }

    /// Adds one shard's rows; returns the console client once its listing is complete.
    pub(super) fn add_part(
        &mut self,
        request_id: u64,
        part: ShardListing,
        shards: usize,
    ) -> Option<ClientId> {
        let pending = self
            .pending
            .iter_mut()
            .find(|p| p.request_id == request_id && p.ready.is_none())?;
        pending.parts.push(part);
        if pending.parts.len() < shards {
            return None;
        }
        let parts = std::mem::take(&mut pending.parts);
        pending.ready = Some(Listing::new(parts, Vec::new()));
        Some(pending.client)
    }

    /// Listings past their deadline are made ready with the rows that arrived: the console
    /// clients to answer.
    pub(super) fn expire(&mut self, now: Instant, shards: usize) -> Vec<ClientId> {
        let mut expired = Vec::new();
        for pending in &mut self.pending {
            if pending.ready.is_none() && pending.deadline <= now {
                let missing = (0..shards)
                    .filter(|shard| !pending.parts.iter().any(|p| p.shard == *shard))
                    .collect();
                let parts = std::mem::take(&mut pending.parts);
                pending.ready = Some(Listing::new(parts, missing));
                expired.push(pending.client);
            }
        }
        expired
    }

    /// The console session left: its listings are dropped.
    pub(super) fn forget(&mut self, client: ClientId) {
        self.pending.retain(|p| p.client != client);
    }
}
