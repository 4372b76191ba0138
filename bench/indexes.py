#!/usr/bin/env python3
"""Local and global indexes: what each one costs a write, and what it saves a lookup.

Loads the same rows (default 100 tenants x 1,000) into tablegate and a
throwaway PostgreSQL 15, keyed (tenant, id), with `team` (100 values, so
10 rows per tenant and team) and `email` columns. Then, one client over
psycopg with prepared statements, for 0, 1 and 2 indexes (on team, then
email; PostgreSQL's on (tenant, team) and (tenant, email), the same local
reach):

- single-row INSERTs of new keys, and UPDATEs by key that change `team`:
  statements per second;
- `tenant = $1 AND team = $2` lookups (10 rows each): with the index, and
  on tablegate also without it (`tablegate.use_indexes = off`: the
  partition's 1,000 rows scanned).

Then a global index on `email` (PostgreSQL: a B-tree on email), for
lookups with no tenant: `email = $1` through the index against a full
scan (`tablegate.use_indexes = off`, fewer runs: each reads every row),
INSERTs and UPDATEs of `email` by key without and with the index, and how
long after a burst of writes the index has applied them all (the lag).

Writes the Markdown report (every raw number) and an SVG chart under
bench/results/.

    cargo build --release
    bench/indexes.py --tenants 100 --rows-per-tenant 1000 --ops 3000
"""

from __future__ import annotations

import argparse
import datetime
import random
import sys
import tempfile
import time
from pathlib import Path
from xml.sax.saxutils import escape

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as B  # noqa: E402  (run.py is this script's library)

TABLE = ("CREATE TABLE ix_bench (tenant text, id bigint, team int, email text, note text, "
         "PRIMARY KEY (tenant, id))")
INDEXES = {
    "tablegate": ["CREATE INDEX ix_team ON ix_bench (team)", "CREATE INDEX ix_email ON ix_bench (email)"],
    "PostgreSQL": ["CREATE INDEX ix_team ON ix_bench (tenant, team)",
                   "CREATE INDEX ix_email ON ix_bench (tenant, email)"],
}
DROP = ["DROP INDEX IF EXISTS ix_team", "DROP INDEX IF EXISTS ix_email"]


def write_csv(path: Path, tenants: int, per: int) -> None:
    with open(path, "w") as f:
        for t in range(tenants):
            for i in range(per):
                f.write(f"t{t:04d},{i},{i % 100},u{i}@t{t:04d}.example,note {i}\n")


def connect(server: B.Server):
    import psycopg

    return psycopg.connect(host="127.0.0.1", port=server.port, user=server.user, dbname=server.db,
                           autocommit=True)


def timed(conn, sql: str, params, n: int) -> float:
    """Statements per second over `n` runs of `sql` with params(i)."""
    cur = conn.cursor()
    cur.execute(sql, params(-1), prepare=True)  # prepared once, warm
    cur.fetchall() if cur.description else None
    start = time.monotonic()
    for i in range(n):
        cur.execute(sql, params(i))
        if cur.description:
            cur.fetchall()
    return n / (time.monotonic() - start)


def measure(server: B.Server, tenants: int, ops: int, use_index: bool, seed: int) -> dict:
    rng = random.Random(seed)
    conn = connect(server)
    if server.name == "tablegate":
        conn.execute(f"SET tablegate.use_indexes = {'on' if use_index else 'off'}")
    tenant = lambda: f"t{rng.randrange(tenants):04d}"  # noqa: E731
    out = {
        "insert": timed(conn, "INSERT INTO ix_bench VALUES (%s, %s, %s, %s, 'new')",
                        lambda i: (tenant(), rng.randrange(10**6, 9 * 10**18), rng.randrange(100),
                                   f"n{rng.randrange(10**12)}@x"), ops),
        "update": timed(conn, "UPDATE ix_bench SET team = %s WHERE tenant = %s AND id = %s",
                        lambda i: (rng.randrange(100), tenant(), rng.randrange(1000)), ops),
        "lookup": timed(conn, "SELECT id, email FROM ix_bench WHERE tenant = %s AND team = %s",
                        lambda i: (tenant(), rng.randrange(100)), ops),
    }
    conn.close()
    return out


def measure_global(server: B.Server, tenants: int, per: int, ops: int, seed: int,
                   lookups: bool, scan: bool = False) -> dict:
    """INSERT and UPDATE of email by key, and (with `lookups`) email = $1
    lookups across tenants; `scan`: tablegate with index use off."""
    rng = random.Random(seed)
    conn = connect(server)
    if server.name == "tablegate":
        conn.execute(f"SET tablegate.use_indexes = {'off' if scan else 'on'}")
    tenant = lambda: f"t{rng.randrange(tenants):04d}"  # noqa: E731
    out = {}
    if not scan:
        out["insert"] = timed(conn, "INSERT INTO ix_bench VALUES (%s, %s, %s, %s, 'new')",
                              lambda i: (tenant(), rng.randrange(10**6, 9 * 10**18), rng.randrange(100),
                                         f"g{rng.randrange(10**12)}@x"), ops)
        out["update"] = timed(conn, "UPDATE ix_bench SET email = %s WHERE tenant = %s AND id = %s",
                              lambda i: (f"m{rng.randrange(10**12)}@x", tenant(), 1000 + rng.randrange(per - 1000)
                                         if per > 1000 else rng.randrange(per)), ops)
    if lookups:
        n = max(ops // 30, 20) if scan else ops
        out["lookup"] = timed(conn, "SELECT tenant, id FROM ix_bench WHERE email = %s",
                              lambda i: (f"u{rng.randrange(min(per, 1000))}@t{rng.randrange(tenants):04d}.example",), n)
    conn.close()
    return out


def global_lag(server: B.Server, tenants: int, writes: int, seed: int) -> tuple[float, float]:
    """(seconds to send `writes` single-row INSERTs, seconds after the last
    one until this gateway's global index had applied them all)."""
    rng = random.Random(seed)
    conn = connect(server)
    cur = conn.cursor()
    start = time.monotonic()
    for _ in range(writes):
        cur.execute("INSERT INTO ix_bench VALUES (%s, %s, 1, %s, 'lag')",
                    (f"t{rng.randrange(tenants):04d}", rng.randrange(10**6, 9 * 10**18),
                     f"l{rng.randrange(10**12)}@x"))
    sent = time.monotonic()
    while True:
        cur.execute("SELECT coalesce(sum(pending_partitions), 0) FROM tablegate.indexes WHERE kind = 'global'")
        if cur.fetchone()[0] == 0:
            break
        time.sleep(0.005)
    conn.close()
    return sent - start, time.monotonic() - sent


def svg_chart(rows: list[tuple[str, dict]], title: str, subtitle: str) -> str:
    """Grouped bars: statements/s of insert, update and lookup per configuration."""
    kinds = ["insert", "update", "lookup"]
    colors = {"insert": "#1565c0", "update": "#ef6c00", "lookup": "#2e7d32"}
    label_w, plot_w, right_w, bar_h, gap, top = 330, 380, 90, 12, 12, 70
    group_h = len(kinds) * bar_h + gap
    width, height = label_w + plot_w + right_w, top + len(rows) * group_h + 40
    best = max(r[k] for _, r in rows for k in kinds) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<text x="10" y="38" fill="#555">{escape(subtitle)}</text>']
    for j, k in enumerate(kinds):
        out.append(f'<rect x="{10 + j * 90}" y="48" width="10" height="10" fill="{colors[k]}"/>'
                   f'<text x="{24 + j * 90}" y="57">{k}</text>')
    for i, (label, r) in enumerate(rows):
        y0 = top + i * group_h
        out.append(f'<text x="{label_w - 8}" y="{y0 + 1.5 * bar_h + 4}" text-anchor="end">{escape(label)}</text>')
        for j, k in enumerate(kinds):
            if r.get(k) is None:
                continue
            y = y0 + j * bar_h
            w = max(r[k] / best * plot_w, 1)
            out.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 2}" fill="{colors[k]}"/>')
            out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 3}">{B.fmt_num(r[k])}/s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tablegate", default=str(B.REPO / "target/release/tablegate"))
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--rows-per-tenant", type=int, default=1000)
    ap.add_argument("--ops", type=int, default=3000, help="statements per measurement")
    ap.add_argument("--out", default=str(B.REPO / "bench/results"))
    args = ap.parse_args(argv)
    if args.rows_per_tenant < 1000:
        raise B.BenchError("--rows-per-tenant must be at least 1000 (the updates pick ids below 1000)")
    binary = Path(args.tablegate)
    if not binary.exists():
        raise B.BenchError(f"no tablegate binary at {binary}: run `cargo build --release` first")
    started = datetime.datetime.now(datetime.timezone.utc)
    total = args.tenants * args.rows_per_tenant
    results: list[tuple[str, str, int, bool, dict]] = []
    globals_: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="tg-index-bench-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the postgres user reaches work/pg
        pg = B.PgCluster(work)
        tg = B.Tablegate(binary, work, ["--unix-socket-dir", ""])
        try:
            pg.start()
            tg.start()
            csv = work / "rows.csv"
            write_csv(csv, args.tenants, args.rows_per_tenant)
            for server in (tg.server, pg.server):
                server.psql(TABLE, what="create table")
                B.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", *server.conn_args(), "-d", server.db,
                       "-c", rf"\copy ix_bench FROM '{csv}' WITH (FORMAT csv)"], f"load {server.name}",
                      timeout=3600)
                for n in range(3):
                    server.psql(*DROP, what="drop indexes")
                    for sql in INDEXES[server.name][:n]:
                        start = time.monotonic()
                        server.psql(sql, what="create index")
                        B.log(f"{server.name}: {sql} in {time.monotonic() - start:.2f} s")
                    modes = [True, False] if server.name == "tablegate" and n > 0 else [True]
                    for use in modes:
                        r = measure(server, args.tenants, args.ops, use, seed=20261129 + 2 * n + (0 if use else 1))
                        B.log(f"{server.name}, {n} indexes{'' if use else ', index use off'}: "
                              + ", ".join(f"{k} {v:,.0f}/s" for k, v in r.items()))
                        results.append((server.name, f"{n} index{'es' if n != 1 else ''}", n, use, r))
                # A global index (PostgreSQL: a B-tree on email alone).
                server.psql(*DROP, what="drop indexes")
                seed = 20261300 + (0 if server.name == "tablegate" else 50)
                r = measure_global(server, args.tenants, args.rows_per_tenant, args.ops, seed, lookups=False)
                B.log(f"{server.name}, no email index: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in r.items()))
                globals_[(server.name, "none")] = r
                sql = ("CREATE INDEX ix_email_g ON ix_bench (email) GLOBAL" if server.name == "tablegate"
                       else "CREATE INDEX ix_email_g ON ix_bench (email)")
                start = time.monotonic()
                server.psql(sql, what="create global index")
                globals_[(server.name, "build")] = {"seconds": time.monotonic() - start}
                B.log(f"{server.name}: {sql} in {time.monotonic() - start:.2f} s")
                r = measure_global(server, args.tenants, args.rows_per_tenant, args.ops, seed + 1, lookups=True)
                B.log(f"{server.name}, email index: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in r.items()))
                globals_[(server.name, "index")] = r
                if server.name == "tablegate":
                    r = measure_global(server, args.tenants, args.rows_per_tenant, args.ops, seed + 2,
                                       lookups=True, scan=True)
                    B.log(f"tablegate, index use off: lookup {r['lookup']:,.0f}/s")
                    globals_[(server.name, "scan")] = r
                    lags = [global_lag(server, args.tenants, 500, seed + 3 + k) for k in range(3)]
                    B.log("tablegate global index lag after 500 inserts: "
                          + ", ".join(f"{lag * 1000:.0f} ms (sent in {s:.2f} s)" for s, lag in lags))
                    globals_[(server.name, "lag")] = {"lags": lags}
                server.psql("DROP INDEX IF EXISTS ix_email_g", what="drop global index")
        finally:
            tg.stop()
            pg.stop(keep=False)

    short, full = B.git_commit()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"indexes-{started:%Y-%m-%d}-{short}"

    def get(name, n, use=True):
        return next(r for s, _, k, u, r in results if s == name and k == n and u == use)

    tg1, tg0, tg1off = get("tablegate", 1), get("tablegate", 0), get("tablegate", 1, False)
    subtitle = (f"{total:,} rows, 1 client, prepared; one index: insert {tg1['insert'] / tg0['insert']:.2f}x, "
                f"lookup {tg1['lookup'] / tg1off['lookup']:.1f}x the partition scan")
    chart_rows = [(f"{s}, {label}{'' if u else ' (use_indexes off)'}", r) for s, label, _, u, r in results]
    (out_dir / f"{stem}.svg").write_text(svg_chart(chart_rows, "What a local index costs and saves", subtitle))
    lines = [
        f"# Local and global indexes: write cost and lookup speed-up — {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"`bench/indexes.py --tenants {args.tenants} --rows-per-tenant {args.rows_per_tenant} --ops {args.ops}`, "
        f"profile **{B.profile_of(binary)}**, {total:,} rows keyed (tenant, id), 1,000 per tenant; `team` has "
        "100 values (10 rows per tenant and team). One psycopg client, prepared statements, autocommit; "
        "each number is statements per second over the run. tablegate's indexes are local (per "
        "PartitionKey: `team`, then `email`); PostgreSQL's are B-trees on (tenant, team) and (tenant, email).",
        "",
        "| server | indexes | index use | INSERT/s | UPDATE team by key/s | lookup tenant+team/s |",
        "|---|---|---|---|---|---|",
    ]
    for s, label, _, u, r in results:
        lines.append(f"| {s} | {label} | {'on' if u else 'off (partition scan)'} | {r['insert']:,.0f} | "
                     f"{r['update']:,.0f} | {r['lookup']:,.0f} |")
    pg0, pg1 = get("PostgreSQL", 0), get("PostgreSQL", 1)
    tg2, pg2 = get("tablegate", 2), get("PostgreSQL", 2)
    lines += [
        "",
        f"- Write cost per index (tablegate): INSERT {tg1['insert'] / tg0['insert']:.2f}x with one index, "
        f"{tg2['insert'] / tg0['insert']:.2f}x with two; UPDATE of the indexed column "
        f"{tg1['update'] / tg0['update']:.2f}x, {tg2['update'] / tg0['update']:.2f}x "
        f"(PostgreSQL: INSERT {pg1['insert'] / pg0['insert']:.2f}x, {pg2['insert'] / pg0['insert']:.2f}x; "
        f"UPDATE {pg1['update'] / pg0['update']:.2f}x, {pg2['update'] / pg0['update']:.2f}x).",
        f"- Lookup through the index against scanning the partition: **{tg1['lookup'] / tg1off['lookup']:.1f}x**; "
        f"against PostgreSQL's index: {tg1['lookup'] / pg1['lookup']:.2f}x.",
        "",
        "## A global index on email (lookups with no tenant)",
        "",
        "tablegate: `CREATE INDEX … GLOBAL` (an index table keyed by email; writes add a queue entry in their "
        "own transaction, the gateway applies it after they return, lookups wait for it). PostgreSQL: a B-tree "
        "on email. UPDATEs change `email` by key; lookups are `email = $1` (one row).",
        "",
        "| server | email index | INSERT/s | UPDATE email by key/s | lookup by email/s |",
        "|---|---|---|---|---|",
    ]
    for name in ("tablegate", "PostgreSQL"):
        none, ix = globals_[(name, "none")], globals_[(name, "index")]
        lines.append(f"| {name} | none | {none['insert']:,.0f} | {none['update']:,.0f} | |")
        lines.append(f"| {name} | {'global' if name == 'tablegate' else 'B-tree'} | {ix['insert']:,.0f} | "
                     f"{ix['update']:,.0f} | {ix['lookup']:,.0f} |")
    scan = globals_[("tablegate", "scan")]["lookup"]
    lines.append(f"| tablegate | global, use_indexes off (full scan) | | | {scan:,.1f} |")
    gn, gi, pn, pi = (globals_[("tablegate", "none")], globals_[("tablegate", "index")],
                      globals_[("PostgreSQL", "none")], globals_[("PostgreSQL", "index")])
    lags = globals_[("tablegate", "lag")]["lags"]
    lines += [
        "",
        f"- Build over {total:,} rows: tablegate {globals_[('tablegate', 'build')]['seconds']:.1f} s, "
        f"PostgreSQL {globals_[('PostgreSQL', 'build')]['seconds']:.1f} s.",
        f"- Write cost of the global index: INSERT {gi['insert'] / gn['insert']:.2f}x, UPDATE of email "
        f"{gi['update'] / gn['update']:.2f}x (PostgreSQL: {pi['insert'] / pn['insert']:.2f}x, "
        f"{pi['update'] / pn['update']:.2f}x).",
        f"- Lookup by email through the global index against the full scan: **{gi['lookup'] / scan:,.0f}x**; "
        f"against PostgreSQL's B-tree: {gi['lookup'] / pi['lookup']:.2f}x.",
        "- Lag after 500 single-row INSERTs from one client (time from the last acknowledgement until "
        "`tablegate.indexes.pending_partitions` was 0): "
        + ", ".join(f"{lag * 1000:.0f} ms" for _, lag in lags) + ".",
        "",
        "| machine | |", "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in B.machine_info().items()]
    lines += [f"| commit | {full} |", ""]
    (out_dir / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"\nwrote {out_dir / stem}.md and .svg")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except B.BenchError as e:
        print(f"bench/indexes.py: {e}", file=sys.stderr)
        sys.exit(1)
