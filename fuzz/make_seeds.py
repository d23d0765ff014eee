#!/usr/bin/env python3
"""Writes the committed seed corpus (fuzz/corpus/<target>/seed-*). Re-run after changing the
fixtures in wire/tests/fixtures or the fixed parameters in the fuzz targets."""
import base64, hashlib, hmac, os, struct

here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(here, "..", "wire", "tests", "fixtures")


def write(target, name, data):
    with open(os.path.join(here, "corpus", target, "seed-" + name), "wb") as f:
        f.write(data)


def msg(code, body):
    return code + struct.pack(">I", len(body) + 4) + body


def startup(params, version=196608):
    body = struct.pack(">I", version) + b"".join(k + b"\0" + v + b"\0" for k, v in params) + b"\0"
    return struct.pack(">I", len(body) + 4) + body


backend = open(os.path.join(fixtures, "pg15_backend.bin"), "rb").read()
frontend = open(os.path.join(fixtures, "pg15_frontend.bin"), "rb").read()
startup_len = struct.unpack(">I", frontend[:4])[0]

# frame_decode: first byte selects the stop code for scan_run.
write("frame_decode", "pg15-backend", b"Z" + backend)
write("frame_decode", "pg15-frontend", b"S" + frontend[startup_len:])
write("frame_decode", "datarows", b"Z" + msg(b"D", b"\0\x02\0\0\0\x011\xff\xff\xff\xff") * 3 + msg(b"Z", b"I"))

# startup_packet
write("startup_packet", "pg15-startup", frontend[:startup_len])
write("startup_packet", "ssl-then-startup", struct.pack(">II", 8, 80877103) + startup([(b"user", b"alice"), (b"options", b"-c pgtier.class=premium --work-mem=4MB -c a\\ b=c")]))
write("startup_packet", "gssenc", struct.pack(">II", 8, 80877104))
write("startup_packet", "cancel", struct.pack(">IIII", 16, 80877102, 42, 7))
write("startup_packet", "v3.2-cancel-long-key", struct.pack(">III", 12 + 32, 80877102, 42) + bytes(range(32)))

# SCRAM primitives
def H(b): return hashlib.sha256(b).digest()
def HMAC(k, b): return hmac.new(k, b, hashlib.sha256).digest()
def xor(a, b): return bytes(x ^ y for x, y in zip(a, b))

salt = b"fuzz-salt-16byte"
salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 1)
client_key = HMAC(salted, b"Client Key")
server_key = HMAC(salted, b"Server Key")
stored_key = H(client_key)

# scram_server: initial-response body, 0xff, response body (server nonce "fuzzservernonce").
cnonce = "clientnonce"
nonce = cnonce + "fuzzservernonce"
server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i=1"
without_proof = f"c=biws,r={nonce}"
auth = f"n=,r={cnonce},{server_first},{without_proof}".encode()
proof = xor(client_key, HMAC(stored_key, auth))
client_first = f"n,,n=,r={cnonce}".encode()
initial = b"SCRAM-SHA-256\0" + struct.pack(">I", len(client_first)) + client_first
final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
write("scram_server", "valid-exchange", initial + b"\xff" + final)
y_first = f"y,,n=,r={cnonce}".encode()
# 'y' is echoed as c=eSws, which changes the AuthMessage and so the proof.
y_without_proof = f"c=eSws,r={nonce}"
y_auth = f"n=,r={cnonce},{server_first},{y_without_proof}".encode()
y_proof = xor(client_key, HMAC(stored_key, y_auth))
y_final = f"{y_without_proof},p={base64.b64encode(y_proof).decode()}".encode()
write("scram_server", "flag-y", b"SCRAM-SHA-256\0" + struct.pack(">I", len(y_first)) + y_first + b"\xff" + y_final)
# Without binding data the 'y' exchange above is accepted, with it it is a downgrade.
# SCRAM-SHA-256-PLUS bound to the fuzz target's BINDING (32 bytes of 0x42).
plus_first = f"p=tls-server-end-point,,n=,r={cnonce}".encode()
plus_cbind = base64.b64encode(b"p=tls-server-end-point,," + bytes([0x42] * 32)).decode()
plus_without_proof = f"c={plus_cbind},r={nonce}"
plus_auth = f"n=,r={cnonce},{server_first},{plus_without_proof}".encode()
plus_proof = xor(client_key, HMAC(stored_key, plus_auth))
plus_final = f"{plus_without_proof},p={base64.b64encode(plus_proof).decode()}".encode()
write("scram_server", "plus-exchange", b"SCRAM-SHA-256-PLUS\0" + struct.pack(">I", len(plus_first)) + plus_first + b"\xff" + plus_final)

# client_auth: server frames for a full SCRAM login (client nonce = base64 of 18 bytes of 7).
cn = base64.b64encode(bytes([7] * 18)).decode()
sn = cn + "srv"
sfirst = f"r={sn},s={base64.b64encode(salt).decode()},i=1"
cauth = f"n=,r={cn},{sfirst},c=biws,r={sn}".encode()
sig = HMAC(server_key, cauth)
frames = (
    msg(b"R", struct.pack(">I", 10) + b"SCRAM-SHA-256\0\0")
    + msg(b"R", struct.pack(">I", 11) + sfirst.encode())
    + msg(b"R", struct.pack(">I", 12) + b"v=" + base64.b64encode(sig))
    + msg(b"R", struct.pack(">I", 0))
)
write("client_auth", "scram-login", frames)
write("client_auth", "md5-login", msg(b"R", struct.pack(">I", 5) + b"salt") + msg(b"R", struct.pack(">I", 0)))
write("client_auth", "cleartext-login", msg(b"R", struct.pack(">I", 3)) + msg(b"R", struct.pack(">I", 0)))

# session_state: a selector byte (a space: cut at 32, chunks of 5, standard_conforming_strings
# on), then plain SQL (a Parse body for the last one: name, SQL, parameter types).
session_state = {
    "set-listen": b" SET work_mem = '1MB'; LISTEN chan; set local x = 1",
    "tracked": b" SeT TimeZone = 'UTC'; SET NAMES 'UTF8'; SET TIME ZONE LOCAL; SET \"DateStyle\" TO ISO",
    "set-forms": b" SET SESSION AUTHORIZATION r; SET local.x = 1; SET TRANSACTION READ ONLY; SET CONSTRAINTS ALL DEFERRED",
    "temp": b" create temporary table t(x int); select * into temp u from t; CREATE TABLE pg_temp.v ()",
    "advisory-cursor": b" SELECT pg_advisory_lock(1), pg_advisory_xact_lock(2); DECLARE c CURSOR WITH HOLD FOR SELECT 1",
    "clears": b" RESET ALL; DISCARD ALL; UNLISTEN *; DEALLOCATE PREPARE ALL; CLOSE ALL; SELECT pg_advisory_unlock_all()",
    "lexing": b" SELECT E'\\'', $tag$ ; SET x $tag$, $$a$$, $1, \"a\"\"b\", U&\"x\", B'01' /* /* */ SET */ -- SET\n; PREPARE p AS SELECT 1",
    "continuation": b" SELECT E'a'\n'\\''; SET work_mem = 1; SELECT '''' \0 LISTEN after the NUL",
    "parse-named": b" s1\0SELECT set_config('a.b', '1', false)\0\0\x01\0\0\0\x17",
}
for name, data in session_state.items():
    write("session_state", name, data)

# read_only: a selector byte (a space: standard_conforming_strings on), then a text.
read_only = {
    "pgbench": b" SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
    "functions": b" SELECT count(*), lower(b), x::numeric(10,2), CAST(a AS varchar(3)) FROM t WHERE a IN (SELECT 1) AND nextval('s') > 0",
    "with": b" WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r), x AS NOT MATERIALIZED (SELECT 1) SELECT * FROM r, x FOR UPDATE",
    "window": b" SELECT row_number() OVER (ORDER BY a), count(*) FILTER (WHERE a > 0) FROM unnest(ARRAY[1]) u(a) GROUP BY ROLLUP (a)",
    "transaction": b" BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION READ ONLY; SAVEPOINT a; SELECT 1; COMMIT AND CHAIN; ROLLBACK",
    "utility": b" SHOW work_mem; EXPLAIN (COSTS OFF) TABLE t; COPY (VALUES (1)) TO STDOUT WITH (FORMAT csv)",
    "lexing": b" SELECT E'\\'', $tag$ ; INSERT $tag$, $$a$$, $1, \"a\"\"b\", B'01', U&'x' /* /* */ UPDATE */ -- DELETE\n;",
    "scs-off": b"\x80SELECT 'a\\'; INSERT INTO t VALUES (1); --'",
}
os.makedirs(os.path.join(here, "corpus", "read_only"), exist_ok=True)
for name, data in read_only.items():
    write("read_only", name, data)
