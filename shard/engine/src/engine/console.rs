//! The admin console's sessions in the engine: each whole message of a console client goes
//! to its [`ConsoleSession`] (simple and extended protocol), whose statements the console
//! service answers. A statement that needs every shard's rows waits for them (gathered
//! through the mailboxes, `upkeep.rs`), and the messages after it wait behind it.

use bytes::BytesMut;
use pgtier_core::config::Config;

use crate::action::Conn;
use crate::console_session::{Answerer, Handled};
use crate::engine::Engine;
use crate::ids::ClientId;
use crate::listing::Listing;
use crate::messages::{self, sqlstate};
use crate::services::{Console, ConsoleRequest, ConsoleRights, StatementAnswer};

/// Longest admin message accepted.
const MAX_ADMIN_QUERY_BYTES: u32 = 64 * 1024;

/// The console service with what one session's statements may read.
struct SessionAnswerer<'a> {
    console: &'a mut dyn Console,
    config: &'a Config,
    gates: &'a crate::gates::Gates,
    rights: ConsoleRights,
    listing: Option<&'a Listing>,
}

impl Answerer for SessionAnswerer<'_> {
    fn simple(&mut self, query: &str, out: &mut BytesMut) {
        let request = ConsoleRequest {
            query,
            rights: self.rights,
            formats: &[],
            listing: self.listing,
            config: self.config,
            gates: self.gates,
        };
        self.console.answer(&request, out);
    }

    fn statement(&mut self, query: &str, formats: &[i16]) -> StatementAnswer {
        let request = ConsoleRequest {
            query,
            rights: self.rights,
            formats,
            listing: self.listing,
            config: self.config,
            gates: self.gates,
        };
        self.console.answer_statement(&request)
    }
}

impl Engine {
    /// Handles every whole message of console session `id`, in order.
    pub(super) fn on_console_bytes(&mut self, id: ClientId) {
        self.fold_counters();
        let limits = pgtier_wire::FrameLimits {
            max_message_len: MAX_ADMIN_QUERY_BYTES,
            ..pgtier_wire::FrameLimits::default()
        };
        let mut listing = self.admin.listings_mut().take_ready(id);
        let mut out = BytesMut::new();
        loop {
            let Some(client) = self.clients.get_mut(id.0) else {
                return;
            };
            let Some((input, session)) = client.console_input_mut() else {
                return;
            };
            if self.admin.ops().is_asking(id) {
                // Its admin command waits for the shards; what follows waits behind it.
                break;
            }
            let header = match pgtier_wire::framing::peek_header(input.bytes(), &limits) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(_) => {
                    self.console_refuses(id, out, "admin console message too long or malformed");
                    return;
                }
            };
            if header.code == b'X' {
                self.send_console(id, out);
                self.close_client(id, None);
                return;
            }
            if input.len() < header.frame_len() {
                break;
            }
            let body = &input.bytes()[5..header.frame_len()];
            // PAUSE, KILL, SHUTDOWN... come as simple queries (psql, scripts); the extended
            // protocol is for drivers reading SHOW output.
            let admin = session.rights() == ConsoleRights::Admin;
            let admin_op = match (header.code, messages::query_text(body)) {
                (b'Q', Some(query)) => {
                    self.admin
                        .console_mut()
                        .control(query, admin, self.env.config())
                }
                _ => None,
            };
            if let Some(request) = admin_op {
                let _ = input.buffer_mut().split_to(header.frame_len());
                match request {
                    Ok(request) => {
                        if self.run_admin_op(id, request, &mut out) {
                            break;
                        }
                    }
                    Err(refusal) => {
                        pgtier_wire::error_fields::ErrorNotice::new(
                            pgtier_wire::error_fields::Severity::Error,
                            refusal.code,
                            &refusal.message,
                        )
                        .encode_error(&mut out);
                    }
                }
                messages::ready_for_query(&mut out, b'I');
                continue;
            }
            let wants_listing = session
                .query_to_run(header.code, body)
                .is_some_and(|query| self.admin.console_mut().needs_listing(query));
            if wants_listing && listing.is_none() {
                if !self.admin.listings_mut().is_gathering(id) {
                    self.start_listing(id);
                    listing = self.admin.listings_mut().take_ready(id);
                }
                if listing.is_none() {
                    break;
                }
                continue;
            }
            let frame = input.buffer_mut().split_to(header.frame_len());
            let (console, gates) = self.admin.console_and_gates();
            let mut answerer = SessionAnswerer {
                console,
                config: self.env.config(),
                gates,
                rights: session.rights(),
                listing: listing.as_ref(),
            };
            let handled = session.handle(header.code, &frame[5..], &mut answerer, &mut out);
            if let Handled::Refuse(message) = handled {
                self.console_refuses(id, out, message);
                return;
            }
            if header.code == b'Q' || header.code == b'E' {
                // As PgBouncer counts its console's queries under its `pgbouncer` database.
                let slot = self
                    .clients
                    .get(id.0)
                    .and_then(|c| c.session())
                    .map(|s| s.stats());
                if let Some(slot) = slot {
                    self.stats.console_query(slot);
                }
            }
            if wants_listing {
                listing = None;
            }
        }
        self.send_console(id, out);
    }

    fn send_console(&mut self, id: ClientId, out: BytesMut) {
        if !out.is_empty() {
            self.send(Conn::Client(id), out.freeze());
        }
    }

    fn console_refuses(&mut self, id: ClientId, out: BytesMut, message: &str) {
        self.send_console(id, out);
        let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, message);
        self.close_client(id, Some(error));
    }
}
