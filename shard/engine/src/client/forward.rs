//! Moving a linked client's messages to its server. Messages are framed by header only: a
//! body of any size streams through in the pieces it arrives in, as `Bytes` split off the
//! receive buffer (no copy). On the way the response tracker learns what the server will
//! owe, and in transaction mode each Query and Parse text is classified for session state
//! (`pgtier_wire::session_state`), so the engine can keep a client that creates some on its
//! server. A Terminate ends the client; a type byte no frontend sends, or a bad length, is
//! a protocol violation and never reaches the server.

use bytes::{Bytes, BytesMut};
use pgtier_wire::framing::{self, HEADER_LEN};
use pgtier_wire::session_state::{Effects, StateScanner};
use pgtier_wire::{FrameLimits, codes};

use crate::client::texts::TextCache;
use crate::tracker::Tracker;

/// Why forwarding stopped before the end of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardEnd {
    /// The client sent Terminate: it leaves (what came before it was forwarded).
    Terminate,
    /// A message type no frontend sends.
    InvalidType(u8),
    /// A length out of range, or a message sequence the tracker refuses.
    Malformed,
}

/// What one call forwarded.
#[derive(Debug, Default)]
pub struct Forwarded {
    /// Bytes for the server (whole messages and streamed pieces of the current one).
    pub chunk: Option<Bytes>,
    /// Session-state effects of the Query and Parse messages completed in this call.
    pub effects: Effects,
    /// A Query, Sync or FunctionCall was forwarded: a response is now awaited.
    pub started: bool,
    /// Set when the client must be closed.
    pub end: Option<ForwardEnd>,
}

/// One linked client's framing state between calls.
#[derive(Debug, Default)]
pub struct Forwarder {
    /// Body bytes of the current message still to come from the client.
    skip_bytes: usize,
    /// Classifies the current Query/Parse body while it streams in pieces (boxed: most texts
    /// arrive whole and never need it, and an idle client should stay small).
    scan: Option<Box<StateScanner>>,
}

/// How the client's text is read for session state, when it is watched at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    /// `standard_conforming_strings` of the session (how `'\'` lexes).
    pub conforming_strings: bool,
}

impl Forwarder {
    /// Forwards what `input` holds; `watch` classifies Query/Parse texts for session state.
    pub fn forward(
        &mut self,
        input: &mut BytesMut,
        tracker: &mut Tracker,
        max_message_bytes: u32,
        watch: Option<Watch>,
        texts: &mut TextCache,
    ) -> Forwarded {
        let limits = FrameLimits {
            max_message_len: max_message_bytes,
            ..FrameLimits::default()
        };
        let mut out = Forwarded::default();
        let mut pos = 0usize;
        while pos < input.len() {
            if self.skip_bytes > 0 {
                let take = self.skip_bytes.min(input.len() - pos);
                self.skip_bytes -= take;
                if let Some(scan) = self.scan.as_mut() {
                    scan.feed(&input[pos..pos + take]);
                    if self.skip_bytes == 0 {
                        let effects = self.scan.take().map_or(Effects::NONE, |scan| scan.finish());
                        out.effects = out.effects.union(effects);
                    }
                }
                pos += take;
                continue;
            }
            let header = match framing::peek_header(&input[pos..], &limits) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(_) => {
                    out.end = Some(ForwardEnd::Malformed);
                    break;
                }
            };
            let code = header.code;
            if code == codes::frontend::TERMINATE {
                out.end = Some(ForwardEnd::Terminate);
                break;
            }
            if !Tracker::is_client_message(code) {
                out.end = Some(ForwardEnd::InvalidType(code));
                break;
            }
            if tracker.on_client_message(code).is_err() {
                out.end = Some(ForwardEnd::Malformed);
                break;
            }
            out.started |= matches!(code, b'Q' | b'S' | b'F');
            pos += HEADER_LEN;
            self.skip_bytes = header.body_len();
            let parse = code == codes::frontend::PARSE;
            if let Some(watch) = watch.filter(|_| parse || code == codes::frontend::QUERY) {
                match input.get(pos..pos + self.skip_bytes) {
                    // The usual case: the whole text is here, classified (or found in the
                    // cache) with no state kept.
                    Some(body) => {
                        let effects = texts.classify(body, parse, watch.conforming_strings);
                        out.effects = out.effects.union(effects);
                    }
                    // A text arriving in pieces: classified as they stream through.
                    None => {
                        let scanner = if parse {
                            StateScanner::parse()
                        } else {
                            StateScanner::query()
                        };
                        let scanner = scanner.standard_conforming_strings(watch.conforming_strings);
                        self.scan = Some(Box::new(scanner));
                    }
                }
            }
        }
        if pos > 0 {
            out.chunk = Some(input.split_to(pos).freeze());
        }
        if out.end == Some(ForwardEnd::Terminate) {
            input.clear();
        }
        out
    }

    /// Whether a message is partly forwarded (its body still streaming).
    pub fn mid_message(&self) -> bool {
        self.skip_bytes > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Vec<u8> {
        let mut out = vec![b'Q'];
        out.extend_from_slice(&(sql.len() as u32 + 5).to_be_bytes());
        out.extend_from_slice(sql.as_bytes());
        out.push(0);
        out
    }

    const WATCH: Option<Watch> = Some(Watch {
        conforming_strings: true,
    });

    #[test]
    fn whole_messages_go_as_one_chunk_and_the_tracker_learns_them() {
        let mut input = BytesMut::from(&[query("SELECT 1"), query("SELECT 2")].concat()[..]);
        let mut tracker = Tracker::default();
        let out = Forwarder::default().forward(
            &mut input,
            &mut tracker,
            1 << 20,
            None,
            &mut TextCache::default(),
        );
        assert_eq!(out.chunk.map(|c| c.len()), Some(2 * 14));
        assert!(out.started && out.end.is_none());
        assert!(input.is_empty());
        assert!(tracker.has_outstanding());
    }

    #[test]
    fn a_body_streams_in_pieces_and_its_state_is_classified_across_them() {
        let message = query("SET work_mem = '64MB'");
        let mut tracker = Tracker::default();
        let mut forwarder = Forwarder::default();
        let mut sent = Vec::new();
        let mut effects = Effects::NONE;
        let mut input = BytesMut::new();
        for piece in message.chunks(3) {
            input.extend_from_slice(piece);
            let out = forwarder.forward(
                &mut input,
                &mut tracker,
                1 << 20,
                WATCH,
                &mut TextCache::default(),
            );
            sent.extend_from_slice(&out.chunk.unwrap_or_default());
            effects = effects.union(out.effects);
        }
        assert_eq!(sent, message, "every byte forwarded, in order");
        assert!(effects.pins(), "{effects:?}");
        assert!(!forwarder.mid_message());
    }

    #[test]
    fn unwatched_texts_are_not_classified() {
        let mut input = BytesMut::from(&query("LISTEN x")[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            1 << 20,
            None,
            &mut TextCache::default(),
        );
        assert!(out.effects.is_empty());
    }

    #[test]
    fn terminate_ends_after_what_came_before() {
        let mut input = BytesMut::from(&[query("SELECT 1"), b"X\0\0\0\x04".to_vec()].concat()[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            1 << 20,
            None,
            &mut TextCache::default(),
        );
        assert_eq!(out.end, Some(ForwardEnd::Terminate));
        assert_eq!(out.chunk.map(|c| c.len()), Some(14));
        assert!(input.is_empty());
    }

    #[test]
    fn garbage_and_bad_lengths_never_pass() {
        let mut input = BytesMut::from(&b"@\0\0\0\x08abcd"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            1 << 20,
            None,
            &mut TextCache::default(),
        );
        assert_eq!(out.end, Some(ForwardEnd::InvalidType(b'@')));
        assert!(out.chunk.is_none());
        let mut input = BytesMut::from(&b"Q\0\0\0\x02"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            1 << 20,
            None,
            &mut TextCache::default(),
        );
        assert_eq!(out.end, Some(ForwardEnd::Malformed));
        let mut input = BytesMut::from(&b"Q\x7f\0\0\0"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            1024,
            None,
            &mut TextCache::default(),
        );
        assert_eq!(
            out.end,
            Some(ForwardEnd::Malformed),
            "over the message limit"
        );
    }

    #[test]
    fn a_partial_header_waits() {
        let mut input = BytesMut::from(&b"Q\0\0"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            1 << 20,
            None,
            &mut TextCache::default(),
        );
        assert!(out.chunk.is_none() && out.end.is_none());
        assert_eq!(input.len(), 3);
    }
}
