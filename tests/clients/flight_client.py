"""Arrow Flight SQL against tablegate, through ADBC (adbc-driver-flightsql)
and pyarrow, checked against what psycopg reads through pgwire from the
same server. Exits non-zero on any mismatch; prints "flight ok" at the end.

Usage:
  flight_client.py trust FLIGHT_PORT PG_PORT
  flight_client.py secure FLIGHT_PORT CERT_PEM USER PASSWORD
"""

import datetime as dt
import sys
import time
import uuid

import adbc_driver_flightsql.dbapi as flight
import adbc_driver_manager
import pandas as pd
import pyarrow as pa
import pyarrow.flight as paflight

mode = sys.argv[1]
port = int(sys.argv[2])
URI = f"grpc://127.0.0.1:{port}"
# A user name makes ADBC authenticate (the handshake hands out a bearer
# token), so the connection keeps one session: its SETs and transactions.
SESSION = {"username": "tablegate", "password": ""}


def fails(sqlstate, fn):
    """fn() must fail with a message carrying SQLSTATE `sqlstate`."""
    try:
        fn()
    except adbc_driver_manager.Error as e:
        assert f"SQLSTATE {sqlstate}" in str(e), f"expected {sqlstate}, got: {e}"
        return str(e)
    raise AssertionError(f"expected an error with SQLSTATE {sqlstate}")


def rows_of(table):
    """A pyarrow Table as tuples, uuids as uuid.UUID (as psycopg gives)."""
    out = []
    for r in table.to_pylist():
        out.append(tuple(uuid.UUID(bytes=v) if isinstance(v, bytes) and len(v) == 16 and k == "u" else v
                         for k, v in r.items()))
    return out


def pb_string(field, text):
    """A protobuf length-delimited string field (for a raw Flight SQL command)."""
    data = text.encode()
    return bytes([field << 3 | 2, len(data)]) + data


def raw_command(name, cmd):
    """A Flight SQL command sent with pyarrow.flight alone (ADBC has no call
    for some): a google.protobuf.Any holding it; its result's rows."""
    any_msg = pb_string(1, f"type.googleapis.com/arrow.flight.protocol.sql.{name}")
    any_msg += bytes([2 << 3 | 2, len(cmd)]) + cmd
    client = paflight.FlightClient(URI)
    info = client.get_flight_info(paflight.FlightDescriptor.for_command(any_msg))
    return client.do_get(info.endpoints[0].ticket).read_all().to_pylist()


def get_primary_keys(table):
    return raw_command("CommandGetPrimaryKeys", pb_string(3, table))


def trust(pg_port):
    import psycopg

    pg = psycopg.connect(host="127.0.0.1", port=pg_port, user="tablegate", dbname="tablegate",
                         autocommit=True)
    pgc = pg.cursor()
    conn = flight.connect(URI, db_kwargs=SESSION, autocommit=True)
    cur = conn.cursor()

    # Every column type, written through pgwire, read back both ways.
    cur.execute(
        "CREATE TABLE fl_types (pk text, rk bigint, i2 smallint, i4 int, i8 bigint, "
        "f8 double precision, b boolean, ts timestamptz, tsn timestamp, d date, u uuid, "
        "by bytea, t text, PRIMARY KEY (pk, rk))"
    )
    pgc.execute(
        "INSERT INTO fl_types VALUES "
        "('p', 1, -32768, 2147483647, -9223372036854775808, 1.5e300, true, "
        " '2024-02-29 12:34:56.789012+00', '1999-12-31 23:59:59.999999', '2000-02-29', "
        " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff10', 'grüße 𝄞'), "
        "('p', 2, 7, -1, 42, -0.25, false, '1970-01-01 00:00:00+00', '2038-01-19 03:14:08', "
        " '1969-07-20', '00000000-0000-0000-0000-000000000000', '\\x', ''), "
        "('q', 3, null, null, null, null, null, null, null, null, null, null, null)"
    )
    cols = "pk, rk, i2, i4, i8, f8, b, ts, tsn, d, u, by, t"
    for sql in (
        f"SELECT {cols} FROM fl_types ORDER BY pk, rk",  # native scan
        f"SELECT {cols} FROM fl_types WHERE pk = 'p' AND rk = 1",  # point lookup
        f"SELECT {cols} FROM fl_types ORDER BY i8 NULLS FIRST",  # the analytics engine
    ):
        pgc.execute(sql)
        want = pgc.fetchall()
        cur.execute(sql)
        got = rows_of(cur.fetch_arrow_table())
        assert got == want, f"{sql}\nflight: {got}\npgwire: {want}"
    cur.execute(f"SELECT {cols} FROM fl_types WHERE pk = 'p' AND rk = 1")
    schema = cur.fetch_arrow_table().schema
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC"), schema
    assert schema.field("tsn").type == pa.timestamp("us"), schema
    assert schema.field("d").type == pa.date32(), schema
    assert schema.field("i2").type == pa.int16(), schema

    # Parameters ($1, $2 as in PostgreSQL), bound by ADBC as Arrow values.
    cur.execute("SELECT i4, t FROM fl_types WHERE pk = $1 AND rk = $2", ("p", 2))
    assert cur.fetchall() == [(-1, "")]
    cur.execute("SELECT count(*) FROM fl_types WHERE rk >= $1", (2,))
    assert cur.fetchall() == [(2,)]

    # EXPLAIN teaches the same as through psql.
    cur.execute("EXPLAIN SELECT * FROM fl_types WHERE pk = 'p' AND rk = 1")
    plan = "\n".join(r[0] for r in cur.fetchall())
    assert "Class: point" in plan, plan

    # Errors carry their SQLSTATE.
    fails("42P01", lambda: cur.execute("SELECT * FROM no_such_table"))
    fails("42601", lambda: cur.execute("SELEC 1"))
    fails("23505", lambda: cur.execute("INSERT INTO fl_types (pk, rk) VALUES ('p', 1)"))
    # The session keeps its settings: the guardrail refuses a full scan.
    cur.execute("SET tablegate.allow_full_scan = off")
    fails("TG001", lambda: (cur.execute("SELECT * FROM fl_types WHERE i4 = 7"), cur.fetchall()))
    cur.execute("RESET tablegate.allow_full_scan")

    # Bulk ingest: 100,000 rows through COPY's write path, read back.
    n = 100_000
    source = pa.table({
        "tenant": [f"t{i % 100:03d}" for i in range(n)],
        "id": pa.array(range(n), pa.int64()),
        "amount": [i * 0.25 for i in range(n)],
        "at": pa.array([i * 1_000_000 for i in range(n)], pa.timestamp("us", tz="UTC")),
    })
    cur.execute("CREATE TABLE fl_sales (tenant text, id bigint, amount double precision, "
                "at timestamptz, PRIMARY KEY (tenant, id))")
    assert cur.adbc_ingest("fl_sales", source, mode="append") == n
    cur.execute("SELECT tenant, id, amount, at FROM fl_sales ORDER BY tenant, id")
    back = cur.fetch_arrow_table()
    want = source.sort_by([("tenant", "ascending"), ("id", "ascending")])
    assert back.num_rows == n and back.to_pylist() == want.to_pylist(), "ingested rows differ"
    pgc.execute("SELECT count(*), sum(id) FROM fl_sales")
    assert pgc.fetchone() == (n, n * (n - 1) // 2)
    # Ingest into an existing table without mode append is refused, and a
    # new table is created from the batches' schema.
    fails("42P07", lambda: cur.adbc_ingest("fl_sales", source.slice(0, 10), mode="create"))
    assert cur.adbc_ingest("fl_new", source.slice(0, 10), mode="create") == 10
    pgc.execute("SELECT count(*) FROM fl_new")
    assert pgc.fetchone() == (10,)
    # A bad value fails with the COPY error, naming the column.
    bad = pa.table({"tenant": ["x"], "id": ["not a number"]})
    fails("22P02", lambda: cur.adbc_ingest("fl_sales", bad, mode="append"))

    # pandas through ADBC.
    frame = pd.read_sql(
        "SELECT tenant, count(*) AS n, sum(amount) AS total FROM fl_sales "
        "WHERE tenant IN ('t000', 't001') GROUP BY tenant ORDER BY tenant", conn)
    assert list(frame["tenant"]) == ["t000", "t001"], frame
    assert list(frame["n"]) == [1000, 1000], frame
    assert frame["total"][0] == sum(i * 0.25 for i in range(0, n, 100)), frame

    # Metadata: tables, their columns, their keys, the server.
    objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    names = {t["table_name"] for c in objects for s in c["catalog_db_schemas"]
             for t in s["db_schema_tables"]}
    assert {"fl_types", "fl_sales", "fl_new"} <= names, names
    assert conn.adbc_get_table_schema("fl_sales").names == ["tenant", "id", "amount", "at", "timestamp"]
    assert conn.adbc_get_table_types() == ["TABLE"]
    keys = get_primary_keys("fl_sales")
    assert [(k["column_name"], k["key_sequence"]) for k in keys] == [("tenant", 1), ("id", 2)], keys
    assert get_primary_keys("fl_new") == []  # declared without a key
    info = conn.adbc_get_info()
    assert info["vendor_name"] == "tablegate", info
    types = [t["type_name"] for t in raw_command("CommandGetXdbcTypeInfo", b"")]
    assert "bigint" in types and "timestamp with time zone" in types and "uuid" in types, types

    # A Flight SQL transaction is one entity-group transaction.
    txn = flight.connect(URI, db_kwargs=SESSION, autocommit=False)
    tc = txn.cursor()
    tc.execute("INSERT INTO fl_types (pk, rk, t) VALUES ('tx', 1, 'a')")
    tc.execute("SELECT rk, t FROM fl_types WHERE pk = 'tx'")  # native
    assert tc.fetchall() == [(1, "a")], "a transaction reads its own writes"
    tc.execute("SELECT count(*) FROM fl_types WHERE pk = 'tx'")  # the analytics engine
    assert tc.fetchall() == [(1,)], "a transaction reads its own writes"
    pgc.execute("SELECT count(*) FROM fl_types WHERE pk = 'tx'")
    assert pgc.fetchone() == (0,), "others do not see it before COMMIT"
    txn.rollback()
    tc.execute("INSERT INTO fl_types (pk, rk, t) VALUES ('tx', 2, 'b')")
    txn.commit()
    pgc.execute("SELECT rk FROM fl_types WHERE pk = 'tx'")
    assert pgc.fetchall() == [(2,)]
    txn.close()
    conn.close()


def secure(cert, user, password):
    uri = f"grpc+tls://localhost:{port}"
    tls = {"adbc.flight.sql.client_option.tls_root_certs": open(cert).read()}
    # No credentials, a wrong password, an unknown user: refused.
    anon = flight.connect(uri, db_kwargs=dict(tls), autocommit=True)
    fails("28000", lambda: anon.cursor().execute("SELECT 1"))
    for who, pw in ((user, "wrong"), ("nobody", password)):
        fails("28P01", lambda: flight.connect(
            uri, db_kwargs={**tls, "username": who, "password": pw}, autocommit=True))
    conn = flight.connect(uri, db_kwargs={**tls, "username": user, "password": password},
                          autocommit=True)
    cur = conn.cursor()
    cur.execute("SELECT current_user")
    assert cur.fetchall() == [(user,)]
    # The server runs with --flight-token-seconds 3: the token expires.
    time.sleep(3.5)
    fails("28000", lambda: cur.execute("SELECT 1"))
    # Plaintext to the TLS port does not get in.
    try:
        flight.connect(f"grpc://127.0.0.1:{port}", db_kwargs={"username": user, "password": password},
                       autocommit=True).cursor().execute("SELECT 1")
    except adbc_driver_manager.Error:
        pass
    else:
        raise AssertionError("plaintext reached a TLS Flight SQL port")


if mode == "trust":
    trust(int(sys.argv[3]))
elif mode == "secure":
    secure(sys.argv[3], sys.argv[4], sys.argv[5])
else:
    sys.exit(f"unknown mode {mode}")
print("flight ok")
