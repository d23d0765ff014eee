//! `SHOW CLIENTS` and `SHOW POOLS`, rendered from the rows every shard's engine reported
//! (`pgtier_engine::listing`): the admin session's shard gathers the parts, this renders them.

use crate::admin::format::utc_timestamp;
use crate::admin::show::ResultSet;

pub use pgtier_engine::listing::{ClientRow, Listing, PoolRow, ShardListing};

fn text(value: impl ToString) -> Option<String> {
    Some(value.to_string())
}

/// `SHOW CLIENTS`: one row per client connection on every shard that answered.
pub fn clients(listing: Option<&Listing>) -> ResultSet {
    let rows = listing
        .into_iter()
        .flat_map(|listing| &listing.parts)
        .flat_map(|part| part.clients.iter().map(move |row| (part.shard, row)))
        .map(|(shard, row)| {
            vec![
                text(shard),
                row.addr.map(|addr| addr.to_string()),
                text(&row.database),
                text(&row.user),
                text(row.state),
                row.class.map(str::to_string),
                row.replica.map(|addr| addr.to_string()),
                text(utc_timestamp(row.connected_at)),
                text(row.connected_for.as_secs()),
                row.backend_pid.map(|pid| pid.to_string()),
                (!row.pinned.is_empty()).then(|| row.pinned.clone()),
                text(row.prepared_statements),
                row.tls.clone(),
            ]
        })
        .collect();
    ResultSet {
        columns: &[
            "shard",
            "addr",
            "database",
            "user",
            "state",
            "class",
            "replica",
            "connect_time",
            "connected_s",
            "backend_pid",
            "pinned",
            "prepared_statements",
            "tls",
        ],
        rows,
    }
}

/// `SHOW POOLS`: one row per pool slice on every shard that answered.
pub fn pools(listing: Option<&Listing>) -> ResultSet {
    let rows = listing
        .into_iter()
        .flat_map(|listing| &listing.parts)
        .flat_map(|part| part.pools.iter().map(move |row| (part.shard, row)))
        .map(|(shard, row)| {
            vec![
                text(shard),
                text(&row.database),
                text(&row.user),
                text(row.addr),
                text(row.mode),
                text(row.clients_active),
                text(row.clients_waiting),
                text(row.servers_active),
                text(row.servers_idle),
                text(row.servers_opening),
            ]
        })
        .collect();
    ResultSet {
        columns: &[
            "shard",
            "database",
            "user",
            "addr",
            "pool_mode",
            "cl_active",
            "cl_waiting",
            "sv_active",
            "sv_idle",
            "sv_opening",
        ],
        rows,
    }
}
