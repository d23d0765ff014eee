//! Gathering `SHOW CLIENTS`/`SHOW POOLS` rows from every shard for an admin session.
//!
//! Each shard owns its clients and pool slices, so the admin session's shard posts
//! `Command::ListSessions` to every other shard's mailbox, lists its own rows directly, and
//! holds the admin query until every shard answered with `Command::Listed` or
//! `LISTING_WAIT` passed (the housekeeping tick checks; silent shards are named in a NOTICE).
//! The query path is untouched: the work happens only when an admin asks.

use std::os::fd::{BorrowedFd, RawFd};
use std::time::{Duration, Instant, SystemTime};

use crate::admin::listing::{ClientRow, Listing, PoolRow, ShardListing};
use crate::client::{Client, ClientState};
use crate::io::ring::Ring;
use crate::io::slab::ClientId;
use crate::mailbox::Command;
use crate::pool::PoolId;
use crate::server::ServerState;
use crate::shard::Shard;

/// How long an admin session waits for the other shards' rows.
const LISTING_WAIT: Duration = Duration::from_secs(1);

/// A listing being gathered for one admin client.
#[derive(Debug)]
struct PendingListing {
    request_id: u64,
    client: ClientId,
    deadline: Instant,
    parts: Vec<ShardListing>,
    /// Set once every shard answered or the deadline passed.
    ready: Option<Listing>,
}

/// The listings this shard's admin sessions are gathering.
#[derive(Debug, Default)]
pub struct AdminListings {
    next_request_id: u64,
    pending: Vec<PendingListing>,
}

impl AdminListings {
    /// The client's gathered listing, removed (each listing answers one query).
    pub fn take_ready(&mut self, client: ClientId) -> Option<Listing> {
        let index = self
            .pending
            .iter()
            .position(|p| p.client == client && p.ready.is_some())?;
        self.pending.swap_remove(index).ready
    }

    /// A listing is being gathered for the client.
    pub fn is_gathering(&self, client: ClientId) -> bool {
        self.pending.iter().any(|p| p.client == client)
    }
}

impl<R: Ring> Shard<R> {
    /// Starts gathering rows for admin client `id`: its own rows now, the other shards' through
    /// their mailboxes (a full mailbox just leaves that shard missing at the deadline).
    pub(crate) fn start_listing(&mut self, id: ClientId) {
        let listings = &mut self.admin_listings;
        listings.next_request_id += 1;
        let request_id = listings.next_request_id;
        listings.pending.push(PendingListing {
            request_id,
            client: id,
            deadline: self.now + LISTING_WAIT,
            parts: Vec::with_capacity(self.shared.mailboxes.len()),
            ready: None,
        });
        for (index, mailbox) in self.shared.mailboxes.iter().enumerate() {
            if index != self.index {
                let command = Command::ListSessions {
                    from: self.index,
                    request_id,
                };
                let _ = mailbox.post(command);
            }
        }
        // With a single shard this completes the listing; the caller picks it up itself
        // (resuming from here would answer ahead of answers it has not sent yet).
        let own = self.list_sessions();
        self.add_listing_part(request_id, own);
    }

    /// `Command::ListSessions`: sends this shard's rows to shard `from`.
    pub(crate) fn answer_listing(&mut self, from: usize, request_id: u64) {
        let part = Box::new(self.list_sessions());
        if let Some(mailbox) = self.shared.mailboxes.get(from) {
            // A full mailbox loses the answer; the requester reports this shard missing.
            let _ = mailbox.post(Command::Listed { request_id, part });
        }
    }

    /// `Command::Listed`: one shard's rows arrived.
    pub(crate) fn on_listed(&mut self, request_id: u64, part: ShardListing) {
        if let Some(client) = self.add_listing_part(request_id, part) {
            self.resume_admin(client);
        }
    }

    /// Housekeeping: listings past their deadline are answered with the rows that arrived.
    pub(crate) fn expire_listings(&mut self) {
        let now = self.now;
        let shards = self.shared.mailboxes.len();
        let mut expired = Vec::new();
        for pending in &mut self.admin_listings.pending {
            if pending.ready.is_none() && pending.deadline <= now {
                let missing = (0..shards)
                    .filter(|shard| !pending.parts.iter().any(|p| p.shard == *shard))
                    .collect();
                let parts = std::mem::take(&mut pending.parts);
                pending.ready = Some(Listing::new(parts, missing));
                expired.push(pending.client);
            }
        }
        for client in expired {
            self.resume_admin(client);
        }
    }

    /// Adds one shard's rows; returns the admin client once its listing is complete.
    fn add_listing_part(&mut self, request_id: u64, part: ShardListing) -> Option<ClientId> {
        let shards = self.shared.mailboxes.len().max(1);
        let pending = self
            .admin_listings
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

    /// Answers the admin client's held query, or forgets the listing if the client left.
    fn resume_admin(&mut self, id: ClientId) {
        if self.clients.get(id.0).is_some_and(|client| client.admin) {
            self.on_admin_bytes(id);
        } else {
            self.admin_listings.pending.retain(|p| p.client != id);
        }
    }

    /// This shard's client and pool rows.
    fn list_sessions(&self) -> ShardListing {
        let wall_now = SystemTime::now();
        let clients = self
            .clients
            .slots()
            .map(|(_, client)| self.client_row(client, wall_now))
            .collect();
        let pools = self.pools.ids().map(|id| self.pool_row(id)).collect();
        ShardListing {
            shard: self.index,
            clients,
            pools,
        }
    }

    fn client_row(&self, client: &Client, wall_now: SystemTime) -> ClientRow {
        let connected_for = self.now.saturating_duration_since(client.connected_at);
        let class = match (&client.lease, &client.state) {
            (Some(lease), _) => Some(lease.class().as_str()),
            (None, ClientState::WaitingForReplica { .. }) => Some(client.class.as_str()),
            (None, _) => None,
        };
        let backend_pid = client
            .server()
            .and_then(|server| self.servers.get(server.0))
            .and_then(|server| server.backend_key)
            .map(|(pid, _)| pid);
        ClientRow {
            addr: peer_addr(client.fd),
            database: client.database.clone(),
            user: client.user.clone(),
            state: client_state_name(&client.state),
            class,
            replica: client.lease.as_ref().and_then(|lease| lease.replica_addr()),
            connected_at: wall_now.checked_sub(connected_for).unwrap_or(wall_now),
            connected_for,
            backend_pid,
        }
    }

    fn pool_row(&self, id: PoolId) -> PoolRow {
        let pool = self.pools.get(id);
        let (mut clients_active, mut clients_waiting) = (0, 0);
        for (_, client) in self.clients.slots() {
            if client.pool != Some(id) {
                continue;
            }
            match client.state {
                ClientState::Idle { .. } | ClientState::Active { .. } => clients_active += 1,
                ClientState::WaitingForServer { .. } => clients_waiting += 1,
                _ => {}
            }
        }
        let servers_active = self
            .servers
            .slots()
            .filter(|(_, server)| {
                server.pool == id && matches!(server.state, ServerState::Busy { .. })
            })
            .count();
        PoolRow {
            database: pool.key.database.clone(),
            user: pool.key.user.clone(),
            addr: pool.key.addr,
            mode: pool.mode.as_str(),
            clients_active,
            clients_waiting,
            servers_active: u32::try_from(servers_active).unwrap_or(u32::MAX),
            servers_idle: u32::try_from(pool.idle.len()).unwrap_or(u32::MAX),
            servers_opening: pool.connecting,
        }
    }
}

/// The admin-console name of a client state.
fn client_state_name(state: &ClientState) -> &'static str {
    match state {
        ClientState::Startup | ClientState::Authenticating(_) => "login",
        ClientState::Idle { .. } => "idle",
        ClientState::WaitingForServer { .. } => "waiting",
        ClientState::WaitingForReplica { .. } => "waiting_for_replica",
        ClientState::Active { .. } => "active",
        ClientState::Closing { .. } => "closing",
    }
}

/// The peer address of a client socket (asked only when an admin lists clients, so accept
/// does not pay for it).
fn peer_addr(fd: RawFd) -> Option<std::net::SocketAddr> {
    // SAFETY: `fd` belongs to a client still in this shard's slab, so it stays open for the
    // duration of this call; the borrow does not outlive it.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).peer_addr().ok()?.as_socket()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, AtomicUsize};

    use bytes::BytesMut;
    use pgtier_core::config::Config;
    use pgtier_wire::FrameLimits;
    use pgtier_wire::framing::split_message;
    use pgtier_wire::messages::BackendMessage;

    use super::*;
    use crate::io::fake::{FakeRing, Pending};
    use crate::io::op_key::OpKind;
    use crate::mailbox::Mailbox;
    use crate::pool::PoolBudgets;
    use crate::proto;
    use crate::shard::Shared;
    use crate::stats::SharedStats;
    use crate::userlist::UserList;

    /// Shard 0 of `shards` over a fake ring, with admin user `admin`.
    fn admin_shard(shards: usize) -> Shard<FakeRing> {
        let text = r#"
[pgtier]
listen_port = 6432
auth_type = "trust"
admin_users = ["admin"]
[databases.db]
host = "127.0.0.1"
port = 5432
"#;
        let config = Config::from_str(text, "/tmp/listing.toml").expect("config");
        let shared = Arc::new(Shared {
            mailboxes: (0..shards)
                .map(|_| Arc::new(Mailbox::new(16).expect("eventfd")))
                .collect(),
            budgets: Arc::new(PoolBudgets::default()),
            stats: Arc::new(SharedStats::default()),
            totals: Arc::new(pgtier_core::metrics::SharedTotals::new()),
            clients: AtomicU32::new(0),
            finished_shards: AtomicUsize::new(0),
            routing: crate::routing::SharedRouting::default(),
        });
        let mut shard = Shard::new(
            0,
            FakeRing::new(),
            Arc::new(config),
            Arc::new(UserList::new()),
            shared,
            None,
        );
        shard.start();
        shard
    }

    fn is_kind(kind: OpKind) -> impl Fn(&Pending) -> bool {
        move |p| p.key.kind == kind
    }

    fn turn(shard: &mut Shard<FakeRing>) {
        shard.turn(false).expect("turn");
    }

    /// Everything sent to clients so far.
    fn client_bytes(shard: &mut Shard<FakeRing>) -> Vec<u8> {
        let mut received = Vec::new();
        while let Some(send) = shard.ring.take(is_kind(OpKind::ClientSend)) {
            received.extend(shard.ring.accept_send(send, usize::MAX));
            turn(shard);
        }
        received
    }

    /// Logs `admin` in to the console and sends `queries` as pipelined simple queries.
    fn admin_sends(shard: &mut Shard<FakeRing>, queries: &[&str]) {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        shard.admit_client(std::os::fd::IntoRawFd::into_raw_fd(socket));
        let mut startup = BytesMut::new();
        proto::startup_message(&mut startup, &[("user", "admin"), ("database", "pgtier")]);
        let recv = shard.ring.take(is_kind(OpKind::ClientRecv)).expect("recv");
        shard.ring.deliver(recv, &startup);
        turn(shard);
        client_bytes(shard);
        let mut pipelined = BytesMut::new();
        for query in queries {
            proto::query(&mut pipelined, query);
        }
        let recv = shard.ring.take(is_kind(OpKind::ClientRecv)).expect("recv");
        shard.ring.deliver(recv, &pipelined);
        turn(shard);
    }

    /// Each message as a short label: `H:<first column>`, `N:<message>`, `Z`, ...
    fn labels(bytes: &[u8]) -> Vec<String> {
        let mut bytes = BytesMut::from(bytes);
        let mut labels = Vec::new();
        while let Some(frame) = split_message(&mut bytes, &FrameLimits::default()).expect("frame") {
            let label = match BackendMessage::decode(&frame.bytes).expect("decode") {
                BackendMessage::RowDescription(d) => {
                    let first = d.fields().next().map(|f| f.name.to_vec());
                    format!("H:{}", String::from_utf8_lossy(&first.unwrap_or_default()))
                }
                BackendMessage::NoticeResponse(n) => {
                    let message = n.fields.message().unwrap_or_default();
                    format!("N:{}", String::from_utf8_lossy(message))
                }
                BackendMessage::ReadyForQuery(_) => "Z".to_string(),
                _ => continue,
            };
            labels.push(label);
        }
        labels
    }

    #[test]
    fn pipelined_answers_keep_their_order_on_a_single_shard() {
        let mut shard = admin_shard(1);
        admin_sends(
            &mut shard,
            &["SHOW VERSION", "SHOW CLIENTS", "SHOW VERSION"],
        );
        let labels = labels(&client_bytes(&mut shard));
        assert_eq!(
            labels,
            ["H:version", "Z", "H:shard", "Z", "H:version", "Z"],
            "{labels:?}"
        );
        assert!(shard.admin_listings.pending.is_empty());
    }

    #[test]
    fn a_silent_shard_is_named_after_the_wait_and_the_rest_is_answered() {
        let mut shard = admin_shard(2);
        admin_sends(&mut shard, &["SHOW CLIENTS", "SHOW VERSION"]);
        assert!(
            labels(&client_bytes(&mut shard)).is_empty(),
            "held for shard 1"
        );
        assert!(matches!(
            shard.shared.mailboxes[1].pop(),
            Some(Command::ListSessions { from: 0, .. })
        ));
        shard.now += LISTING_WAIT;
        shard.expire_listings();
        let labels = labels(&client_bytes(&mut shard));
        assert_eq!(labels.len(), 5, "{labels:?}");
        assert!(
            labels[0].starts_with("N:shard(s) 1 did not answer"),
            "{labels:?}"
        );
        assert_eq!(labels[1..], ["H:shard", "Z", "H:version", "Z"]);
        assert!(shard.admin_listings.pending.is_empty());
    }

    #[test]
    fn a_shard_answers_a_listing_request_through_the_requester_mailbox() {
        let mut shard = admin_shard(2);
        shard.answer_listing(1, 7);
        let Some(Command::Listed { request_id, part }) = shard.shared.mailboxes[1].pop() else {
            panic!("listed")
        };
        assert_eq!((request_id, part.shard), (7, 0));
    }
}
