//! The names the read-only classifier knows: built-in functions allowed on a replica, and the
//! SQL keywords that may stand before a `(` without being a function call.
//!
//! Every list is sorted and lower case (a test checks it) and searched with a binary search
//! of the word folded to lower case in a stack buffer, as PostgreSQL folds unquoted names.

/// Built-in functions that write nothing, take no lock, assign no transaction id, touch no
/// session state and give the same answer on a hot standby as on the primary (given the same
/// data and settings): arithmetic, strings, dates, arrays, JSON, ranges, text search,
/// aggregates and window functions. Called unqualified, they resolve to `pg_catalog` (searched first unless a
/// search_path names it later: see the module doc of `read_only`). Deliberately absent:
/// sequence functions, `txid_*`/`pg_current_*` (recovery errors on a standby), advisory
/// locks, `set_config`/`setseed` (session state), `pg_notify`, `current_setting` and
/// `pg_is_in_recovery` (they tell a standby from the primary), large objects, `dblink`.
const FUNCTIONS: &[&[u8]] = &[
    b"abs",
    b"acos",
    b"age",
    b"array_agg",
    b"array_append",
    b"array_cat",
    b"array_dims",
    b"array_fill",
    b"array_length",
    b"array_lower",
    b"array_ndims",
    b"array_position",
    b"array_positions",
    b"array_prepend",
    b"array_remove",
    b"array_replace",
    b"array_to_json",
    b"array_to_string",
    b"array_upper",
    b"ascii",
    b"asin",
    b"atan",
    b"atan2",
    b"avg",
    b"bit_and",
    b"bit_length",
    b"bit_or",
    b"bool_and",
    b"bool_or",
    b"btrim",
    b"cardinality",
    b"cbrt",
    b"ceil",
    b"ceiling",
    b"char_length",
    b"character_length",
    b"chr",
    b"clock_timestamp",
    b"concat",
    b"concat_ws",
    b"corr",
    b"cos",
    b"count",
    b"covar_pop",
    b"covar_samp",
    b"cume_dist",
    b"current_database",
    b"current_schema",
    b"current_schemas",
    b"current_time",
    b"current_timestamp",
    b"date_bin",
    b"date_part",
    b"date_trunc",
    b"daterange",
    b"decode",
    b"degrees",
    b"dense_rank",
    b"div",
    b"encode",
    b"every",
    b"exp",
    b"factorial",
    b"first_value",
    b"floor",
    b"format",
    b"gcd",
    b"gen_random_uuid",
    b"generate_series",
    b"generate_subscripts",
    b"initcap",
    b"int4range",
    b"int8range",
    b"isempty",
    b"isfinite",
    b"json_agg",
    b"json_array_elements",
    b"json_array_elements_text",
    b"json_array_length",
    b"json_build_array",
    b"json_build_object",
    b"json_each",
    b"json_each_text",
    b"json_extract_path",
    b"json_extract_path_text",
    b"json_object",
    b"json_object_agg",
    b"json_object_keys",
    b"json_populate_record",
    b"json_populate_recordset",
    b"json_strip_nulls",
    b"json_to_record",
    b"json_to_recordset",
    b"json_typeof",
    b"jsonb_agg",
    b"jsonb_array_elements",
    b"jsonb_array_elements_text",
    b"jsonb_array_length",
    b"jsonb_build_array",
    b"jsonb_build_object",
    b"jsonb_each",
    b"jsonb_each_text",
    b"jsonb_extract_path",
    b"jsonb_extract_path_text",
    b"jsonb_insert",
    b"jsonb_object",
    b"jsonb_object_agg",
    b"jsonb_object_keys",
    b"jsonb_path_exists",
    b"jsonb_path_match",
    b"jsonb_path_query",
    b"jsonb_path_query_array",
    b"jsonb_path_query_first",
    b"jsonb_populate_record",
    b"jsonb_populate_recordset",
    b"jsonb_pretty",
    b"jsonb_set",
    b"jsonb_strip_nulls",
    b"jsonb_to_record",
    b"jsonb_to_recordset",
    b"jsonb_typeof",
    b"justify_days",
    b"justify_hours",
    b"justify_interval",
    b"lag",
    b"last_value",
    b"lcm",
    b"lead",
    b"left",
    b"length",
    b"ln",
    b"localtime",
    b"localtimestamp",
    b"log",
    b"log10",
    b"lower",
    b"lpad",
    b"ltrim",
    b"make_date",
    b"make_interval",
    b"make_time",
    b"make_timestamp",
    b"make_timestamptz",
    b"max",
    b"md5",
    b"min",
    b"mod",
    b"mode",
    b"now",
    b"nth_value",
    b"ntile",
    b"num_nonnulls",
    b"num_nulls",
    b"numrange",
    b"octet_length",
    b"percent_rank",
    b"percentile_cont",
    b"percentile_disc",
    b"pg_sleep",
    b"pg_typeof",
    b"phraseto_tsquery",
    b"pi",
    b"plainto_tsquery",
    b"pow",
    b"power",
    b"quote_ident",
    b"quote_literal",
    b"quote_nullable",
    b"radians",
    b"random",
    b"rank",
    b"regexp_count",
    b"regexp_instr",
    b"regexp_like",
    b"regexp_match",
    b"regexp_matches",
    b"regexp_replace",
    b"regexp_split_to_array",
    b"regexp_split_to_table",
    b"regexp_substr",
    b"repeat",
    b"replace",
    b"reverse",
    b"right",
    b"round",
    b"row_number",
    b"row_to_json",
    b"rpad",
    b"rtrim",
    b"sign",
    b"sin",
    b"split_part",
    b"sqrt",
    b"starts_with",
    b"statement_timestamp",
    b"stddev",
    b"stddev_pop",
    b"stddev_samp",
    b"string_agg",
    b"string_to_array",
    b"string_to_table",
    b"strpos",
    b"substr",
    b"sum",
    b"tan",
    b"timeofday",
    b"to_char",
    b"to_date",
    b"to_hex",
    b"to_json",
    b"to_jsonb",
    b"to_number",
    b"to_timestamp",
    b"to_tsquery",
    b"to_tsvector",
    b"transaction_timestamp",
    b"translate",
    b"trunc",
    b"ts_headline",
    b"ts_rank",
    b"ts_rank_cd",
    b"tsrange",
    b"tstzrange",
    b"unnest",
    b"upper",
    b"var_pop",
    b"var_samp",
    b"variance",
    b"version",
    b"websearch_to_tsquery",
    b"width_bucket",
];

/// Keywords that PostgreSQL's grammar lets stand before a `(` without calling anything: the
/// `(` opens a subquery, a list, an expression or a clause; or the keyword is a special form
/// the grammar (not the catalog) defines, like `CAST`, `COALESCE` or `SUBSTRING`. Type names
/// whose `(` holds a type modifier (`numeric(10,2)`, `varchar(5)`) are here too. Only
/// reserved and column-name keywords are listed: those can never be a function's name when
/// unquoted. Unreserved and type-function-name keywords (`BY`, `JOIN`, `OVER`, `FILTER`,
/// `LIKE`, `CUBE`...) can name a user's function, so they are told apart by the token before
/// them (see `query.rs`) or not at all.
const CONSTRUCTS: &[&[u8]] = &[
    b"all",
    b"and",
    b"any",
    b"array",
    b"as",
    b"between",
    b"bit",
    b"case",
    b"cast",
    b"char",
    b"character",
    b"coalesce",
    b"dec",
    b"decimal",
    b"distinct",
    b"else",
    b"except",
    b"exists",
    b"extract",
    b"float",
    b"from",
    b"greatest",
    b"group",
    b"grouping",
    b"having",
    b"in",
    b"intersect",
    b"interval",
    b"lateral",
    b"least",
    b"limit",
    b"nchar",
    b"not",
    b"nullif",
    b"numeric",
    b"offset",
    b"on",
    b"only",
    b"or",
    b"overlay",
    b"position",
    b"row",
    b"select",
    b"some",
    b"substring",
    b"symmetric",
    b"then",
    b"time",
    b"timestamp",
    b"to",
    b"trim",
    b"union",
    b"using",
    b"values",
    b"varchar",
    b"when",
    b"where",
];

/// Words that make any query a write wherever they stand unquoted: data-modifying statements
/// (also inside `WITH` and `COPY (...)`), `FOR UPDATE` / `FOR NO KEY UPDATE`, and
/// `SELECT ... INTO`, which creates a table. They may also be column names (`update` is not
/// reserved); such a query goes to the primary, which is only a lost opportunity.
const WRITE_WORDS: &[&[u8]] = &[b"delete", b"insert", b"into", b"merge", b"update"];

/// Words that lock rows after `FOR`: `FOR SHARE`, `FOR KEY SHARE`, `FOR NO KEY UPDATE`,
/// `FOR UPDATE`.
const LOCKING_AFTER_FOR: &[&[u8]] = &[b"key", b"no", b"share", b"update"];

/// The longest name in any list, plus one so that a longer word never folds to a listed one.
const FOLD_CAP: usize = 32;

/// `word` in lower case, in `buf`; `None` if it is longer than any listed name.
fn fold<'b>(word: &[u8], buf: &'b mut [u8; FOLD_CAP]) -> Option<&'b [u8]> {
    let folded = buf.get_mut(..word.len())?;
    folded.copy_from_slice(word);
    folded.make_ascii_lowercase();
    Some(folded)
}

fn listed(list: &[&[u8]], word: &[u8]) -> bool {
    let mut buf = [0; FOLD_CAP];
    fold(word, &mut buf).is_some_and(|w| list.binary_search(&w).is_ok())
}

/// An allow-listed built-in function.
pub(super) fn is_known_function(word: &[u8]) -> bool {
    listed(FUNCTIONS, word)
}

/// A keyword whose `(` is not a call.
pub(super) fn is_construct(word: &[u8]) -> bool {
    listed(CONSTRUCTS, word)
}

/// A word that makes a query a write.
pub(super) fn is_write_word(word: &[u8]) -> bool {
    listed(WRITE_WORDS, word)
}

/// A word that, after `FOR`, locks rows.
pub(super) fn is_locking_after_for(word: &[u8]) -> bool {
    listed(LOCKING_AFTER_FOR, word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_lower_case_and_short() {
        for list in [FUNCTIONS, CONSTRUCTS, WRITE_WORDS, LOCKING_AFTER_FOR] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
            for name in list {
                assert!(name.len() < FOLD_CAP);
                assert!(!name.iter().any(u8::is_ascii_uppercase));
            }
        }
        for name in FUNCTIONS {
            assert!(!CONSTRUCTS.contains(name) && !WRITE_WORDS.contains(name));
        }
    }

    #[test]
    fn lookups_fold_case() {
        assert!(is_known_function(b"LoWeR"));
        assert!(is_construct(b"EXISTS"));
        assert!(is_write_word(b"Insert"));
        assert!(!is_known_function(b"nextval"));
        assert!(!is_known_function(&[b'a'; 100]));
        assert!(!is_known_function(b""));
    }
}
