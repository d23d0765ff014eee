//! COPY after a named prepared statement, through real drivers, in both pool modes: the
//! combination that hung asyncpg in transaction mode (its statement cache makes a named
//! statement with Parse/Describe/Flush, then `copy_to_table` pipelines the COPY Query, its
//! data and CopyDone before the server has answered). psycopg 3 and psycopg2 do the same
//! with their own named statements. The byte-level cases are in tests/protofuzz-cases.

use std::process::Command;
use std::time::Duration;

use pgtier_tests::fixtures::{admin, start_proxy};
use pgtier_tests::process::run;
use pgtier_tests::shared_server::shared_server;
use pgtier_tests::{Pgtier, ProxyConfig};

const PYTHON: &str = "/usr/bin/python3";
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

/// Two workers, so the servers a client is given may come from either shard.
fn proxy(mode: &str) -> Pgtier {
    let mut config = ProxyConfig::new(shared_server().port())
        .pool_mode(mode)
        .pool_size(2);
    config.workers = 2;
    start_proxy(config)
}

fn python(script: &str) -> String {
    let out = run(Command::new(PYTHON).args(["-c", script]), SCRIPT_TIMEOUT).expect("python3");
    assert!(
        out.success(),
        "the driver script failed (it times out after {SCRIPT_TIMEOUT:?} if it hangs):\n{}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn asyncpg(proxy: &Pgtier, table: &str) {
    let script = format!(
        r#"
import asyncio, io, asyncpg
async def main():
    con = await asyncpg.connect(host='127.0.0.1', port={port}, user='postgres', database='postgres')
    ps = await con.prepare('SELECT a, i FROM {table} LIMIT 1')
    for round in range(3):
        status = await asyncio.wait_for(
            con.copy_to_table('{table}', source=io.BytesIO(b'x\t1\ny\t2\n')), 20)
        assert status == 'COPY 2', status
        status = await asyncio.wait_for(
            con.copy_records_to_table('{table}', records=[('z', 3)]), 20)
        assert status == 'COPY 1', status
        out = io.BytesIO()
        await asyncio.wait_for(con.copy_from_query('SELECT 1', output=out), 20)
        assert out.getvalue() == b'1\n', out.getvalue()
        await ps.fetch()
    print(await con.fetchval('SELECT count(*) FROM {table}'))
    await con.close()
asyncio.run(main())
"#,
        port = proxy.port()
    );
    assert_eq!(python(&script).trim(), "9");
}

fn psycopg(proxy: &Pgtier, table: &str) {
    let script = format!(
        r#"
import psycopg, psycopg2
conn = psycopg.connect(host='127.0.0.1', port={port}, user='postgres', dbname='postgres', autocommit=True)
cur = conn.cursor()
for round in range(3):
    cur.execute('SELECT a, i FROM {table} WHERE i > %s', (round,), prepare=True)
    with cur.copy('COPY {table} FROM STDIN') as copy:
        copy.write_row(('p', 4))
    cur.execute('SELECT a, i FROM {table} WHERE i > %s', (round,), prepare=True)
conn.close()
conn = psycopg2.connect(host='127.0.0.1', port={port}, user='postgres', dbname='postgres')
conn.autocommit = True
cur = conn.cursor()
cur.execute("PREPARE named AS SELECT count(*) FROM {table}")
import io
cur.copy_expert('COPY {table} FROM STDIN', io.StringIO('q\t5\n'))
cur.execute('EXECUTE named')
print(cur.fetchone()[0])
conn.close()
"#,
        port = proxy.port()
    );
    assert_eq!(python(&script).trim(), "4");
}

fn fresh_table(name: &str) -> String {
    admin(
        shared_server(),
        &format!("DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (a text, i int)"),
    );
    name.to_string()
}

#[test]
fn asyncpg_copy_after_a_named_statement_transaction_mode() {
    let proxy = proxy("transaction");
    asyncpg(&proxy, &fresh_table("copy_asyncpg_tx"));
}

#[test]
fn asyncpg_copy_after_a_named_statement_session_mode() {
    let proxy = proxy("session");
    asyncpg(&proxy, &fresh_table("copy_asyncpg_session"));
}

#[test]
fn psycopg_copy_after_named_statements_transaction_mode() {
    let proxy = proxy("transaction");
    psycopg(&proxy, &fresh_table("copy_psycopg_tx"));
}

#[test]
fn psycopg_copy_after_named_statements_session_mode() {
    let proxy = proxy("session");
    psycopg(&proxy, &fresh_table("copy_psycopg_session"));
}
