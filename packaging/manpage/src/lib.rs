//! The manual pages of the Debian package, written from the docs rather than beside them:
//! pgtier.ini(5) is docs/config.md (every setting table, the pgbouncer.ini rules, the auth
//! file), pgtier(1) is its "Command line" section with docs/operations.md's signals. The docs
//! are the source of truth (core's tests check that docs/config.md documents every key the
//! loader accepts), so a page generated at package time lists exactly what the docs list.
//!
//! The Markdown read is the subset the docs use: headings, paragraphs, `-` lists (one level,
//! continuation lines indented), tables (a `\|` inside a cell is a literal bar), fenced code,
//! and inline code, bold and links. Anything else is written as text.

/// A page's fixed header fields.
#[derive(Debug, Clone)]
pub struct PageInfo<'a> {
    /// pgtier's version, in the page footer.
    pub version: &'a str,
    /// The date the page shows (the docs' last change, for a reproducible package).
    pub date: &'a str,
}

/// pgtier.ini(5) from docs/config.md.
pub fn ini_page(config_md: &str, info: &PageInfo<'_>) -> String {
    let mut page = header("PGTIER.INI", 5, info);
    page.push_str(".SH NAME\npgtier.ini \\- configuration file of pgtier\n");
    page.push_str(
        ".SH SYNOPSIS\n/etc/pgtier/pgtier.ini\n.br\n/etc/pgtier/NAME.ini (pgtier@NAME.service)\n",
    );
    page.push_str(".SH DESCRIPTION\n");
    // The title line is the page's NAME; the rest is the reference, section by section.
    let body = config_md
        .split_once('\n')
        .map_or(config_md, |(_, rest)| rest);
    page.push_str(&roff_from_markdown(body));
    page.push_str(
        ".SH FILES\n.TP\n/etc/pgtier/pgtier.ini\nThe configuration of pgtier.service.\n\
         .TP\n/etc/pgtier/userlist.txt\nThe auth file of the default configuration.\n\
         .SH SEE ALSO\n\\fBpgtier\\fR(1), \\fBpgbouncer\\fR(5)\n",
    );
    page
}

/// pgtier(1) from docs/config.md's "Command line" section and docs/operations.md's
/// "Signals".
pub fn command_page(config_md: &str, operations_md: &str, info: &PageInfo<'_>) -> String {
    let mut page = header("PGTIER", 1, info);
    page.push_str(
        ".SH NAME\npgtier \\- PostgreSQL connection pooler with replica routing by service class\n",
    );
    page.push_str(".SH SYNOPSIS\n");
    let command_line = section(config_md, "### Command line").unwrap_or_default();
    page.push_str(&roff_from_markdown(command_line));
    page.push_str(
        ".SH DESCRIPTION\npgtier pools PostgreSQL server connections for many clients, as PgBouncer \
         does, and reads PgBouncer's configuration file, command line, admin console and \
         signals. It runs one io_uring event loop per core and routes read sessions across \
         replicas by service class. FILE is a pgtier TOML file or a pgbouncer.ini; its \
         settings are in \\fBpgtier.ini\\fR(5).\n\
         .PP\n\\fBpgtier check-config FILE\\fR loads FILE as the proxy would and prints OK or \
         the first problem; for a pgbouncer.ini it also prints each key that behaves \
         differently under pgtier, each key pgtier does not act on, and the command line to \
         start pgtier with the file. Its exit status is 0 when the file runs as is.\n",
    );
    if let Some(signals) = section(operations_md, "## Signals") {
        page.push_str(&roff_from_markdown(signals));
    }
    page.push_str(
        ".SH SYSTEMD\npgtier.service runs /etc/pgtier/pgtier.ini as the pgtier user \
         (Type=notify: pgtier reports READY=1 once it listens, RELOADING=1 and READY=1 \
         around a reload, STOPPING=1 when it shuts down); \\fBsystemctl reload pgtier\\fR \
         sends SIGHUP. pgtier@NAME.service runs /etc/pgtier/NAME.ini, for several processes \
         on one port and the rolling restart.\n\
         .SH FILES\n.TP\n/etc/pgtier/pgtier.ini\nThe default configuration.\n\
         .TP\n/var/log/pgtier/pgtier.log\nThe log file, reopened on SIGHUP.\n\
         .TP\n/run/pgtier\nThe Unix socket and the pidfile.\n\
         .TP\n/usr/share/doc/pgtier\nThe documentation, the Grafana dashboard and the \
         Prometheus alert rules (ops/).\n\
         .SH SEE ALSO\n\\fBpgtier.ini\\fR(5), \\fBpgbouncer\\fR(1), \\fBpsql\\fR(1)\n",
    );
    page
}

/// Every key a settings table of docs/config.md documents (tables whose first column is
/// `key`), in order.
pub fn documented_keys(config_md: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut in_key_table = false;
    for line in config_md.lines() {
        let Some(cells) = table_cells(line) else {
            in_key_table = false;
            continue;
        };
        if cells.first().is_some_and(|cell| cell == "key") {
            in_key_table = true;
            continue;
        }
        if !in_key_table {
            continue;
        }
        if let Some(key) = cells
            .first()
            .and_then(|cell| cell.strip_prefix('`'))
            .and_then(|cell| cell.strip_suffix('`'))
        {
            keys.push(key.to_string());
        }
    }
    keys
}

/// The part of `markdown` under the heading line `heading` (`## Name`, matched at the
/// start of the line), up to the next heading of the same or a higher level.
pub fn section<'a>(markdown: &'a str, heading: &str) -> Option<&'a str> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = markdown
        .match_indices(heading)
        .map(|(at, _)| at)
        .find(|at| *at == 0 || markdown.as_bytes()[at - 1] == b'\n')?;
    let body_start = markdown[start..]
        .find('\n')
        .map_or(markdown.len(), |n| start + n + 1);
    let rest = &markdown[body_start..];
    let mut offset = 0;
    let mut in_code = false;
    for line in rest.split_inclusive('\n') {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !in_code && hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            break;
        }
        offset += line.len();
    }
    Some(&rest[..offset])
}

/// The page header: title, section, date, source, manual, and no hyphenation or right
/// justification (setting names must stay whole to be found).
fn header(title: &str, section: u8, info: &PageInfo<'_>) -> String {
    format!(
        ".\\\" Generated by pgtier-manpage from the pgtier docs; do not edit.\n\
         .TH \"{title}\" \"{section}\" \"{}\" \"pgtier {}\" \"pgtier manual\"\n.nh\n.ad l\n",
        info.date, info.version
    )
}

/// The cells of a table row (`| a | b |`), or None for any other line.
fn table_cells(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_string()),
            other => cell.push(other),
        }
    }
    cells.push(cell.trim().to_string());
    Some(cells)
}

/// What the converter is in the middle of.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Block {
    Nothing,
    Paragraph,
    ListItem,
    /// A table and its header cells.
    Table(Vec<String>),
}

/// Roff for a Markdown fragment.
pub fn roff_from_markdown(markdown: &str) -> String {
    let mut out = String::new();
    let mut block = Block::Nothing;
    let mut in_code = false;
    let mut in_list = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            if in_code {
                out.push_str(".fi\n.RE\n");
            } else {
                out.push_str(".RS 4\n.nf\n");
            }
            in_code = !in_code;
            block = Block::Nothing;
            continue;
        }
        if in_code {
            out.push_str(&escape_line(&escape(line.trim_start_matches("  "))));
            out.push('\n');
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            block = Block::Nothing;
            continue;
        }
        if let Some((hashes, title)) = trimmed.split_once(' ')
            && !hashes.is_empty()
            && hashes.chars().all(|c| c == '#')
        {
            let macro_name = if hashes.len() <= 2 { "SH" } else { "SS" };
            let title = if macro_name == "SH" {
                inline(&title.to_uppercase())
            } else {
                inline(title)
            };
            out.push_str(&format!(
                ".{macro_name} \"{}\"\n",
                title.replace('"', "\\(dq")
            ));
            block = Block::Nothing;
            in_list = false;
            continue;
        }
        if let Some(cells) = table_cells(trimmed) {
            if cells
                .iter()
                .all(|cell| cell.chars().all(|c| c == '-' || c == ':'))
            {
                continue;
            }
            match &block {
                Block::Table(headers) => {
                    out.push_str(&table_row(headers, &cells));
                }
                _ => block = Block::Table(cells),
            }
            continue;
        }
        if let Some(item) = trimmed.strip_prefix("- ") {
            if !in_list {
                out.push_str(".RS 2\n");
                in_list = true;
            }
            out.push_str(".IP \\(bu 2\n");
            out.push_str(&escape_line(&inline(item)));
            out.push('\n');
            block = Block::ListItem;
            continue;
        }
        let continues = matches!(block, Block::Paragraph | Block::ListItem);
        if in_list && !line.starts_with(' ') && block != Block::ListItem {
            out.push_str(".RE\n");
            in_list = false;
        }
        if !continues {
            if in_list && !line.starts_with(' ') {
                out.push_str(".RE\n");
                in_list = false;
            }
            out.push_str(".PP\n");
            block = Block::Paragraph;
        }
        out.push_str(&escape_line(&inline(trimmed)));
        out.push('\n');
    }
    if in_code {
        out.push_str(".fi\n.RE\n");
    }
    if in_list {
        out.push_str(".RE\n");
    }
    out
}

/// One table row as a tagged paragraph: the first cell is the tag, the other cells follow,
/// each but the last named by its column's header (`default: 20`).
fn table_row(headers: &[String], cells: &[String]) -> String {
    let mut out = String::from(".TP\n");
    let tag = cells.first().map(String::as_str).unwrap_or_default();
    out.push_str(&escape_line(&inline(tag)));
    out.push('\n');
    let last = cells.len().saturating_sub(1);
    for (index, cell) in cells.iter().enumerate().skip(1) {
        let text = inline(cell);
        if index < last {
            let name = headers.get(index).map(String::as_str).unwrap_or_default();
            out.push_str(&escape_line(&format!("{name}: {text}")));
            out.push_str("\n.br\n");
        } else {
            out.push_str(&escape_line(&text));
            out.push('\n');
        }
    }
    out
}

/// Backslashes for roff (before any font escape is added).
fn escape(text: &str) -> String {
    text.replace('\\', "\\e")
}

/// A line roff would read as a request (a leading `.` or `'`) gets a zero-width start.
fn escape_line(text: &str) -> String {
    if text.starts_with('.') || text.starts_with('\'') {
        format!("\\&{text}")
    } else {
        text.to_string()
    }
}

/// Inline Markdown to roff: `code` and **bold** in bold, [text](link) as its text.
fn inline(text: &str) -> String {
    let text = escape(text);
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text.as_str();
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix('`')
            && let Some(end) = after.find('`')
        {
            out.push_str("\\fB");
            out.push_str(&after[..end]);
            out.push_str("\\fR");
            rest = &after[end + 1..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("**")
            && let Some(end) = after.find("**")
        {
            out.push_str("\\fB");
            out.push_str(&inline_plain(&after[..end]));
            out.push_str("\\fR");
            rest = &after[end + 2..];
            continue;
        }
        if let Some(after) = rest.strip_prefix('[')
            && let Some(close) = after.find("](")
            && let Some(end) = after[close + 2..].find(')')
        {
            out.push_str(&inline_plain(&after[..close]));
            rest = &after[close + 2 + end + 1..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Inside bold or a link's text: code spans lose their backticks (no nested fonts).
fn inline_plain(text: &str) -> String {
    text.replace('`', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG_MD: &str = include_str!("../../../docs/config.md");
    const OPERATIONS_MD: &str = include_str!("../../../docs/operations.md");
    const INFO: PageInfo<'static> = PageInfo {
        version: "0.1.0",
        date: "2026-12-06",
    };

    #[test]
    fn the_ini_page_has_a_tagged_entry_for_every_documented_key() {
        let keys = documented_keys(CONFIG_MD);
        // The reference's tables hold well over a hundred settings; a parser that found few
        // would make this test pass for nothing.
        assert!(keys.len() > 100, "only {} keys found", keys.len());
        assert!(keys.iter().any(|key| key == "listen_port"));
        let page = ini_page(CONFIG_MD, &INFO);
        for key in &keys {
            assert!(
                page.contains(&format!(".TP\n\\fB{key}\\fR\n")),
                "pgtier.ini(5) has no entry for `{key}`"
            );
        }
    }

    #[test]
    fn the_command_page_has_the_switches_and_the_signals() {
        let page = command_page(CONFIG_MD, OPERATIONS_MD, &INFO);
        for needle in [
            "\\fB\\-d\\fR",
            "\\fB-R\\fR",
            "SIGHUP",
            "SIGTERM",
            "\\fB-V\\fR",
        ] {
            let found = page.contains(needle) || page.contains(&needle.replace("\\-", "-"));
            assert!(found, "pgtier(1) lacks {needle}");
        }
        assert!(page.contains(".SH \"SIGNALS\"") || page.contains("SIGUSR1"));
    }

    #[test]
    fn markdown_becomes_roff() {
        let roff = roff_from_markdown(
            "## A `b`\n\nText with **bold** and [a link](x.md).\n.dot line\n\n\
             - one\n  two\n- three\n\nAfter.\n\n```\ncode \\ here\n```\n\n\
             | key | default | meaning |\n| --- | --- | --- |\n| `k` | `1` | a \\| b |\n",
        );
        assert_eq!(
            roff,
            ".SH \"A \\fBB\\fR\"\n.PP\nText with \\fBbold\\fR and a link.\n\\&.dot line\n\
             .RS 2\n.IP \\(bu 2\none\ntwo\n.IP \\(bu 2\nthree\n.RE\n.PP\nAfter.\n\
             .RS 4\n.nf\ncode \\e here\n.fi\n.RE\n\
             .TP\n\\fBk\\fR\ndefault: \\fB1\\fR\n.br\na | b\n"
        );
    }

    #[test]
    fn a_section_ends_at_the_next_heading_of_its_level() {
        let text = "# T\n## A\na\n### A1\nb\n```\n# not a heading\n```\n## B\nc\n";
        assert_eq!(
            section(text, "## A"),
            Some("a\n### A1\nb\n```\n# not a heading\n```\n")
        );
        assert_eq!(
            section(text, "### A1"),
            Some("b\n```\n# not a heading\n```\n")
        );
        assert_eq!(section(text, "## C"), None);
    }
}
