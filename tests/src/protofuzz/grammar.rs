//! The generator: client programs drawn from a grammar of what drivers send, from a seed.
//!
//! Client `i` owns schema `fz{i}` (tables `t` with a primary key and `c` for COPY, sequence
//! `q`), advisory lock keys `i * 1000 + k` and the LISTEN channel `ch{i}`, so what one client
//! sees never depends on how the clients interleave. Nothing a program runs reads a clock, a
//! pid or anything else two runs cannot share.
//!
//! A program is a list of units. Each unit sends what a driver would send for one thing
//! (a query, a pipeline, a COPY, a cancel, a hang-up...) and waits as that driver would,
//! counting the ReadyForQuery messages it is owed: one per Query and one per Sync (a Sync
//! inside COPY FROM STDIN of an extended Execute owes nothing). A unit whose count is wrong
//! makes the direct run hang, which the runner reports as an invalid program, never as a
//! divergence.

use super::program::{ClientProgram, Msg, Op, Program};

/// SplitMix64: small, seedable, and the same everywhere.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_f00d_cafe_beef)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// How big programs get.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub max_clients: usize,
    pub max_units: usize,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            max_clients: 4,
            max_units: 16,
        }
    }
}

/// The program of `seed`.
pub fn generate(seed: u64, shape: Shape) -> Program {
    let mut rng = Rng::new(seed);
    let clients = 1 + rng.below(shape.max_clients.max(1));
    let mut program = Program::default();
    for index in 0..clients {
        let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(index as u64 + 1));
        let units = 1 + rng.below(shape.max_units.max(1));
        let mut client = ClientGen::new(index, rng);
        for _ in 0..units {
            client.unit();
        }
        program.clients.push(ClientProgram { ops: client.ops });
    }
    program
}

/// The SQL that creates client `client`'s schema when it is missing and puts its contents
/// back to the starting state. The objects are kept from run to run, so their OIDs (which
/// RowDescription shows) are the same for the direct run and the one through pgtier.
pub fn setup_sql(client: usize) -> String {
    let s = format!("fz{client}");
    format!(
        "CREATE SCHEMA IF NOT EXISTS {s}; \
         CREATE TABLE IF NOT EXISTS {s}.t (id int PRIMARY KEY, v text); \
         CREATE TABLE IF NOT EXISTS {s}.c (a int, b text); \
         CREATE SEQUENCE IF NOT EXISTS {s}.q; \
         CREATE OR REPLACE FUNCTION {s}.f(int) RETURNS int LANGUAGE sql STABLE AS 'SELECT $1 * 2'; \
         TRUNCATE {s}.t, {s}.c; \
         INSERT INTO {s}.t VALUES (1, 'a'), (2, 'b'), (3, 'c'); \
         ALTER SEQUENCE {s}.q RESTART;"
    )
}

struct ClientGen {
    /// Schema name.
    s: String,
    index: usize,
    rng: Rng,
    ops: Vec<Op>,
    /// Statements made by `prepare_with_flush` and `extended_copy_in` so far (their names
    /// are unique).
    prepared: usize,
}

impl ClientGen {
    fn new(index: usize, rng: Rng) -> ClientGen {
        ClientGen {
            s: format!("fz{index}"),
            index,
            rng,
            ops: Vec::new(),
            prepared: 0,
        }
    }

    fn send(&mut self, msgs: Vec<Msg>) {
        self.ops.push(Op::Send(msgs));
    }

    fn ready(&mut self, count: usize) {
        if count > 0 {
            self.ops.push(Op::Ready(count));
        }
    }

    /// Sends and waits for one ReadyForQuery per Query and Sync sent.
    fn exchange(&mut self, msgs: Vec<Msg>) {
        let owed = msgs
            .iter()
            .filter(|msg| matches!(msg, Msg::Query(_) | Msg::Sync))
            .count();
        self.send(msgs);
        self.ready(owed);
    }

    fn unit(&mut self) {
        match self.rng.below(100) {
            0..=29 => {
                let sql = self.statement();
                self.exchange(vec![Msg::Query(sql)]);
            }
            30..=37 => {
                let count = 2 + self.rng.below(3);
                let parts: Vec<String> = (0..count).map(|_| self.statement()).collect();
                self.exchange(vec![Msg::Query(parts.join("; "))]);
            }
            38..=57 => self.pipeline(),
            58..=63 => self.prepare_with_flush(),
            64..=71 => self.copy_in(),
            72..=74 => self.extended_copy_in(),
            75..=78 => self.copy_out(),
            79..=83 => self.transaction(),
            84..=86 => self.cancel(),
            87..=88 => self.statement_timeout(),
            89..=93 => self.terminate_midway(),
            94..=96 => self.cursor(),
            _ => self.pipelined_queries(),
        }
    }

    /// One SQL statement of the grammar.
    fn statement(&mut self) -> String {
        let s = self.s.clone();
        let i = self.index;
        let id = 1 + self.rng.below(8);
        let lock = i * 1000 + self.rng.below(3);
        let choices: [&dyn Fn() -> String; 48] = [
            &|| format!("SELECT id, v FROM {s}.t ORDER BY id"),
            &|| format!("SELECT count(*) FROM {s}.t"),
            &|| format!("SELECT v FROM {s}.t WHERE id = {id}"),
            &|| format!("INSERT INTO {s}.t VALUES ({id}, 'n{id}')"),
            &|| format!("UPDATE {s}.t SET v = v || 'u' WHERE id = {id}"),
            &|| format!("DELETE FROM {s}.t WHERE id = {id}"),
            &|| format!("SELECT {s}.f({id})"),
            &|| "SELECT 1/0".to_string(),
            &|| "SELEC 1".to_string(),
            &|| format!("SELECT * FROM {s}.missing"),
            &|| format!("SELECT nextval('{s}.q')"),
            &|| format!("SELECT pg_advisory_lock({lock})"),
            &|| format!("SELECT pg_advisory_unlock({lock})"),
            &|| format!("SELECT pg_advisory_xact_lock({lock})"),
            &|| format!("LISTEN ch{i}"),
            &|| format!("UNLISTEN ch{i}"),
            &|| "UNLISTEN *".to_string(),
            &|| format!("NOTIFY ch{i}, 'p{id}'"),
            &|| format!("SELECT pg_notify('ch{i}', 'q{id}')"),
            &|| "CREATE TEMP TABLE tt (a int)".to_string(),
            &|| format!("INSERT INTO tt VALUES ({id})"),
            &|| "SELECT a FROM tt ORDER BY a".to_string(),
            &|| "DROP TABLE IF EXISTS tt".to_string(),
            &|| format!("SET application_name = 'fz{i}_{id}'"),
            &|| "SET datestyle = 'German'".to_string(),
            &|| format!("SET search_path = {s}, public"),
            &|| "RESET ALL".to_string(),
            &|| "RESET search_path".to_string(),
            &|| "SHOW application_name".to_string(),
            &|| "SELECT current_setting('datestyle'), current_setting('search_path')".to_string(),
            &|| "SELECT id FROM t ORDER BY id".to_string(),
            &|| "DISCARD ALL".to_string(),
            &|| "DEALLOCATE ALL".to_string(),
            &|| format!("PREPARE ps{id} AS SELECT $1::int + {id}"),
            &|| format!("EXECUTE ps{id}({id})"),
            &|| format!("DEALLOCATE ps{id}"),
            &|| "BEGIN".to_string(),
            &|| "COMMIT".to_string(),
            &|| "ROLLBACK".to_string(),
            &|| "SAVEPOINT sp".to_string(),
            &|| "ROLLBACK TO SAVEPOINT sp".to_string(),
            &|| "RELEASE SAVEPOINT sp".to_string(),
            &|| "SET LOCAL statement_timeout = '5s'".to_string(),
            &|| "SELECT pg_sleep(0.005)".to_string(),
            &|| String::new(),
            &|| format!("SELECT '{id}'::int, NULL::text, 'x y'"),
            &|| "SHOW transaction_isolation".to_string(),
            &|| "BEGIN ISOLATION LEVEL REPEATABLE READ".to_string(),
        ];
        let pick = self.rng.below(choices.len());
        choices[pick]()
    }

    /// Statement texts for Parse, with how many `$n` parameters they take.
    fn parse_text(&mut self) -> (String, usize) {
        let s = self.s.clone();
        let i = self.index;
        let options: Vec<(String, usize)> = vec![
            ("SELECT $1::int + 1".to_string(), 1),
            (
                format!("SELECT id, v FROM {s}.t WHERE id > $1::int ORDER BY id"),
                1,
            ),
            (format!("INSERT INTO {s}.t VALUES ($1::int, $2)"), 2),
            (format!("UPDATE {s}.t SET v = $2 WHERE id = $1::int"), 2),
            ("SELECT 1/$1::int".to_string(), 1),
            (format!("SELECT id FROM {s}.t ORDER BY id"), 0),
            ("SELECT generate_series(1, 5)".to_string(), 0),
            ("BEGIN".to_string(), 0),
            ("COMMIT".to_string(), 0),
            (format!("SELECT {s}.f($1::int)"), 1),
            ("SELEC $1".to_string(), 1),
            (format!("LISTEN ch{i}"), 0),
            (format!("SET search_path = {s}"), 0),
            ("DEALLOCATE ALL".to_string(), 0),
            (format!("SELECT pg_advisory_xact_lock({})", i * 1000 + 7), 0),
            (format!("SELECT nextval('{s}.q')"), 0),
            (String::new(), 0),
        ];
        self.rng.pick(&options).clone()
    }

    fn param(&mut self) -> Option<String> {
        let values = ["1", "2", "0", "7", "x"];
        if self.rng.chance(5) {
            None
        } else {
            Some(self.rng.pick(&values).to_string())
        }
    }

    fn statement_name(&mut self) -> String {
        self.rng.pick(&["", "s1", "s2", "s3"]).to_string()
    }

    fn portal_name(&mut self) -> String {
        self.rng.pick(&["", "", "p1", "p2"]).to_string()
    }

    /// Parse / Bind / Describe / Execute / Close / Flush / Sync in driver-like orders,
    /// named and unnamed, sometimes several segments in one send.
    fn pipeline(&mut self) {
        let segments = 1 + self.rng.below(3);
        let mut msgs = Vec::new();
        for _ in 0..segments {
            let parts = 1 + self.rng.below(4);
            for _ in 0..parts {
                match self.rng.below(10) {
                    0..=4 => {
                        // Parse (maybe), Bind, Describe portal (maybe), Execute.
                        let name = self.statement_name();
                        let (sql, params) = self.parse_text();
                        if self.rng.chance(70) || name.is_empty() {
                            msgs.push(Msg::Parse {
                                name: name.clone(),
                                sql,
                            });
                        }
                        let portal = self.portal_name();
                        let count = if self.rng.chance(90) {
                            params
                        } else {
                            params + 1
                        };
                        let values = (0..count).map(|_| self.param()).collect();
                        msgs.push(Msg::Bind {
                            portal: portal.clone(),
                            statement: name,
                            params: values,
                        });
                        if self.rng.chance(50) {
                            msgs.push(Msg::DescribePortal(portal.clone()));
                        }
                        let max_rows = if self.rng.chance(25) {
                            1 + self.rng.below(2) as u32
                        } else {
                            0
                        };
                        msgs.push(Msg::Execute {
                            portal: portal.clone(),
                            max_rows,
                        });
                        if max_rows > 0 && self.rng.chance(50) {
                            msgs.push(Msg::Execute {
                                portal: portal.clone(),
                                max_rows: 0,
                            });
                        }
                        if !portal.is_empty() && self.rng.chance(40) {
                            msgs.push(Msg::ClosePortal(portal));
                        }
                    }
                    5 => {
                        let name = self.statement_name();
                        let (sql, _) = self.parse_text();
                        msgs.push(Msg::Parse {
                            name: name.clone(),
                            sql,
                        });
                        msgs.push(Msg::DescribeStatement(name));
                    }
                    6 => {
                        let name = self.statement_name();
                        msgs.push(Msg::CloseStatement(name));
                    }
                    7 => {
                        let name = self.statement_name();
                        msgs.push(Msg::DescribeStatement(name));
                    }
                    8 => msgs.push(Msg::Flush),
                    _ => {
                        let sql = self.statement();
                        let mut run = unnamed_run(sql);
                        run.pop();
                        msgs.extend(run);
                    }
                }
            }
            msgs.push(Msg::Sync);
        }
        if self.rng.chance(15) {
            // The last segment without its Sync: the driver waits for a Flush's answers,
            // then syncs later.
            msgs.pop();
            msgs.push(Msg::Flush);
            self.exchange(msgs);
            self.ops.push(Op::Settle(20));
            self.exchange(vec![Msg::Sync]);
        } else {
            self.exchange(msgs);
        }
    }

    /// asyncpg's prepare: Parse, Describe statement, Flush, read the answers; then
    /// something else on the same connection with no Sync in between.
    fn prepare_with_flush(&mut self) {
        // A unique name and a text that parses, as a driver's statement cache makes: after
        // an error the server would skip everything up to a Sync, the Query too.
        self.prepared += 1;
        let name = format!("__fz_stmt_{}__", self.prepared);
        let (mut sql, mut params) = self.parse_text();
        while sql.starts_with("SELEC ") {
            (sql, params) = self.parse_text();
        }
        // Nor in a failed transaction block, where the Parse fails too.
        self.exchange(vec![Msg::Query("ROLLBACK".to_string())]);
        self.send(vec![
            Msg::Parse {
                name: name.clone(),
                sql,
            },
            Msg::DescribeStatement(name.clone()),
            Msg::Flush,
        ]);
        self.ops.push(Op::Settle(20));
        match self.rng.below(4) {
            0 => {
                let values = (0..params).map(|_| self.param()).collect();
                self.exchange(vec![
                    Msg::Bind {
                        portal: String::new(),
                        statement: name,
                        params: values,
                    },
                    Msg::Execute {
                        portal: String::new(),
                        max_rows: 0,
                    },
                    Msg::Sync,
                ]);
            }
            1 => self.copy_in(),
            2 => {
                let sql = self.statement();
                self.exchange(vec![Msg::Query(sql)]);
            }
            _ => self.exchange(vec![Msg::Sync]),
        }
    }

    fn copy_rows(&mut self, format: &str) -> Vec<Msg> {
        let rows = self.rng.below(4);
        let mut msgs = Vec::new();
        if format == "binary" {
            let mut data = b"PGCOPY\n\xff\r\n\0".to_vec();
            data.extend_from_slice(&0i32.to_be_bytes());
            data.extend_from_slice(&0i32.to_be_bytes());
            for row in 0..rows {
                data.extend_from_slice(&2i16.to_be_bytes());
                data.extend_from_slice(&4i32.to_be_bytes());
                data.extend_from_slice(&(row as i32).to_be_bytes());
                if self.rng.chance(10) {
                    // A bad field length: an error in the middle of the copy.
                    data.extend_from_slice(&100i32.to_be_bytes());
                    data.extend_from_slice(b"xy");
                } else {
                    data.extend_from_slice(&2i32.to_be_bytes());
                    data.extend_from_slice(b"xy");
                }
            }
            data.extend_from_slice(&(-1i16).to_be_bytes());
            msgs.push(Msg::CopyData(data));
            return msgs;
        }
        let separator = if format == "csv" { "," } else { "\t" };
        for row in 0..rows {
            let line = if self.rng.chance(10) {
                format!("notanumber{separator}bad\n")
            } else {
                format!("{row}{separator}r{row}\n")
            };
            msgs.push(Msg::CopyData(line.into_bytes()));
        }
        msgs
    }

    /// COPY FROM STDIN by a simple Query: data, then CopyDone or CopyFail; all pipelined,
    /// or after a pause in which CopyInResponse arrives (unless the COPY failed: in a failed
    /// transaction block, a wait for CopyInResponse itself would never end).
    fn copy_in(&mut self) {
        let s = self.s.clone();
        let format = *self.rng.pick(&["text", "csv", "binary"]);
        let table = if self.rng.chance(10) { "missing" } else { "c" };
        let sql = format!("COPY {s}.{table} FROM STDIN (FORMAT {format})");
        let mut rows = self.copy_rows(format);
        let end = if self.rng.chance(15) {
            Msg::CopyFail("the client gave up".to_string())
        } else {
            Msg::CopyDone
        };
        rows.push(end);
        if self.rng.chance(50) && table == "c" {
            self.send(vec![Msg::Query(sql)]);
            self.ops.push(Op::Settle(20));
            self.send(rows);
        } else {
            let mut msgs = vec![Msg::Query(sql)];
            msgs.extend(rows);
            self.send(msgs);
        }
        self.ready(1);
    }

    /// COPY FROM STDIN by Parse/Bind/Execute: the Sync after the data owes the one
    /// ReadyForQuery.
    fn extended_copy_in(&mut self) {
        let s = self.s.clone();
        // A name of its own: a pipeline that executed a COPY statement by one of the shared
        // names (or as the unnamed statement) would leave the server waiting for data that
        // no unit sends.
        self.prepared += 1;
        let name = format!("copy{}", self.prepared);
        let mut msgs = vec![
            Msg::Parse {
                name: name.clone(),
                sql: format!("COPY {s}.c FROM STDIN"),
            },
            Msg::Bind {
                portal: String::new(),
                statement: name,
                params: Vec::new(),
            },
            Msg::Execute {
                portal: String::new(),
                max_rows: 0,
            },
        ];
        msgs.extend(self.copy_rows("text"));
        msgs.push(if self.rng.chance(15) {
            Msg::CopyFail("stop".to_string())
        } else {
            Msg::CopyDone
        });
        msgs.push(Msg::Sync);
        self.send(msgs);
        self.ready(1);
    }

    fn copy_out(&mut self) {
        let s = self.s.clone();
        let sql = match self.rng.below(4) {
            0 => format!("COPY {s}.t TO STDOUT"),
            1 => {
                format!("COPY (SELECT id, v FROM {s}.t ORDER BY id) TO STDOUT (FORMAT csv, HEADER)")
            }
            2 => format!("COPY {s}.t TO STDOUT (FORMAT binary)"),
            // An error after one row, whatever plan the server picks.
            _ => "COPY (SELECT CASE WHEN g = 2 THEN 1/0 ELSE g END FROM generate_series(1, 3) g) \
                  TO STDOUT"
                .to_string(),
        };
        if self.rng.chance(30) {
            self.exchange(unnamed_run(sql));
        } else {
            self.exchange(vec![Msg::Query(sql)]);
        }
    }

    /// A transaction block with savepoints and an error or two, each statement awaited.
    fn transaction(&mut self) {
        self.exchange(vec![Msg::Query("BEGIN".to_string())]);
        let count = 1 + self.rng.below(4);
        for _ in 0..count {
            let sql = match self.rng.below(6) {
                0 => "SAVEPOINT a".to_string(),
                1 => "ROLLBACK TO SAVEPOINT a".to_string(),
                _ => self.statement(),
            };
            self.exchange(vec![Msg::Query(sql)]);
        }
        let end = *self.rng.pick(&["COMMIT", "ROLLBACK", "COMMIT", "END"]);
        if self.rng.chance(85) {
            self.exchange(vec![Msg::Query(end.to_string())]);
        }
    }

    /// A long query cancelled from another connection, as drivers do. The query is long
    /// enough that a cancel sent 0.3 s into it reaches it even on a loaded machine.
    fn cancel(&mut self) {
        let in_block = self.rng.chance(30);
        if in_block {
            self.exchange(vec![Msg::Query("BEGIN".to_string())]);
        }
        if self.rng.chance(50) {
            self.send(vec![Msg::Query("SELECT pg_sleep(10)".to_string())]);
        } else {
            self.send(unnamed_run("SELECT pg_sleep(10)".to_string()));
        }
        self.ops.push(Op::Cancel(300));
        self.ready(1);
        if in_block {
            self.exchange(vec![Msg::Query("ROLLBACK".to_string())]);
        }
    }

    fn statement_timeout(&mut self) {
        self.exchange(vec![Msg::Query("BEGIN".to_string())]);
        self.exchange(vec![Msg::Query(
            "SET LOCAL statement_timeout = '50ms'".to_string(),
        )]);
        self.exchange(vec![Msg::Query("SELECT pg_sleep(1)".to_string())]);
        self.exchange(vec![Msg::Query("ROLLBACK".to_string())]);
    }

    /// The client hangs up in the middle of something: a transaction, a pipeline without
    /// its Sync, a COPY, session state; its next op logs in again and looks at what stayed.
    fn terminate_midway(&mut self) {
        let s = self.s.clone();
        let id = 1 + self.rng.below(8);
        match self.rng.below(5) {
            0 => {
                self.exchange(vec![Msg::Query("BEGIN".to_string())]);
                self.exchange(vec![Msg::Query(format!(
                    "INSERT INTO {s}.t VALUES ({}, 'gone')",
                    10 + id
                ))]);
            }
            1 => self.send(vec![
                Msg::Parse {
                    name: "s1".to_string(),
                    sql: "SELECT 1".to_string(),
                },
                Msg::Bind {
                    portal: "p1".to_string(),
                    statement: "s1".to_string(),
                    params: Vec::new(),
                },
            ]),
            2 => {
                // In the copy (or past its error, in a failed block) before hanging up: what
                // the client has read by then must not depend on how fast the answer came.
                self.send(vec![Msg::Query(format!("COPY {s}.c FROM STDIN"))]);
                self.ops.push(Op::Tag(b"GZ".to_vec()));
                self.send(vec![Msg::CopyData(b"5\tfive\n".to_vec())]);
            }
            3 => {
                self.exchange(vec![Msg::Query(
                    "CREATE TEMP TABLE tt (a int); SET datestyle = 'SQL'".to_string(),
                )]);
            }
            _ => {}
        }
        self.ops.push(Op::Terminate);
        let look = match self.rng.below(3) {
            0 => format!("SELECT id, v FROM {s}.t ORDER BY id"),
            1 => "SELECT current_setting('datestyle'), to_regclass('tt') IS NULL".to_string(),
            _ => format!("SELECT count(*) FROM {s}.c"),
        };
        self.exchange(vec![Msg::Query(look)]);
    }

    /// WITH HOLD cursors, which outlive their transaction.
    fn cursor(&mut self) {
        let s = self.s.clone();
        self.exchange(vec![Msg::Query(format!(
            "DECLARE cur CURSOR WITH HOLD FOR SELECT id FROM {s}.t ORDER BY id"
        ))]);
        let fetches = 1 + self.rng.below(3);
        for _ in 0..fetches {
            self.exchange(vec![Msg::Query("FETCH 1 FROM cur".to_string())]);
        }
        if self.rng.chance(70) {
            self.exchange(vec![Msg::Query("CLOSE cur".to_string())]);
        }
    }

    /// Several simple Queries in one send, answered in order.
    fn pipelined_queries(&mut self) {
        let count = 2 + self.rng.below(3);
        let msgs = (0..count).map(|_| Msg::Query(self.statement())).collect();
        self.exchange(msgs);
    }
}

/// Parse, Bind and Execute of `sql` as the unnamed statement and portal, then Sync.
fn unnamed_run(sql: String) -> Vec<Msg> {
    vec![
        Msg::Parse {
            name: String::new(),
            sql,
        },
        Msg::Bind {
            portal: String::new(),
            statement: String::new(),
            params: Vec::new(),
        },
        Msg::Execute {
            portal: String::new(),
            max_rows: 0,
        },
        Msg::Sync,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_makes_the_same_program() {
        let shape = Shape::default();
        assert_eq!(generate(7, shape), generate(7, shape));
        assert_ne!(generate(7, shape), generate(8, shape));
    }

    #[test]
    fn generated_programs_survive_their_text_form() {
        for seed in 0..200 {
            let program = generate(seed, Shape::default());
            let text = program.to_text();
            assert_eq!(Program::parse(&text).as_ref(), Ok(&program), "{text}");
        }
    }
}
