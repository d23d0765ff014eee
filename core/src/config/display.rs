//! A short human summary of a loaded configuration, for `pgtier check-config` and for the log
//! line written after a reload: what will listen, which databases route where.

use super::Config;
use super::database::{DatabaseConfig, Routing, ServerSet};
use std::fmt;

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settings = &self.pgtier;
        writeln!(
            f,
            "{}: listen {}:{}, {} worker(s), auth_type {}, pool_mode {}, max_client_conn {}",
            self.file.display(),
            settings.listen_addr,
            settings.listen_port,
            settings.worker_count(),
            settings.auth_type,
            settings.pool_mode,
            settings.max_client_conn,
        )?;
        for database in self.databases.values() {
            write_database(f, database)?;
        }
        for (name, user) in &self.users {
            let class = user.class.map_or("-", |class| class.as_str());
            let mode = user.pool_mode.map_or("-", |mode| mode.as_str());
            writeln!(f, "  user {name}: class {class}, pool_mode {mode}")?;
        }
        Ok(())
    }
}

fn write_database(f: &mut fmt::Formatter<'_>, database: &DatabaseConfig) -> fmt::Result {
    write!(f, "  database {} -> ", database.name)?;
    match &database.servers {
        ServerSet::Single(server) => write!(f, "{server}")?,
        ServerSet::Hosts(list) => {
            write!(
                f,
                "hosts {} port {}, load_balance_hosts {}",
                list.joined(),
                list.port(),
                list.balance.as_str()
            )?;
            if list.target.wants_primary() {
                write!(f, ", target_session_attrs {}", list.target.as_str())?;
            }
        }
        ServerSet::Replicas(set) => {
            write!(
                f,
                "{} replicas, routing {}",
                set.replicas.len(),
                set.routing.kind()
            )?;
            if let Routing::Plb(plb) = &set.routing
                && let Some(tiers) = &plb.tiers
            {
                let sizes: Vec<String> = tiers.pools.iter().map(|p| p.len().to_string()).collect();
                let pooled: usize = tiers.pools.iter().map(Vec::len).sum();
                let mixed = set.replicas.len().saturating_sub(pooled);
                write!(f, " (tiers {}, mixed {mixed})", sizes.join("/"))?;
            } else if let Routing::Plb(plb) = &set.routing {
                let mixed = set.replicas.len() - plb.premium.len() - plb.freemium.len();
                write!(
                    f,
                    " (premium {}, freemium {}, mixed {mixed})",
                    plb.premium.len(),
                    plb.freemium.len()
                )?;
            }
        }
    }
    writeln!(
        f,
        ", dbname {}, pool_size {}, pool_mode {}, class {}",
        database.dbname, database.pool_size, database.pool_mode, database.class
    )
}
