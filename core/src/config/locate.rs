//! Finds the line of a key path (`databases.analytics.plb.premium[1]`) in the parsed TOML, so
//! errors found after parsing point at a line just like parse errors do.

use toml::de::{DeTable, DeValue};

/// 1-based line of the byte `offset` in `text`.
pub(super) fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|byte| **byte == b'\n')
        .count()
        + 1
}

/// The line where `key` is written, if the path can be followed. Names containing dots or
/// brackets are not followed (None: the error is still shown, without a line).
pub(super) fn line_of(root: &DeTable<'_>, text: &str, key: &str) -> Option<usize> {
    let mut table = root;
    let mut offset = None;
    let mut segments = key.split('.').peekable();
    while let Some(segment) = segments.next() {
        let (name, index) = split_index(segment)?;
        let (name_span, value) = table
            .iter()
            .find(|(candidate, _)| candidate.get_ref() == name)
            .map(|(candidate, value)| (candidate.span(), value))?;
        offset = Some(name_span.start);
        if let Some(index) = index {
            let DeValue::Array(items) = value.get_ref() else {
                return None;
            };
            offset = Some(items.get(index)?.span().start);
        }
        if segments.peek().is_some() {
            let DeValue::Table(inner) = value.get_ref() else {
                return None;
            };
            table = inner;
        }
    }
    offset.map(|offset| line_at(text, offset))
}

/// `replicas[2]` into ("replicas", Some(2)); `plb` into ("plb", None).
fn split_index(segment: &str) -> Option<(&str, Option<usize>)> {
    match segment.split_once('[') {
        None => Some((segment, None)),
        Some((name, rest)) => {
            let index = rest.strip_suffix(']')?.parse().ok()?;
            Some((name, Some(index)))
        }
    }
}
