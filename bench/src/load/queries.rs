//! The queries file: one query per line, `name<TAB>weight<TAB>SQL`; `#` comments and blank
//! lines are skipped.
//!
//! Names end up in the CSV and in tables, so they are restricted to characters that need no
//! quoting there; the SQL is sent verbatim with the simple query protocol.

use std::path::Path;

/// Most queries a file may define (a limit on everything; a workload has a handful).
pub const MAX_QUERIES: usize = 1024;

/// One query of the workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Label in the CSV and tables.
    pub name: String,
    /// Relative probability of picking this query (non-negative).
    pub weight: f64,
    /// The text sent to the server.
    pub sql: String,
}

/// True for names that need no quoting in CSV or Markdown and cannot be taken for the
/// driver's own `<connect>` rows.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn parse_line(line: &str) -> Result<Query, String> {
    // The SQL is the rest of the line, so it may itself contain tabs.
    let mut fields = line.splitn(3, '\t');
    let name = fields.next().unwrap_or_default().trim();
    let (Some(weight), Some(sql)) = (fields.next(), fields.next()) else {
        return Err("expected name<TAB>weight<TAB>SQL".into());
    };
    if !valid_name(name) {
        return Err(format!(
            "query name {name:?} must be non-empty ASCII letters, digits, '_', '-' or '.'"
        ));
    }
    let weight: f64 = weight
        .trim()
        .parse()
        .map_err(|_| format!("weight {weight:?} is not a number"))?;
    if !weight.is_finite() || weight < 0.0 {
        return Err(format!("weight {weight} must be finite and non-negative"));
    }
    let sql = sql.trim();
    if sql.is_empty() {
        return Err(format!("query {name:?} has no SQL"));
    }
    Ok(Query {
        name: name.to_string(),
        weight,
        sql: sql.to_string(),
    })
}

/// Parses the text of a queries file; errors name the (1-based) line.
pub fn parse_queries(text: &str) -> Result<Vec<Query>, String> {
    let mut queries: Vec<Query> = Vec::new();
    for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let query = parse_line(line).map_err(|e| format!("line {number}: {e}"))?;
        if queries.iter().any(|q| q.name == query.name) {
            return Err(format!(
                "line {number}: duplicate query name {:?}",
                query.name
            ));
        }
        if queries.len() == MAX_QUERIES {
            return Err(format!("line {number}: more than {MAX_QUERIES} queries"));
        }
        queries.push(query);
    }
    if queries.is_empty() {
        return Err("no queries".into());
    }
    if queries.iter().all(|q| q.weight == 0.0) {
        return Err("all query weights are zero".into());
    }
    Ok(queries)
}

/// Reads and parses a queries file; errors name the file and line.
pub fn load_queries(path: &Path) -> Result<Vec<Query>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_queries(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_queries_skipping_comments_and_blank_lines() {
        let text =
            "# workload\n\ncheap\t1\tSELECT 1\n  # indented comment\nheavy\t2.5\tSELECT\t2\r\n";
        let queries = parse_queries(text).unwrap();
        assert_eq!(queries.len(), 2);
        assert_eq!(queries[0].name, "cheap");
        assert_eq!(queries[0].weight, 1.0);
        assert_eq!(queries[0].sql, "SELECT 1");
        // Tabs after the second one belong to the SQL; a CRLF line end does not.
        assert_eq!(queries[1].sql, "SELECT\t2");
        assert_eq!(queries[1].weight, 2.5);
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse_queries("a\t1\tSELECT 1\nb 1 SELECT 2\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        let err = parse_queries("\n\na\tx\tSELECT 1\n").unwrap_err();
        assert!(
            err.starts_with("line 3:") && err.contains("not a number"),
            "{err}"
        );
        let err = parse_queries("a\t-1\tSELECT 1\n").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
        let err = parse_queries("a,b\t1\tSELECT 1\n").unwrap_err();
        assert!(err.contains("query name"), "{err}");
        let err = parse_queries("a\t1\t  \n").unwrap_err();
        assert!(err.contains("no SQL"), "{err}");
        let err = parse_queries("a\t1\tSELECT 1\na\t1\tSELECT 2\n").unwrap_err();
        assert!(
            err.starts_with("line 2:") && err.contains("duplicate"),
            "{err}"
        );
    }

    #[test]
    fn rejects_empty_and_all_zero_workloads() {
        assert!(parse_queries("# nothing\n").is_err());
        assert!(parse_queries("a\t0\tSELECT 1\n").is_err());
        assert!(parse_queries("a\t0\tSELECT 1\nb\t1\tSELECT 2\n").is_ok());
    }
}
