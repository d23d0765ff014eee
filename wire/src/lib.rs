//! pgtier-wire: the PostgreSQL v3 protocol codec, SCRAM-SHA-256/MD5 authentication and a
//! tracker of expected server responses. No I/O.
//!
//! # Contract
//! - **No sockets, no clocks, deterministic.** Every function is a pure transformation of its
//!   inputs. Randomness (SCRAM nonces, salts, MD5 salts) is an argument; `*_with_os_rng`
//!   helpers fill it from the OS RNG (`getrandom`) for callers that want that.
//! - **The caller owns buffers.** Framing reads the caller's `BytesMut` receive buffer and
//!   detaches complete messages as `Bytes` (`split_to` + `freeze`: no copy, no allocation).
//! - **Decoding borrows from the frame**: names, SQL text, values and fields are slices of the
//!   received bytes; repeated fields are validated once and iterated infallibly.
//! - **Encoding appends to a caller's `BytesMut`** with one reservation per message and no
//!   intermediate allocation. `encode` re-encodes a decoded message; `encode_parts` builds one
//!   from plain slices.
//! - **Hostile input is an error value, never a panic or an unbounded allocation.** Every
//!   [`ProtocolError`] has a SQLSTATE ([`ProtocolError::sqlstate`], 08P01 for framing).
//!
//! # Framing ([`framing`])
//! - [`framing::split_message`]`(&mut BytesMut, &FrameLimits) -> Result<Option<Frame>, ProtocolError>`
//!   detaches one complete typed message.
//! - [`framing::scan_run`]`(&[u8], &CodeSet, &FrameLimits) -> Result<Run, ProtocolError>` measures
//!   the run of complete messages before the first one whose type byte is in the stop set
//!   (e.g. `CodeSet::of(b"ZE")`), so a forwarder sends a whole run of DataRows as one chunk
//!   ([`framing::split_run`]) and still sees ReadyForQuery/ErrorResponse individually.
//! - [`framing::peek_header`] validates a header before the body arrives (to stream large
//!   messages); [`framing::split_startup`] frames startup-phase packets (no type byte),
//!   decoded by [`messages::frontend::StartupPacket::decode`].
//! - [`FrameLimits`]`{ max_message_len, max_startup_len }`: a length word < 4 (< 8 for startup)
//!   or above the limit is `ProtocolError::LengthTooShort/LengthTooLong` (08P01).
//!
//! # Messages ([`messages`])
//! One file per message under `messages/frontend/` and `messages/backend/` (CopyData and
//! CopyDone, sent both ways, are in `messages/`). Each implements [`messages::Message`]
//! (`CODE`, `decode_body`, `decode_frame`, `encode`); [`messages::FrontendMessage`] and
//! [`messages::BackendMessage`] decode any frame by type byte.
//!
//! # Protocol version decision
//! pgtier speaks protocol **3.0** to clients. A StartupMessage asking for 3.1+ (PostgreSQL
//! 18's 3.2 has variable-length cancel keys) or carrying `_pq_.*` options is answered with
//! NegotiateProtocolVersion(newest minor 0, every `_pq_.*` option listed as unrecognised),
//! see [`negotiate`]. CancelRequest and BackendKeyData still decode keys of 4..=256 bytes so
//! a 3.2 server or client is never a protocol error merely for its key length.
//!
//! # Authentication ([`auth`])
//! Sans-I/O state machines: [`auth::ScramServer`] and [`auth::Md5Server`] verify clients;
//! [`auth::ClientAuth`] logs in to PostgreSQL (cleartext, MD5 or SCRAM-SHA-256) by handling
//! each Authentication message and appending the reply.
//!
//! # Errors ([`error_fields`], [`sqlstate`])
//! [`error_fields::ErrorNotice`] builds ErrorResponse/NoticeResponse;
//! [`error_fields::ErrorFields`] parses received ones; [`sqlstate`] names the codes.
//!
//! # Transaction pooling ([`tracker`])
//! [`tracker::ResponseTracker`] is fed the type bytes of messages sent to a server
//! (`handle_frontend(code)`) and received from it (`handle_backend(code, body)`, the body is
//! read for ReadyForQuery only) and says when the server is idle with nothing outstanding
//! (`is_idle()`, `phase()`, `pending_ready()`). Only the codes in
//! [`tracker::TRACKED_BACKEND_CODES`] / [`tracker::TRACKED_FRONTEND_CODES`] change it, so a
//! forwarder can stop its runs at those and pass DataRows on in bulk.
//!
//! # Session state ([`session_state`])
//! [`session_state::StateScanner`] reads the SQL of a client's Query or Parse body, streamed in
//! any number of pieces, and says what it does to session state
//! ([`session_state::Effects`]): `SET`, `LISTEN`, temporary tables, session advisory locks,
//! `WITH HOLD` cursors, `PREPARE` and named statements pin a client to its server
//! ([`session_state::Effects::pins`]); `SET` of a parameter the pooler re-applies
//! (`SET_TRACKED`) does not; `RESET ALL`, `DISCARD ALL`, `DEALLOCATE ALL`... are reported for
//! unpinning. Fixed-size state, no allocation, the same answer for every split.
//!
//! # Read-only transactions ([`read_only`])
//! [`read_only::classify`] says whether a transaction's first Query or Parse text is known to
//! be read-only and runnable on a hot standby ([`read_only::Access::ReadOnly`]), for reader
//! entries; anything it does not fully understand is [`read_only::Access::Write`]. Whole
//! texts, no allocation, bounded work.
//!
//! # Database DDL ([`database_ddl`])
//! [`database_ddl::targets`] names the databases a Query or Parse text drops, renames, moves
//! or copies (`DROP DATABASE`, `ALTER DATABASE ... RENAME TO | SET TABLESPACE`, `CREATE
//! DATABASE ... TEMPLATE`), which PostgreSQL wants free of other sessions. A cheap sieve
//! first, so almost every text costs a short scan and no lexing.
//!
//! # Query digests ([`normalize`])
//! [`normalize::normalize`] turns a query text into its digest text (constants become `$n`,
//! comments go, whitespace collapses, `IN` lists of constants shrink to one placeholder) and
//! a stable 64-bit query id; [`normalize::fingerprint`] computes the id alone, writing
//! nothing. Bounded by the caller's `max_bytes`; normalizing twice changes nothing.
//!
//! # Startup parameters ([`startup_options`])
//! [`messages::frontend::StartupMessage`] keeps the parameters in order (`params.iter()`,
//! `user()`, `database()`, `options()`, `replication()`); [`startup_options::parse_options`]
//! splits `options` into `-c name=value` / `--name=value` settings exactly as PostgreSQL does.

pub mod auth;
pub mod codes;
pub mod database_ddl;
pub mod error;
pub mod error_fields;
pub mod framing;
pub mod messages;
pub mod negotiate;
pub mod normalize;
pub mod read_only;
pub mod session_state;
pub mod sqlstate;
pub mod startup_options;
pub mod tracker;

mod codec;

pub use codes::CodeSet;
pub use error::ProtocolError;
pub use framing::FrameHeader;
pub use framing::{Frame, FrameLimits, Run, RunEnd};
pub use sqlstate::SqlState;
