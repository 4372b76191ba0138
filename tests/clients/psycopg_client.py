"""psycopg 3 against tablegate: create, insert, parameters, a server-side
cursor over 5,000 rows, and information_schema.columns. Exits non-zero on
any mismatch. Usage: psycopg_client.py PORT"""

import sys

import psycopg

port = int(sys.argv[1])
conn = psycopg.connect(
    host="127.0.0.1", port=port, user="tablegate", dbname="tablegate", autocommit=True
)
cur = conn.cursor()
cur.execute("DROP TABLE IF EXISTS py_items")
cur.execute(
    "CREATE TABLE py_items (pk text, rk text, n int, label text, PRIMARY KEY (pk, rk))"
)
# 5,000 rows in 5 partitions; executemany sends one parameterized INSERT each.
rows = [(f"p{i % 5}", f"r{i:05}", i, f"item {i}") for i in range(5000)]
cur.executemany("INSERT INTO py_items (pk, rk, n, label) VALUES (%s, %s, %s, %s)", rows)

cur.execute("SELECT n, label FROM py_items WHERE pk = %s AND rk = %s", ("p3", "r00013"))
assert cur.fetchall() == [(13, "item 13")], "point query with parameters"

# One transaction is one entity-group transaction: both rows or neither.
with conn.transaction():
    cur.execute("UPDATE py_items SET label = %s WHERE pk = 'p1' AND rk = 'r00001'", ("one",))
    cur.execute("DELETE FROM py_items WHERE pk = 'p1' AND rk = 'r00006'")
cur.execute("SELECT count(*) FROM py_items WHERE pk = 'p1'")
assert cur.fetchone() == (999,)

# A server-side cursor pages through every row.
seen = 0
with conn.transaction():
    with conn.cursor(name="pager") as named:
        named.execute("SELECT pk, rk, n FROM py_items")
        while True:
            page = named.fetchmany(700)
            if not page:
                break
            seen += len(page)
assert seen == 4999, seen

# A server-side cursor over an aggregate with a parameter: the analytics
# engine runs it, and the cursor pages its rows.
with conn.transaction():
    with conn.cursor(name="groups") as named:
        named.execute(
            "SELECT pk, count(*), sum(n) FROM py_items WHERE n >= %s GROUP BY pk ORDER BY pk",
            (1000,),
        )
        groups = named.fetchmany(2) + named.fetchmany(10)
# (The deleted row r00006 has n = 6, below the filter.)
want = [(f"p{p}", 800, sum(i for i in range(1000, 5000) if i % 5 == p)) for p in range(5)]
assert groups == want, groups

cur.execute(
    "SELECT column_name, data_type FROM information_schema.columns "
    "WHERE table_name = 'py_items' ORDER BY ordinal_position"
)
cols = cur.fetchall()
assert cols[:4] == [
    ("pk", "text"),
    ("rk", "text"),
    ("n", "integer"),
    ("label", "text"),
], cols
print("psycopg ok")
