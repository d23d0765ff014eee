//! `SHOW FLEET`: the fleet this host shares its PLB view with (docs/fleet.md), one row per
//! member, each carrying this host's mode and the versions it applied and sees stored.

use pgtier_replicas::FleetView;

use crate::result::{ResultSet, int8, text as text_column};

fn bool_text(value: bool) -> String {
    if value { "t" } else { "f" }.to_string()
}

/// The rows of `SHOW FLEET`: one per member with a row in the store (this host's row first
/// when there is none yet, so the mode is always shown).
pub(crate) fn show_fleet(view: Option<&FleetView>) -> ResultSet {
    let columns = vec![
        text_column("fleet"),
        text_column("member"),
        text_column("is_self"),
        text_column("is_leader"),
        text_column("live"),
        text_column("last_report"),
        text_column("age_ms"),
        text_column("mode"),
        int8("version"),
        int8("stored_version"),
        text_column("cause"),
    ];
    let Some(view) = view else {
        return ResultSet {
            columns,
            rows: Vec::new(),
        };
    };
    let row = |member: &str,
               leader: bool,
               live: Option<bool>,
               last: Option<String>,
               age: Option<u128>| {
        vec![
            Some(view.name.clone()),
            Some(member.to_string()),
            Some(bool_text(member == view.host)),
            Some(bool_text(leader)),
            live.map(bool_text),
            last,
            age.map(|age| age.to_string()),
            Some(view.mode.to_string()),
            Some(view.version.to_string()),
            Some(view.stored_version.to_string()),
            view.cause.clone(),
        ]
    };
    let mut rows: Vec<Vec<Option<String>>> = view
        .members
        .iter()
        .map(|member| {
            row(
                &member.host,
                view.leader.as_deref() == Some(member.host.as_str()),
                Some(member.live),
                Some(member.last_report.clone()),
                Some(member.age.as_millis()),
            )
        })
        .collect();
    if !view.members.iter().any(|member| member.host == view.host) {
        rows.insert(0, row(&view.host, view.is_leader, None, None, None));
    }
    ResultSet { columns, rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_replicas::MemberView;
    use std::time::Duration;

    #[test]
    fn every_member_is_a_row_and_this_host_is_always_shown() {
        let mut view = FleetView {
            name: "east".to_string(),
            host: "a:6432".to_string(),
            mode: "fleet",
            leader: Some("b:6432".to_string()),
            version: 7,
            stored_version: 7,
            members: vec![MemberView {
                host: "b:6432".to_string(),
                last_report: "2026-12-06 22:00:00+00".to_string(),
                age: Duration::from_millis(300),
                live: true,
            }],
            ..FleetView::default()
        };
        let set = show_fleet(Some(&view));
        assert_eq!(set.rows.len(), 2);
        assert_eq!(set.rows[0][1].as_deref(), Some("a:6432"));
        assert_eq!(set.rows[0][2].as_deref(), Some("t"));
        assert_eq!(set.rows[1][3].as_deref(), Some("t"));
        assert_eq!(set.rows[1][6].as_deref(), Some("300"));
        view.members.push(MemberView {
            host: "a:6432".to_string(),
            last_report: String::new(),
            age: Duration::ZERO,
            live: true,
        });
        assert_eq!(show_fleet(Some(&view)).rows.len(), 2);
        assert!(show_fleet(None).rows.is_empty());
    }
}
