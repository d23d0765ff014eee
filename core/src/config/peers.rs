//! The `[peers]` section: the other processes (pgtier or PgBouncer) of a group behind one
//! load balancer, by peer id. A cancel key carries the id of the process that issued it
//! (`peer_id`); a CancelRequest that reaches another member of the group is forwarded to the
//! issuer's entry here, as PgBouncer's peering does.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::database::HostPort;
use super::error::ConfigError;

/// The largest peer id: the cancel key has two bytes for it.
pub const MAX_PEER_ID: u32 = 0xFFFF;

/// PgBouncer's default port of a peer.
const DEFAULT_PEER_PORT: u16 = 6432;

/// One `[peers.ID]` table as read.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PeerRaw {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub pool_size: Option<u32>,
}

/// One peer: where its cancel requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    /// Its listening address (a host starting with `/` is its Unix socket directory).
    pub addr: HostPort,
    /// Cancel requests in flight to it at once (`SHOW PEERS`' `pool_size`; none: the
    /// `default_pool_size`).
    pub pool_size: Option<u32>,
}

/// The peers by id, checked: ids from 1 to [`MAX_PEER_ID`], a host for each.
pub(super) fn validated(
    file: &Path,
    raw: BTreeMap<String, PeerRaw>,
) -> Result<BTreeMap<u16, PeerConfig>, ConfigError> {
    let mut peers = BTreeMap::new();
    for (name, peer) in raw {
        let key = format!("peers.{name}");
        let id = name
            .parse::<u32>()
            .ok()
            .filter(|id| (1..=MAX_PEER_ID).contains(id))
            .and_then(|id| u16::try_from(id).ok())
            .ok_or_else(|| {
                ConfigError::at(
                    file,
                    &key,
                    format!(
                        "ids of peers must be a number larger than 0 and at most {MAX_PEER_ID}"
                    ),
                )
            })?;
        let host = peer
            .host
            .filter(|host| !host.trim().is_empty())
            .ok_or_else(|| {
                ConfigError::at(file, &key, format!("host was not provided for peer {id}"))
            })?;
        peers.insert(
            id,
            PeerConfig {
                addr: HostPort {
                    host,
                    port: peer.port.unwrap_or(DEFAULT_PEER_PORT),
                },
                pool_size: peer.pool_size,
            },
        );
    }
    Ok(peers)
}
