#!/usr/bin/env python3
"""Reading a whole table into a pyarrow Table: Arrow Flight SQL against the
PostgreSQL protocol.

Loads the same rows (default 1,000,000) into tablegate and a throwaway
PostgreSQL 15, then reads all of them, each run in a fresh Python process:

- tablegate through Arrow Flight SQL (ADBC's Flight SQL driver): the
  store's record batches, no row format in between;
- tablegate through pgwire with psycopg 3 (binary results, fetchall, then
  the rows turned into a pyarrow Table);
- PostgreSQL 15 through psycopg the same way.

Reports rows/s (median of the runs), the client's peak RSS and each
server's peak PSS while it answered, and writes the Markdown report (every
raw number) and an SVG bar chart under bench/results/.

    cargo build --release
    bench/flight.py --rows 1000000 --runs 3

Needs what run.py needs, plus adbc-driver-flightsql, pyarrow and psycopg.
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.sax.saxutils import escape

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as B  # noqa: E402  (run.py is this script's library)

SQL = "SELECT tenant, id, amount, label, at FROM flight_bench"
TABLE = ("CREATE TABLE flight_bench (tenant text, id bigint, amount double precision, label text, "
         "at timestamptz, PRIMARY KEY (tenant, id))")
PATHS = [
    ("flight", "tablegate, Arrow Flight SQL (ADBC)"),
    ("pgwire", "tablegate, pgwire (psycopg, binary)"),
    ("postgres", "PostgreSQL 15, pgwire (psycopg, binary)"),
]


# ---------------------------------------------------------------------------
# The readers: each runs in a process of its own (`--reader PATH`), so its
# peak RSS is its own.

def read_flight(port: int) -> dict:
    import adbc_driver_flightsql.dbapi as flight

    conn = flight.connect(f"grpc://127.0.0.1:{port}", db_kwargs={"username": "tablegate", "password": ""},
                          autocommit=True)
    cur = conn.cursor()
    cur.execute("SELECT version()")  # warm: the first call's set-up is not the read
    cur.fetchall()
    start = time.monotonic()
    cur.execute(SQL)
    table = cur.fetch_arrow_table()
    done = time.monotonic()
    return {"rows": table.num_rows, "seconds": done - start, "fetch_s": done - start, "arrow_s": 0.0}


def read_psycopg(port: int, user: str, db: str) -> dict:
    import psycopg
    import pyarrow as pa

    conn = psycopg.connect(host="127.0.0.1", port=port, user=user, dbname=db, autocommit=True)
    cur = conn.cursor(binary=True)
    # Warm: the first call's set-up (and pyarrow's first datetime
    # conversion, which loads time zone data) is not the read.
    cur.execute("SELECT now()")
    pa.table({"at": [cur.fetchone()[0]]})
    start = time.monotonic()
    cur.execute(SQL)
    rows = cur.fetchall()
    fetched = time.monotonic()
    names = [d.name for d in cur.description]
    columns = list(zip(*rows)) if rows else [[] for _ in names]
    table = pa.table({n: list(c) for n, c in zip(names, columns)})
    done = time.monotonic()
    return {"rows": table.num_rows, "seconds": done - start, "fetch_s": fetched - start,
            "arrow_s": done - fetched}


def reader_main(path: str, port: int, user: str, db: str) -> None:
    result = read_flight(port) if path == "flight" else read_psycopg(port, user, db)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


# ---------------------------------------------------------------------------
# The benchmark


def write_csv(path: Path, rows: int) -> None:
    base = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    per_tenant = 1000
    with open(path, "w") as f:
        for i in range(rows):
            at = (base + datetime.timedelta(seconds=i)).isoformat()
            f.write(f"t{i // per_tenant:05d},{i},{i * 0.25},item {i},{at}\n")


def load(server: B.Server, csv: Path, rows: int) -> float:
    server.psql(TABLE, what="create table")
    start = time.monotonic()
    out = B.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", *server.conn_args(), "-d", server.db,
                 "-c", rf"\copy flight_bench FROM '{csv}' WITH (FORMAT csv)"], f"load {server.name}", timeout=3600)
    if f"COPY {rows}" not in out.stdout:
        raise B.BenchError(f"loading {server.name}: {out.stdout}{out.stderr}")
    took = time.monotonic() - start
    B.log(f"loaded {server.name}: {rows:,} rows in {took:.1f} s")
    return took


def flight_port(tg: B.Tablegate) -> int:
    import re

    m = re.search(r"Arrow Flight SQL on grpc://[\d.]+:(\d+)", tg.log_path.read_text())
    if not m:
        raise B.BenchError(f"tablegate printed no Flight SQL address:\n{tg.log_tail()}")
    return int(m.group(1))


def read_once(path: str, port: int, user: str, db: str) -> dict:
    out = B.run([sys.executable, __file__, "--reader", path, "--port", str(port), "--user", user, "--db", db],
                f"reading through {path}", timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def svg_chart(results: dict[str, dict], title: str, subtitle: str) -> str:
    """Horizontal bars: rows/s of each path (linear scale)."""
    label_w, plot_w, right_w, bar_h, gap, top = 300, 420, 110, 22, 10, 64
    width, height = label_w + plot_w + right_w, top + len(PATHS) * (bar_h + gap) + 30
    best = max(r["rows_per_s"] for r in results.values()) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<text x="10" y="38" fill="#555">{escape(subtitle)}</text>']
    colors = {"flight": "#2e7d32", "pgwire": "#1565c0", "postgres": "#757575"}
    for i, (key, label) in enumerate(PATHS):
        y = top + i * (bar_h + gap)
        v = results[key]["rows_per_s"]
        w = max(v / best * plot_w, 1)
        out.append(f'<text x="{label_w - 8}" y="{y + bar_h - 7}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colors[key]}"/>')
        out.append(f'<text x="{label_w + w + 6:.1f}" y="{y + bar_h - 7}">{B.fmt_num(v)} rows/s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tablegate", default=str(B.REPO / "target/release/tablegate"))
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3, help="reads per path (the median is reported)")
    ap.add_argument("--out", default=str(B.REPO / "bench/results"))
    ap.add_argument("--reader", choices=[p for p, _ in PATHS], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--user", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reader:
        reader_main(args.reader, args.port, args.user, args.db)
        return 0

    binary = Path(args.tablegate)
    if not binary.exists():
        raise B.BenchError(f"no tablegate binary at {binary}: run `cargo build --release` first")
    started = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="tg-flight-bench-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # the postgres user reaches work/pg
        pg = B.PgCluster(work)
        tg = B.Tablegate(binary, work, ["--flight-listen", "127.0.0.1:0", "--unix-socket-dir", ""])
        sampler = B.MemSampler()
        try:
            pg.start()
            tg.start()
            sampler.watch("tablegate", tg.proc.pid, False)
            sampler.watch("PostgreSQL", pg.postmaster_pid(), True)
            sampler.start()
            fport = flight_port(tg)
            csv = work / "rows.csv"
            B.log(f"writing {args.rows:,} rows")
            write_csv(csv, args.rows)
            loads = {"tablegate": load(tg.server, csv, args.rows), "PostgreSQL": load(pg.server, csv, args.rows)}
            targets = {
                "flight": (fport, "tablegate", "tablegate", "tablegate"),
                "pgwire": (tg.server.port, "tablegate", "tablegate", "tablegate"),
                "postgres": (pg.port, "postgres", "postgres", "PostgreSQL"),
            }
            results: dict[str, dict] = {}
            for key, label in PATHS:
                port, user, db, server = targets[key]
                sampler.phase = key
                runs = []
                for i in range(args.runs):
                    r = read_once(key, port, user, db)
                    if r["rows"] != args.rows:
                        raise B.BenchError(f"{label} read {r['rows']:,} rows, not {args.rows:,}")
                    B.log(f"  {label}, run {i + 1}: {r['rows'] / r['seconds']:,.0f} rows/s "
                          f"({r['seconds']:.2f} s), client peak {r['peak_rss_mib']:.0f} MiB")
                    runs.append(r)
                seconds = B.median([r["seconds"] for r in runs])
                results[key] = {
                    "label": label,
                    "runs": runs,
                    "seconds": seconds,
                    "rows_per_s": args.rows / seconds,
                    "client_mib": max(r["peak_rss_mib"] for r in runs),
                    "server_mib": sampler.peak_mib(server, key),
                }
        finally:
            sampler.stop_event.set()
            tg.stop()
            pg.stop(keep=False)

    short, full = B.git_commit()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"flight-{started:%Y-%m-%d}-{short}"
    flight = results["flight"]["rows_per_s"]
    subtitle = (f"{args.rows:,} rows, full scan into a pyarrow Table, median of {args.runs}; "
                f"Flight SQL {flight / results['pgwire']['rows_per_s']:.1f}x tablegate's pgwire, "
                f"{flight / results['postgres']['rows_per_s']:.1f}x PostgreSQL 15")
    (out_dir / f"{stem}.svg").write_text(svg_chart(results, "Reading a table into Arrow", subtitle))
    info = B.machine_info()
    lines = [
        f"# Arrow Flight SQL against pgwire — {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"`bench/flight.py --rows {args.rows} --runs {args.runs}`, profile **{B.profile_of(binary)}**. "
        f"`{SQL}` over {args.rows:,} rows (1,000 per PartitionKey), read whole into a pyarrow Table, "
        "each run in a fresh Python process. psycopg reads binary results with fetchall, then the rows "
        "become a pyarrow Table (the `to Arrow` column).",
        "",
        "| path | rows/s (median) | seconds (median) | fetch s | to Arrow s | client peak RSS MiB | server peak PSS MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, label in PATHS:
        r = results[key]
        mid = sorted(r["runs"], key=lambda x: x["seconds"])[len(r["runs"]) // 2]
        lines.append(f"| {label} | {r['rows_per_s']:,.0f} | {r['seconds']:.3f} | {mid['fetch_s']:.3f} | "
                     f"{mid['arrow_s']:.3f} | {r['client_mib']:.0f} | {B.fmt_num(r['server_mib'])} |")
    lines += [
        "",
        f"Flight SQL ÷ tablegate pgwire: **{flight / results['pgwire']['rows_per_s']:.2f}×**; "
        f"Flight SQL ÷ PostgreSQL 15: **{flight / results['postgres']['rows_per_s']:.2f}×**.",
        "",
        f"Load (psql \\copy of the same CSV): tablegate {loads['tablegate']:.1f} s, "
        f"PostgreSQL {loads['PostgreSQL']:.1f} s.",
        "",
        "Every run (seconds):",
        "",
    ]
    for key, label in PATHS:
        lines.append(f"- {label}: " + ", ".join(f"{r['seconds']:.3f}" for r in results[key]["runs"]))
    lines += ["", "| machine | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in info.items()]
    lines += [f"| commit | {full} |", ""]
    (out_dir / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"\nwrote {out_dir / stem}.md and .svg")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except B.BenchError as e:
        print(f"bench/flight.py: {e}", file=sys.stderr)
        sys.exit(1)
