//! The fleet's role tables as the text of one store row, one line per router:
//! `router<TAB>classes|tiers:N<TAB>role role ...`, a role being `o<t>` (owned by tier t),
//! `m` (mixed), `d` (down), `b<by>m` or `b<by>t<from>` (borrowed by tier `by` from the mixed
//! pool or from tier `from`'s pool). Both vocabularies go through the tiered form (a two-class
//! table is its two-rank image), so one encoding serves PLB and tiered PLB.

use pgtier_policy::RoleTable;
use pgtier_policy::tiers::{Tier, TierPool, TierRole, TierTable};

use crate::route_table::RouteTable;

/// Every router's table, by router label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetTables {
    /// `(router label, table)`, in the order they were written.
    pub routers: Vec<(String, RouteTable)>,
}

impl FleetTables {
    /// The table of router `name`.
    pub fn table(&self, name: &str) -> Option<&RouteTable> {
        self.routers
            .iter()
            .find(|(router, _)| router == name)
            .map(|(_, table)| table)
    }

    /// The tables as text (see the module doc).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for (name, table) in &self.routers {
            if name.contains(['\t', '\n']) {
                continue;
            }
            let (kind, tiers) = match table {
                RouteTable::Classes(table) => ("classes".to_string(), TierTable::from_roles(table)),
                RouteTable::Tiers(table) => (format!("tiers:{}", table.tiers()), table.clone()),
            };
            let roles: Vec<String> = tiers.roles().iter().map(|&r| role_token(r)).collect();
            out.push_str(&format!("{name}\t{kind}\t{}\n", roles.join(" ")));
        }
        out
    }

    /// Reads tables back; a line that does not parse is skipped (its router keeps its
    /// local table).
    pub fn decode(text: &str) -> FleetTables {
        let routers = text.lines().filter_map(decode_line).collect();
        FleetTables { routers }
    }
}

fn decode_line(line: &str) -> Option<(String, RouteTable)> {
    let mut fields = line.split('\t');
    let name = fields.next()?;
    let kind = fields.next()?;
    let roles: Option<Vec<TierRole>> = fields.next()?.split(' ').map(parse_role).collect();
    let roles = roles?;
    if fields.next().is_some() {
        return None;
    }
    let table = match kind {
        "classes" => RouteTable::Classes(RoleTable::from_ranks(&TierTable::with_roles(2, &roles)?)),
        _ => {
            let tiers: u8 = kind.strip_prefix("tiers:")?.parse().ok()?;
            RouteTable::Tiers(TierTable::with_roles(tiers, &roles)?)
        }
    };
    Some((name.to_string(), table))
}

fn role_token(role: TierRole) -> String {
    match role {
        TierRole::Owned(tier) => format!("o{}", tier.0),
        TierRole::Mixed => "m".to_string(),
        TierRole::Down => "d".to_string(),
        TierRole::Borrowed {
            by,
            from: TierPool::Mixed,
        } => format!("b{}m", by.0),
        TierRole::Borrowed {
            by,
            from: TierPool::Tier(from),
        } => format!("b{}t{}", by.0, from.0),
    }
}

fn parse_role(token: &str) -> Option<TierRole> {
    let digit = |text: &str| text.parse::<u8>().ok().map(Tier);
    match token {
        "m" => Some(TierRole::Mixed),
        "d" => Some(TierRole::Down),
        _ if token.starts_with('o') => Some(TierRole::Owned(digit(&token[1..])?)),
        _ if token.starts_with('b') => {
            let rest = &token[1..];
            if let Some(by) = rest.strip_suffix('m') {
                return Some(TierRole::Borrowed {
                    by: digit(by)?,
                    from: TierPool::Mixed,
                });
            }
            let (by, from) = rest.split_once('t')?;
            Some(TierRole::Borrowed {
                by: digit(by)?,
                from: TierPool::Tier(digit(from)?),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_policy::{Pool, ReplicaId, Role, RoleChange};

    fn classes() -> RoleTable {
        let mut table =
            RoleTable::new(5, &[ReplicaId(0), ReplicaId(1)], &[ReplicaId(4)]).expect("layout");
        let params = pgtier_policy::PlbParams::PAPER;
        let borrow = RoleChange {
            replica: ReplicaId(2),
            from: Role::Mixed,
            to: Role::BorrowedToPremium { from: Pool::Mixed },
            reason: pgtier_policy::ChangeReason::BorrowMixedForPremium,
        };
        table.apply(&borrow, &params).expect("borrow");
        let down = RoleChange {
            replica: ReplicaId(3),
            from: Role::Mixed,
            to: Role::Down,
            reason: pgtier_policy::ChangeReason::Down,
        };
        table.apply(&down, &params).expect("down");
        table
    }

    #[test]
    fn tables_of_both_vocabularies_read_back_as_written() {
        let tiers = TierTable::with_roles(
            3,
            &[
                TierRole::Owned(Tier(0)),
                TierRole::Borrowed {
                    by: Tier(0),
                    from: TierPool::Tier(Tier(2)),
                },
                TierRole::Borrowed {
                    by: Tier(1),
                    from: TierPool::Mixed,
                },
                TierRole::Down,
                TierRole::Owned(Tier(2)),
            ],
        )
        .expect("valid roles");
        let written = FleetTables {
            routers: vec![
                (
                    "analytics,analytics_premium".to_string(),
                    RouteTable::Classes(classes()),
                ),
                ("ranked".to_string(), RouteTable::Tiers(tiers)),
            ],
        };
        let read = FleetTables::decode(&written.encode());
        assert_eq!(read, written);
        assert!(read.table("ranked").is_some());
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let text = "a\tclasses\to0 m o1\n\
                    b\tclasses\to0 x\n\
                    c\tclasses\to0 b0t0\n\
                    d\ttiers:2\to0 o3\n\
                    e\tclasses\t\n\
                    f\tsomething\to0\n";
        let read = FleetTables::decode(text);
        let names: Vec<&str> = read.routers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a"]);
    }
}
