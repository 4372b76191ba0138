#!/usr/bin/env python3
"""How cost grows (issue 40): tablegate and PostgreSQL 15 side by side as
the data, the connections and the PartitionKeys grow, and tablegate's
throttled path against its targets.

Run through `bench/run.py --scaling` (after the normal run) or
`bench/run.py --scaling only`; this module holds the measurements and the
report, and takes its servers, data, loads and pgbench runs from run.py.
Writes `bench/results/scaling-<date>-<short commit>.md` and one SVG chart
per dimension next to it. See bench/README.md.

Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as B  # noqa: E402  (run.py is this module's library)

log = B.log
DIMENSIONS = ("size", "connections", "partitions", "throttle")
ROWS_PER_PK = 1000  # rows per PartitionKey in the data-size runs (as run.py's default)
THROTTLE_LAYOUT = B.Layout(1000, 100)  # the throttled runs' table: 100,000 rows
PG_COLOR, TG_COLOR, EXPECTED_COLOR = "#1565c0", "#2e7d32", "#9e9e9e"


# ---------------------------------------------------------------------------
# Arguments (added to run.py's parser)


def add_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("scaling (issue 40, bench/scale.py; off unless --scaling)")
    g.add_argument("--scaling", nargs="?", const="also", choices=("also", "only"), default=None,
                   help="also run the scaling measurements after the normal run (`--scaling only`: just them); "
                        "they write bench/results/scaling-DATE-COMMIT.md and its SVG charts")
    g.add_argument("--scaling-dimensions", default=",".join(DIMENSIONS), metavar="LIST",
                   help="dimensions to measure: size, connections, partitions, throttle (default all)")
    g.add_argument("--scaling-rows", type=int, default=1_000_000, metavar="N",
                   help="the base data set (default 1,000,000 rows, 1,000 per PartitionKey): the data sizes are "
                        "1x, 10x and 30x of it; the connection runs and the partition sweep use it. Smaller "
                        "values make a quick trial run")
    g.add_argument("--scaling-max-rows", type=int, default=10_000_000, metavar="N",
                   help="largest data size measured (default 10,000,000: 30x the base is skipped)")
    g.add_argument("--scaling-duration", type=int, default=20, metavar="S",
                   help="seconds per pgbench run of the scaling measurements (default 20)")
    g.add_argument("--scaling-warmup", type=int, default=5, metavar="S",
                   help="seconds of point lookups on each server after each load (default 5)")
    g.add_argument("--scaling-scan-runs", type=int, default=3, metavar="N",
                   help="runs of the full-scan aggregate per server and data set (default 3)")
    g.add_argument("--scaling-connections", default="16,100,500,1000", metavar="LIST",
                   help="client counts of the connection runs (default 16,100,500,1000)")
    g.add_argument("--scaling-partitions", default="10,1000,100000", metavar="LIST",
                   help="PartitionKey counts over the base rows (default 10,1000,100000)")
    g.add_argument("--scaling-hot", default="1,10,30,100", metavar="LIST",
                   help="hot PartitionKeys of the throttled runs (default 1,10,30,100; at most 128)")
    g.add_argument("--throttle-duration", type=int, default=30, metavar="S",
                   help="seconds per throttled run (default 30)")
    g.add_argument("--throttle-clients", type=int, default=64, metavar="N",
                   help="pgbench clients of the throttled runs (default 64)")
    g.add_argument("--throttle-retry-max", type=int, default=20, metavar="N",
                   help="tablegate's --retry-max in the throttled runs (default 20, the most; tablegate's own "
                        "default is 5): a throttled lookup waits rather than failing, which would end its "
                        "pgbench client")


def int_list(ap: argparse.ArgumentParser, text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ap.error(f"{flag} is a comma-separated list of numbers")
    if not out or min(out) < 1:
        ap.error(f"{flag} needs positive numbers")
    return out


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    args.scaling_dimensions = {w.strip() for w in args.scaling_dimensions.split(",") if w.strip()}
    if not args.scaling_dimensions <= set(DIMENSIONS):
        ap.error(f"--scaling-dimensions takes {', '.join(DIMENSIONS)}")
    args.scaling_connections = int_list(ap, args.scaling_connections, "--scaling-connections")
    args.scaling_partitions = int_list(ap, args.scaling_partitions, "--scaling-partitions")
    args.scaling_hot = int_list(ap, args.scaling_hot, "--scaling-hot")
    base = args.scaling_rows
    if base < ROWS_PER_PK or base % ROWS_PER_PK:
        ap.error(f"--scaling-rows must be a multiple of {ROWS_PER_PK:,}")
    if args.scaling_max_rows < base:
        ap.error("--scaling-max-rows must be at least --scaling-rows")
    for p in args.scaling_partitions if "partitions" in args.scaling_dimensions else []:
        if p > base or base % p:
            ap.error(f"--scaling-partitions: {p:,} PartitionKeys do not divide {base:,} rows evenly")
    if max(args.scaling_hot) > min(128, THROTTLE_LAYOUT.partitions):
        ap.error("--scaling-hot: at most 128 hot PartitionKeys (pgbench takes 128 scripts)")
    if max(args.scaling_connections) > 5000:
        ap.error("--scaling-connections: at most 5,000")
    if min(args.scaling_duration, args.scaling_scan_runs, args.throttle_duration, args.throttle_clients) < 1:
        ap.error("--scaling-duration, --scaling-scan-runs, --throttle-duration and --throttle-clients must be "
                 "positive")
    if args.scaling_warmup < 0 or not 0 <= args.throttle_retry_max <= 20:
        ap.error("--scaling-warmup must be 0 or more, --throttle-retry-max from 0 to 20")


def size_layouts(args) -> list[B.Layout]:
    base = args.scaling_rows
    sizes = [base * m for m in (1, 10, 30) if base * m <= args.scaling_max_rows]
    return [B.Layout(n // ROWS_PER_PK, ROWS_PER_PK) for n in sizes]


def short_count(n: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            v = n / div
            return (f"{v:.0f}" if v == int(v) or v >= 100 else f"{v:.3g}") + suffix
    return f"{n:.3g}"


def rows_label(n: int) -> str:
    return short_count(n) + " rows"


# ---------------------------------------------------------------------------
# Measurements


@dataclass
class LayoutResult:
    layout: B.Layout
    load_s: dict[str, float] = field(default_factory=dict)
    vacuum_s: float = 0.0
    disk_per_row: dict[str, float] = field(default_factory=dict)  # bytes
    pg_relation_per_row: float = 0.0
    point_tps: dict[str, float] = field(default_factory=dict)
    range_tps: dict[str, float] = field(default_factory=dict)
    scan_ms: dict[str, float] = field(default_factory=dict)  # median
    scan_runs: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0  # wall time of the whole measurement

    @property
    def range_rows(self) -> int:
        return min(100, self.layout.rows)


@dataclass
class ConnResult:
    server: str
    clients: int
    tps: float | None = None
    transactions: int = 0
    latency_ms: float | None = None
    steady_tps: float | None = None  # mean of pgbench's per-second progress over the second half
    p99_ms: float | None = None
    p50_ms: float | None = None
    logged: int = 0
    connect_ms: float | None = None
    peak_mib: float | None = None
    error: str = ""


@dataclass
class ThrottleResult:
    hot: int
    clients: int
    duration: int
    targets: dict[str, int]
    pks: list[str]
    pk_server: list[int]
    expected_pk: list[float]
    expected_server: dict[int, float]
    expected_total: float
    binding: str
    series: str = ""  # "": the targets as configured; "lifted": the server target above the account's
    pk_tps: list[float] = field(default_factory=list)  # admitted per hot key, steady window
    total_tps: float = 0.0  # the same, all hot keys
    window_s: float = 0.0
    pgbench_tps: float = 0.0  # pgbench's own figure, which includes the tail
    transactions: int = 0
    aborted: int = 0
    errors: list[str] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)  # throttle_counters change per scope
    point: dict[str, float] = field(default_factory=dict)  # query_counters change of class point
    moved: str = ""  # the partition map changed during the run


def conn_sample_interval(d: int) -> float:
    return max(2.0, d / 4)


class PeakSampler(threading.Thread):
    """Peak PSS of one server while a pgbench run goes on, sampled every
    `interval` s (PostgreSQL's tree of ~1,000 backends takes a while to
    read: few samples, so the sampler takes little CPU from the run)."""

    def __init__(self, pid: int, tree: bool, interval: float):
        super().__init__(daemon=True)
        self.pid, self.tree, self.interval = pid, tree, interval
        self.peak = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.peak = max(self.peak, B.pss_kib(self.pid, self.tree))

    def finish(self) -> float:
        self.stop_event.set()
        self.join()
        return self.peak / 1024


class Pair:
    """A PostgreSQL cluster and a tablegate server, in their own directory."""

    def __init__(self, sc: "Scaling", name: str):
        self.work = sc.work / name
        self.work.mkdir()
        os.chmod(self.work, 0o711)
        self.pg = B.PgCluster(self.work, max_connections=sc.max_connections)
        self.tg = B.Tablegate(sc.binary, self.work, sc.tg_extra)
        self.P, self.T = self.pg.server, self.tg.server

    def start(self) -> None:
        self.pg.start()
        self.tg.start()
        log(f"PostgreSQL on 127.0.0.1:{self.pg.port}, tablegate on 127.0.0.1:{self.tg.server.port} ({self.work})")

    def stop(self) -> None:
        self.tg.stop()
        self.pg.stop(keep=False)
        shutil.rmtree(self.work, ignore_errors=True)

    def pid(self, server: B.Server) -> tuple[int, bool]:
        return (self.pg.postmaster_pid(), True) if server is self.P else (self.tg.proc.pid, False)


class Scaling:
    def __init__(self, args, binary: Path, started: datetime.datetime):
        self.args = args
        self.binary = binary
        self.started = started
        self.work = Path(tempfile.mkdtemp(prefix="tg-scaling-"))
        os.chmod(self.work, 0o711)  # the postgres user reaches work/*/pg
        self.max_connections = max(args.scaling_connections) + 20
        self.tg_extra = B.tablegate_extra(args, self.max_connections)
        self.sizes: list[LayoutResult] = []
        self.partitions: dict[int, LayoutResult] = {}
        self.conns: list[ConnResult] = []
        self.throttled: list[ThrottleResult] = []
        self.class_problems: list[str] = []
        self.stage_s: dict[str, float] = {}
        self.error = ""

    @contextlib.contextmanager
    def pair(self, name: str):
        p = Pair(self, name)
        try:
            p.start()
            yield p
        finally:
            p.stop()

    # -- one data set on both servers -------------------------------------

    def measure_layout(self, pair: Pair, layout: B.Layout, what: str) -> LayoutResult:
        args = self.args
        t0 = time.monotonic()
        r = LayoutResult(layout)
        P, T = pair.P, pair.T
        log(f"[{what}] {layout.partitions:,} PartitionKeys x {layout.rows:,} rows = {layout.total:,} rows")
        csv = pair.work / "entities.csv"
        B.write_csv(csv, layout)
        for s in (P, T):
            s.psql(B.CREATE_SQL, what="CREATE TABLE")
        for s in (P, T):
            r.load_s[s.name] = B.load(s, csv, layout.total)
        csv.unlink()
        t = time.monotonic()
        P.psql("VACUUM ANALYZE entities", "CHECKPOINT", what="VACUUM ANALYZE, CHECKPOINT", timeout=7200)
        r.vacuum_s = time.monotonic() - t
        log(f"PostgreSQL VACUUM ANALYZE + CHECKPOINT: {r.vacuum_s:.1f} s")
        for s in (P, T):
            n = int(s.psql("SELECT count(*) FROM entities", what="count", timeout=7200).strip())
            if n != layout.total:
                raise B.BenchError(f"{s.name} holds {n} rows after the load, expected {layout.total}")
        r.disk_per_row = {"PostgreSQL": B.disk_bytes(pair.pg.data) / layout.total,
                          "tablegate": B.disk_bytes(pair.tg.data) / layout.total}
        r.pg_relation_per_row = int(P.psql("SELECT pg_total_relation_size('entities')").strip()) / layout.total
        log(f"on disk per row: PostgreSQL {r.disk_per_row['PostgreSQL']:,.1f} B (table + index "
            f"{r.pg_relation_per_row:,.1f} B), tablegate {r.disk_per_row['tablegate']:,.1f} B")
        sample = (f"SELECT n, s, d FROM entities WHERE pk = '{layout.pk_base + layout.partitions // 2}' "
                  f"AND rk = '{layout.rk_base + layout.rows // 2}'")
        answers = {s.name: s.psql(sample, what="spot check") for s in (P, T)}
        if answers["PostgreSQL"] != answers["tablegate"] or not answers["PostgreSQL"].strip():
            raise B.BenchError(f"the servers disagree on {sample}: {answers}")

        bench = B.Bench(args, pair.work, pair.pg, pair.tg, B.MemSampler())
        scripts = B.pgbench_scripts(layout)
        values = {"p": layout.pk_base, "r": layout.rk_base, "lo": layout.rk_base, "hi": layout.rk_base + 100}
        if args.scaling_warmup:
            w = B.Workload("a", "warm-up", "point lookup", "prepared", 4, scripts["point"])
            for s in (P, T):
                bench.pgbench(s, w, args.scaling_warmup, measured=False)
        point = B.Workload("a", "point-prepared-c4", "point lookup, prepared, 4 clients", "prepared", 4,
                           scripts["point"], expect_class="point", explain_sql=B.substitute(scripts["point"], values))
        rng = B.Workload("b", "range100-prepared-c4", "row range, prepared, 4 clients", "prepared", 4,
                         scripts["range"], expect_class="row-range", explain_sql=B.substitute(scripts["range"], values))
        for w, out in ((point, r.point_tps), (rng, r.range_tps)):
            bench.explain_class(w)
            for s in (P, T):
                out[s.name] = bench.pgbench(s, w, args.scaling_duration).tps
        answers = {}
        for s in (P, T):
            times, answers[s.name] = bench.scan(s, False, args.scaling_scan_runs)
            r.scan_runs[s.name] = times
            r.scan_ms[s.name] = statistics.median(times)
        if not B.same_answer(answers["PostgreSQL"], answers["tablegate"]):
            raise B.BenchError(f"the servers disagree on {B.SCAN_SQL}: {answers}")
        self.class_problems += [f"{what}: {p}" for p in bench.class_problems]
        r.seconds = time.monotonic() - t0
        return r

    # -- connections --------------------------------------------------------

    def conn_run(self, pair: Pair, server: B.Server, script: Path, clients: int) -> ConnResult:
        args = self.args
        d = args.scaling_duration
        res = ConnResult(server.name, clients)
        prefix = pair.work / f"txlog-{server.name}-{clients}"
        cmd = ["pgbench", "-n", "-f", str(script), "-T", str(d), "-c", str(clients), "-j", str(min(2, clients)),
               "-M", "prepared", "--log", f"--log-prefix={prefix}", "--sampling-rate=0.1", "--progress=1",
               *server.conn_args(), server.db]
        pid, tree = pair.pid(server)
        sampler = PeakSampler(pid, tree, conn_sample_interval(d))
        sampler.start()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=d * 3 + 300, env=B.clean_env())
        except subprocess.TimeoutExpired:
            res.error = f"pgbench did not finish in {d * 3 + 300} s"
            out = None
        finally:
            res.peak_mib = sampler.finish()
        server.check_alive()
        if out is not None:
            text = out.stdout + out.stderr
            aborted = len(re.findall(r"client \d+ .*aborted", out.stderr))
            try:
                res.transactions, failed, res.tps, res.latency_ms = B.parse_pgbench(out.stdout)
            except B.BenchError:
                failed = 0
                res.error = f"pgbench exit {out.returncode}: " + " ".join(text.split())[-400:]
            m = re.search(r"^initial connection time = ([\d.]+) ms", out.stdout, re.M)
            res.connect_ms = float(m.group(1)) if m else None
            # The second half: 1,000 new backends or sessions first warm up.
            late = [float(v) for t, v in re.findall(r"^progress: ([\d.]+) s, ([\d.]+) tps", out.stderr, re.M)
                    if float(t) >= d / 2]
            res.steady_tps = statistics.mean(late) if late else None
            if not res.error and (out.returncode != 0 or aborted or failed):
                first = next((line for line in out.stderr.splitlines() if "error" in line.lower()), "")
                res.error = f"exit {out.returncode}, {failed} failed, {aborted} clients aborted: {first[:300]}"
        ends: list[tuple[float, int]] = []
        for f in sorted(pair.work.glob(prefix.name + ".*")):
            with open(f) as fh:
                for line in fh:
                    parts = line.split()
                    if len(parts) >= 6 and parts[2].isdigit():
                        ends.append((int(parts[4]) + int(parts[5]) / 1e6, int(parts[2])))
            f.unlink()
        lat = []
        if ends:
            # pgbench's -T counts from before the connections: the second
            # half of the time in which transactions ended.
            mid = (min(t for t, _ in ends) + max(t for t, _ in ends)) / 2
            lat = [us for t, us in ends if t >= mid]
        if lat:
            lat.sort()
            res.logged = len(lat)
            res.p99_ms = lat[min(len(lat) - 1, math.ceil(0.99 * len(lat)) - 1)] / 1000
            res.p50_ms = lat[(len(lat) - 1) // 2] / 1000
        log(f"connections {clients:>5} {server.name:<10} "
            + (f"{res.tps:>10,.1f} tps (2nd half {B.fmt_num(res.steady_tps)}), p99 {B.fmt_num(res.p99_ms)} ms, connect {B.fmt_num(res.connect_ms)} ms, "
               f"peak PSS {res.peak_mib:,.1f} MiB" if res.tps is not None else "no result")
            + (f"  ERROR: {res.error}" if res.error else ""))
        return res

    def connections(self, pair: Pair, layout: B.Layout) -> None:
        t0 = time.monotonic()
        script = pair.work / "conn-point.sql"
        script.write_text(B.pgbench_scripts(layout)["point"])
        for i, c in enumerate(self.args.scaling_connections):
            order = (pair.P, pair.T) if i % 2 == 0 else (pair.T, pair.P)
            for s in order:
                self.conns.append(self.conn_run(pair, s, script, c))
                time.sleep(2)  # backends and threads of the last run go away
        self.stage_s["connections"] = time.monotonic() - t0

    # -- the throttled path ---------------------------------------------------

    def throttle(self) -> None:
        args = self.args
        t0 = time.monotonic()
        layout = THROTTLE_LAYOUT
        work = self.work / "throttle"
        work.mkdir()
        extra = list(self.tg_extra)
        if not any(a == "--retry-max" or a.startswith("--retry-max=") for a in extra):
            extra += ["--retry-max", str(args.throttle_retry_max)]
        log(f"[throttle] loading {layout.total:,} rows ({layout.partitions:,} PartitionKeys) with throttling off")
        tg = B.Tablegate(self.binary, work, extra)
        try:
            tg.start()
            csv = work / "entities.csv"
            B.write_csv(csv, layout)
            tg.server.psql(B.CREATE_SQL, what="CREATE TABLE")
            B.load(tg.server, csv, layout.total)
            csv.unlink()
        finally:
            tg.stop()
        lift = not any(a == "--server-target" or a.startswith("--server-target=") for a in extra)
        first: dict[int, ThrottleResult] = {}
        for series in ("", "lifted"):
            for hot in args.scaling_hot:
                ex = extra
                if series:
                    # A new table is one range on one partition server, and
                    # the balancer moves ranges only after a whole window over
                    # capacity: in these runs every hot key shares server 0's
                    # target. Where that target bound, a second run lifts it
                    # over the account target, so that the account's binds.
                    if not lift or hot not in first or first[hot].binding != "server":
                        continue
                    ex = extra + ["--server-target", str(2 * first[hot].targets["account"])]
                tg = B.Tablegate(self.binary, work, ex, throttle=True)
                try:
                    tg.start()
                    r = self.throttle_run(tg, work, layout, hot, series)
                finally:
                    tg.stop()
                self.throttled.append(r)
                if not series:
                    first[hot] = r
        self.stage_s["throttle"] = time.monotonic() - t0

    def throttle_run(self, tg: B.Tablegate, work: Path, layout: B.Layout, hot: int, series: str) -> ThrottleResult:
        args = self.args
        T = tg.server
        d, clients = args.throttle_duration, args.throttle_clients
        targets = {}
        for line in T.psql("SELECT scope, target_per_sec FROM tablegate.throttle_counters").splitlines():
            scope, target = line.split("|")
            targets[scope] = int(target)
        ranges = self.ranges(T)
        pks = [str(layout.pk_base + i * layout.partitions // hot) for i in range(hot)]
        pk_server = [self.server_of(ranges, pk) for pk in pks]
        exp_pk, exp_server, exp_total, binding = expected_rates(pk_server, targets)
        scripts = []
        for i, pk in enumerate(pks):
            path = work / f"hot-{i}.sql"
            path.write_text(f"\\set r random({layout.rk_base}, {layout.rk_base + layout.rows - 1})\n"
                            f"SELECT n, s, d FROM entities WHERE pk = '{pk}' AND rk = :r::text;\n")
            scripts += ["-f", f"{path}@1"]
        res = ThrottleResult(hot, clients, d, targets, pks, pk_server, exp_pk, exp_server, exp_total, binding,
                             series)
        log(f"throttle{' (server target lifted)' if series else ''} {hot:>3} hot PartitionKeys on server(s) {sorted(set(pk_server))}, {clients} clients, {d} s: "
            f"expected {exp_total:,.0f}/s in all ({binding} bound), {statistics.mean(exp_pk):,.0f}/s per key")
        before_refused, before_point = self.throttle_counters(T), self.point_counters(T)
        prefix = work / f"txlog-hot-{hot}"
        cmd = ["pgbench", "-n", *scripts, "-T", str(d), "-c", str(clients), "-j", str(min(2, clients)),
               "-M", "prepared", "--log", f"--log-prefix={prefix}", *T.conn_args(), T.db]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=d * 3 + 300, env=B.clean_env())
        except subprocess.TimeoutExpired as e:
            raise B.BenchError(f"pgbench did not finish in {d * 3 + 300} s: {' '.join(cmd)}") from e
        T.check_alive()
        after_refused, after_point = self.throttle_counters(T), self.point_counters(T)
        res.refused = {k: after_refused[k] - before_refused.get(k, 0) for k in after_refused}
        res.point = {k: after_point[k] - before_point.get(k, 0) for k in after_point}
        res.transactions, failed, res.pgbench_tps, _ = B.parse_pgbench(out.stdout)
        res.aborted = len(re.findall(r"client \d+ .*aborted", out.stderr)) + failed
        res.errors = sorted({re.sub(r"client \d+ script \d+ ", "", line.split("error: ", 1)[-1])[:200]
                             for line in out.stderr.splitlines() if "aborted" in line or "ERROR" in line})[:5]
        # Admitted per hot key: transactions that ended inside the steady
        # window, from the per-transaction log (script number = hot key).
        # pgbench's own tps also counts the tail, where it waits for lookups
        # still backing off after -T is over, and the first burst.
        ends: list[tuple[float, int]] = []
        for f in sorted(work.glob(prefix.name + ".*")):
            with open(f) as fh:
                for line in fh:
                    parts = line.split()
                    if len(parts) >= 6 and parts[2].isdigit():
                        ends.append((int(parts[4]) + int(parts[5]) / 1e6, int(parts[3])))
            f.unlink()
        if not ends:
            raise B.BenchError(f"pgbench logged no transaction:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        first = min(t for t, _ in ends)
        skip = min(1.0, d / 10)
        # -T counts from before the connections were made.
        m = re.search(r"^initial connection time = ([\d.]+) ms", out.stdout, re.M)
        connect_s = float(m.group(1)) / 1000 if m else 0.0
        lo, hi = first + skip, first - connect_s + d - skip
        res.window_s = hi - lo
        counts = Counter(script for t, script in ends if lo <= t < hi)
        res.pk_tps = [counts.get(i, 0) / res.window_s for i in range(hot)]
        res.total_tps = sum(res.pk_tps)
        after_ranges = self.ranges(T)
        if after_ranges != ranges:
            res.moved = (f"the partition map changed during the run: {len(ranges)} → {len(after_ranges)} ranges "
                         f"on servers {sorted({s for _, _, s in after_ranges})}")
        dev = (res.total_tps / exp_total - 1) * 100 if exp_total else 0.0
        log(f"throttle{' (server target lifted)' if series else ''} {hot:>3} hot: admitted {res.total_tps:,.1f}/s in all ({dev:+.1f}% of expected), per key "
            f"{min(res.pk_tps):,.1f} to {max(res.pk_tps):,.1f}/s; refused {res.refused}; "
            f"{res.aborted} failed transactions" + (f"; {res.moved}" if res.moved else ""))
        return res

    @staticmethod
    def ranges(T: B.Server) -> list[tuple[str, str, int]]:
        out = T.psql("SELECT lower_bound, upper_bound, server FROM tablegate.range_partitions "
                     "WHERE table_name = 'entities' ORDER BY lower_bound")
        rows = []
        for line in out.splitlines():
            lo, hi, server = line.split("|")
            rows.append((lo, hi, int(server)))
        return rows

    @staticmethod
    def server_of(ranges: list[tuple[str, str, int]], pk: str) -> int:
        for lo, hi, server in ranges:
            if (not lo or pk >= lo) and (not hi or pk < hi):
                return server
        raise B.BenchError(f"no range partition holds PartitionKey {pk}: {ranges}")

    @staticmethod
    def throttle_counters(T: B.Server) -> dict[str, int]:
        out = T.psql("SELECT scope, throttled FROM tablegate.throttle_counters")
        return {scope: int(n) for scope, n in (line.split("|") for line in out.splitlines())}

    @staticmethod
    def point_counters(T: B.Server) -> dict[str, float]:
        out = T.psql("SELECT statements, errors, throttled_retries, backoff_ms FROM tablegate.query_counters "
                     "WHERE class = 'point'").strip()
        vals = [float(x or 0) for x in out.split("|")]
        return dict(zip(("statements", "errors", "throttled_retries", "backoff_ms"), vals))


def expected_rates(pk_server: list[int], targets: dict[str, int]) -> tuple[list[float], dict[int, float], float, str]:
    """What the targets admit when every hot PartitionKey is asked for more
    than it gets, evenly: each key up to the partition target, each server up
    to its target shared evenly by its keys, the account up to its target
    shared in proportion."""
    pt, st, at = targets["partition"], targets["server"], targets["account"]
    keys = Counter(pk_server)
    server_rate = {s: min(st, k * pt) for s, k in keys.items()}
    total = sum(server_rate.values())
    scale = min(1.0, at / total)
    per_pk = [min(pt, st / keys[s]) * scale for s in pk_server]
    if scale < 1:
        binding = "account"
    elif any(k * pt > st for k in keys.values()):
        binding = "server"
    else:
        binding = "partition"
    return per_pk, {s: r * scale for s, r in server_rate.items()}, total * scale, binding


# ---------------------------------------------------------------------------
# The run


def run_scaling(args, binary: Path, started: datetime.datetime) -> None:
    sc = Scaling(args, binary, started)
    parts = args.scaling_dimensions
    layouts = size_layouts(args)
    base = layouts[0]
    log(f"scaling: {', '.join(sorted(parts))}; work directory {sc.work}")
    try:
        want_base = ("size" in parts or "connections" in parts
                     or ("partitions" in parts and base.partitions in args.scaling_partitions))
        if want_base:
            t = time.monotonic()
            with sc.pair("base") as pair:
                r = sc.measure_layout(pair, base, rows_label(base.total))
                if "size" in parts:
                    sc.sizes.append(r)
                if "partitions" in parts and base.partitions in args.scaling_partitions:
                    sc.partitions[base.partitions] = r
                if "connections" in parts:
                    log(f"[connections] {', '.join(map(str, args.scaling_connections))} clients, prepared point "
                        f"lookups, {args.scaling_duration} s each")
                    sc.connections(pair, base)
            sc.stage_s[f"data set {rows_label(base.total)}"] = (time.monotonic() - t
                                                                 - sc.stage_s.get("connections", 0))
        if "size" in parts:
            for layout in layouts[1:]:
                t = time.monotonic()
                with sc.pair(f"size-{layout.total}") as pair:
                    sc.sizes.append(sc.measure_layout(pair, layout, rows_label(layout.total)))
                sc.stage_s[f"data set {rows_label(layout.total)}"] = time.monotonic() - t
        if "partitions" in parts:
            for p in args.scaling_partitions:
                if p in sc.partitions:
                    continue
                layout = B.Layout(p, args.scaling_rows // p)
                t = time.monotonic()
                with sc.pair(f"partitions-{p}") as pair:
                    sc.partitions[p] = sc.measure_layout(pair, layout, f"{p:,} PartitionKeys")
                sc.stage_s[f"{p:,} PartitionKeys"] = time.monotonic() - t
        if "throttle" in parts:
            log(f"[throttle] hot PartitionKeys {', '.join(map(str, args.scaling_hot))}, {args.throttle_clients} "
                f"clients, {args.throttle_duration} s each")
            sc.throttle()
    except B.BenchError as e:
        sc.error = str(e)
        raise
    except KeyboardInterrupt:
        sc.error = "interrupted"
        raise
    finally:
        shutil.rmtree(sc.work, ignore_errors=True)
        if sc.sizes or sc.partitions or sc.conns or sc.throttled:
            write_report(sc)


# ---------------------------------------------------------------------------
# Charts: grouped bars, one panel per measure, one chart per dimension


def nice_ticks(vmax: float) -> list[float]:
    if vmax <= 0:
        return [0.0, 1.0]
    raw = vmax / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(vmax / step - 1e-9)
    return [i * step for i in range(n + 1)]


def svg_panels(title: str, subtitle: str, x_title: str, xs: list[str],
               panels: list[tuple[str, dict[str, list[float | None]]]], colors: dict[str, str],
               notes: list[str] | None = None) -> str:
    """One panel per measure: for each x, one bar per series, its value on
    top; y from 0. Series are named in a legend at the top."""
    bars = len(xs) * max((len(series) for _, series in panels), default=1)
    pw, ph, top = max(330, 64 + bars * 30), 230, 78  # room for each bar's value
    cols = min(3 if pw <= 400 else 2, len(panels))
    rows = math.ceil(len(panels) / cols)
    notes = notes or []
    width = cols * pw + 20
    height = top + rows * ph + 16 * len(notes) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<text x="10" y="38" fill="#555">{escape(subtitle)}</text>']
    lx = 10
    for name, color in colors.items():
        out.append(f'<rect x="{lx}" y="48" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{lx + 16}" y="58">{escape(name)}</text>')
        lx += 28 + int(len(name) * 6.5)
    for idx, (ptitle, series) in enumerate(panels):
        ox, oy = 10 + (idx % cols) * pw, top + (idx // cols) * ph
        left, right, ptop, bottom = 52, 12, 24, 40
        plot_w, plot_h = pw - left - right, ph - ptop - bottom
        vals = [v for vs in series.values() for v in vs if v is not None]
        ticks = nice_ticks(max(vals) * 1.12 if vals else 1.0)  # room for the value above the tallest bar
        vmax = ticks[-1] or 1.0
        x0, y0 = ox + left, oy + ptop + plot_h
        out.append(f'<text x="{ox + left + plot_w / 2:.1f}" y="{oy + 14}" text-anchor="middle" '
                   f'font-weight="bold">{escape(ptitle)}</text>')
        for t in ticks:
            ty = y0 - t / vmax * plot_h
            out.append(f'<line x1="{x0}" y1="{ty:.1f}" x2="{x0 + plot_w}" y2="{ty:.1f}" stroke="#e0e0e0"/>')
            out.append(f'<text x="{x0 - 4}" y="{ty + 4:.1f}" text-anchor="end" fill="#555">'
                       f'{escape(short_count(t) if t else "0")}</text>')
        out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0 + plot_w}" y2="{y0}" stroke="#333"/>')
        group_w = plot_w / max(len(xs), 1)
        names = list(series)
        bar_w = group_w * 0.8 / max(len(names), 1)
        for i, xl in enumerate(xs):
            gx = x0 + i * group_w + group_w * 0.1
            for j, name in enumerate(names):
                v = series[name][i] if i < len(series[name]) else None
                bx = gx + j * bar_w
                if v is None:
                    out.append(f'<text x="{bx + bar_w / 2:.1f}" y="{y0 - 4}" text-anchor="middle" '
                               f'font-size="9" fill="#999">n/a</text>')
                    continue
                bh = max(v / vmax * plot_h, 0.5)
                out.append(f'<rect x="{bx:.1f}" y="{y0 - bh:.1f}" width="{bar_w * 0.92:.1f}" height="{bh:.1f}" '
                           f'fill="{colors.get(name, "#777")}"/>')
                out.append(f'<text x="{bx + bar_w * 0.46:.1f}" y="{y0 - bh - 3:.1f}" text-anchor="middle" '
                           f'font-size="9">{escape(short_count(v))}</text>')
            out.append(f'<text x="{x0 + i * group_w + group_w / 2:.1f}" y="{y0 + 14}" text-anchor="middle">'
                       f'{escape(xl)}</text>')
        out.append(f'<text x="{x0 + plot_w / 2:.1f}" y="{y0 + 30}" text-anchor="middle" fill="#555">'
                   f'{escape(x_title)}</text>')
    for i, note in enumerate(notes):
        out.append(f'<text x="10" y="{top + rows * ph + 14 + 16 * i}" fill="#555">{escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Report


def ratio(v: float | None, base: float | None) -> str:
    if v is None or not base:
        return "n/a"
    return f"{v / base:.2f}×"


def pct(v: float) -> str:
    return f"{v:+.1f}%"


def write_report(sc: Scaling) -> None:
    args = sc.args
    short, full = B.git_commit()
    mach = B.machine_info()
    pg_version = B.run([str(B.PG_BIN / "postgres"), "--version"], "postgres --version").stdout.strip()
    tg_version = B.run([str(sc.binary), "--version"], "tablegate --version").stdout.strip()
    date = sc.started.strftime("%Y-%m-%d")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"scaling-{date}-{short}"
    n = 2
    while (out_dir / f"{stem}.md").exists():
        stem = f"scaling-{date}-{short}-{n}"
        n += 1
    md_path = out_dir / f"{stem}.md"
    subtitle = f"{date}, commit {short}, {B.profile_of(sc.binary)} build, {mach['nproc']} CPUs"
    total_s = sum(sc.stage_s.values())
    md = [f"# How cost grows: tablegate vs PostgreSQL 15, {date}, commit {short}", "",
          "Measured by `bench/run.py --scaling` (`bench/scale.py`, see bench/README.md). One run on the machine "
          "below; raw numbers first, ratios to the smallest case next to them.", ""]
    if sc.error:
        md += [f"**This run did not finish: {sc.error.splitlines()[0][:300]}.** What it measured before is below.",
               ""]
    md += ["| | |", "|---|---|",
           f"| date | {sc.started.isoformat(timespec='seconds')} |",
           f"| commit | {full} |",
           f"| tablegate binary | `{sc.binary}` ({tg_version}), profile **{B.profile_of(sc.binary)}** |",
           f"| tablegate arguments | `serve --throttle off {' '.join(sc.tg_extra)}` (throttled runs: `--throttle on`"
           + (f", `--retry-max {args.throttle_retry_max}`" if "--retry-max" not in " ".join(sc.tg_extra) else "")
           + ")" + (f"; `--tablegate-args {shlex.quote(args.tablegate_args)}`" if args.tablegate_args else "") + " |",
           f"| PostgreSQL | {pg_version}, fsync on, default settings, locale C, except "
           f"max_connections={sc.max_connections} |",
           f"| machine | {mach['nproc']} CPUs ({mach['cpu']}), {mach.get('memory', '?')} memory, "
           f"Linux {mach['kernel']} |",
           f"| pgbench | {args.scaling_duration} s per run, one run per server and measure, `-M prepared`; "
           f"warm-up {args.scaling_warmup} s per server after each load; full scan {args.scaling_scan_runs} runs "
           f"per server (median) |",
           f"| command | `bench/run.py {shlex.join(sys.argv[1:])}` |",
           f"| wall time | {total_s / 60:.1f} min of scaling measurements ("
           + ", ".join(f"{k} {v / 60:.1f} min" for k, v in sc.stage_s.items()) + ") |", ""]

    layout_note = ("Each data set is loaded into a fresh pair of servers: one `\\copy … FROM pstdin CSV` (load "
                   "time), PostgreSQL then `VACUUM ANALYZE` and `CHECKPOINT` (not in the load time). Disk: "
                   "allocated bytes of each data directory ÷ rows (PostgreSQL's includes its WAL). Point lookup: "
                   "run.py's script (random pk and rk), 4 clients. Row range: 100 consecutive rows of one random "
                   "PartitionKey (all of them when it holds fewer), 4 clients. Scan: "
                   f"`{B.SCAN_SQL}`, PostgreSQL with its default (parallel) plan, median of "
                   f"{args.scaling_scan_runs}.")

    def layout_rows(results: list[LayoutResult], key_label) -> list[str]:
        head = ["| " + key_label[0] + " | server | load s | ×1st | disk B/row | point tps | ×1st | range tps "
                "(rows) | ×1st | scan ms | ×1st |", "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        b = results[0]
        for r in results:
            for s in ("PostgreSQL", "tablegate"):
                head.append(f"| {key_label[1](r)} | {s} | {B.fmt_num(r.load_s[s])} | {ratio(r.load_s[s], b.load_s[s])} "
                            f"| {r.disk_per_row[s]:,.0f} | {r.point_tps[s]:,.0f} | "
                            f"{ratio(r.point_tps[s], b.point_tps[s])} | {r.range_tps[s]:,.0f} ({r.range_rows}) | "
                            f"{ratio(r.range_tps[s], b.range_tps[s])} | {B.fmt_num(r.scan_ms[s])} | "
                            f"{ratio(r.scan_ms[s], b.scan_ms[s])} |")
        return head

    def layout_panels(results: list[LayoutResult], with_disk: bool):
        def series(get):
            return {"PostgreSQL": [get(r, "PostgreSQL") for r in results],
                    "tablegate": [get(r, "tablegate") for r in results]}
        panels = [("load time, s (lower is better)", series(lambda r, s: r.load_s[s]))]
        if with_disk:
            panels.append(("disk per row, bytes", series(lambda r, s: r.disk_per_row[s])))
        panels += [("point lookups, tps (4 clients)", series(lambda r, s: r.point_tps[s])),
                   ("row ranges, tps (4 clients)", series(lambda r, s: r.range_tps[s])),
                   ("full-scan aggregate, ms", series(lambda r, s: r.scan_ms[s]))]
        return panels

    colors = {"PostgreSQL": PG_COLOR, "tablegate": TG_COLOR}
    charts: dict[str, str] = {}
    printed: list[str] = []
    if sc.sizes:
        rs = sc.sizes
        table = layout_rows(rs, ("rows", lambda r: f"{r.layout.total:,} ({r.layout.partitions:,} × "
                                                   f"{r.layout.rows:,})"))
        md += ["## Data size", "",
               f"{layout_note} ×1st: the figure ÷ the {rows_label(rs[0].layout.total)} figure. Point and range "
               "throughput should stay flat (×1st ≈ 1); load and scan should grow linearly (×1st ≈ the size "
               f"ratio, {', '.join(f'{r.layout.total / rs[0].layout.total:g}' for r in rs)}).", "", *table, ""]
        lines = ["| rows | PostgreSQL VACUUM ANALYZE + CHECKPOINT s | PostgreSQL table + index B/row | scan runs ms "
                 "(PostgreSQL; tablegate) |", "|---|--:|--:|---|"]
        for r in rs:
            lines.append(f"| {r.layout.total:,} | {B.fmt_num(r.vacuum_s)} | {r.pg_relation_per_row:,.0f} | "
                         f"{', '.join(B.fmt_num(t) for t in r.scan_runs['PostgreSQL'])}; "
                         f"{', '.join(B.fmt_num(t) for t in r.scan_runs['tablegate'])} |")
        charts["size"] = svg_panels("How cost grows with the data: tablegate vs PostgreSQL 15", subtitle,
                                    "rows loaded", [short_count(r.layout.total) for r in rs],
                                    layout_panels(rs, True), colors,
                                    [f"{ROWS_PER_PK:,} rows per PartitionKey; load: one COPY; scan: {B.SCAN_SQL}"])
        md += [*lines, "", f"![data size]({stem}-size.svg)", ""]
        printed += ["Data size", *table, ""]
    if sc.conns:
        md += ["## Connections", "",
               "The base data set; pgbench `-M prepared -j 2 -c N` point lookups for "
               f"{args.scaling_duration} s per server and client count (alternating which server goes first). "
               "tps: pgbench's figure for the whole run (without the connection time), and the mean of its "
               "per-second progress over the second half (new backends and sessions first warm up: catalog "
               "caches, prepared statements; -T counts from before the connections, so with 1,000 clients a run is "
               "shorter than -T). Latency p50 and p99: transactions that ended in the second half of the run, "
               "from pgbench's per-transaction log (`--log --sampling-rate=0.1`; logged: how many). Connect: "
               "pgbench's initial connection time (each of its 2 threads connects its clients in turn). Peak "
               "PSS: the server while the run went on (tablegate's process; PostgreSQL's postmaster and all its "
               f"backends), sampled every {conn_sample_interval(args.scaling_duration):g} s (reading ~1,000 "
               "processes' memory takes CPU from the run).", "",
               "| clients | server | tps | tps 2nd half | p50 ms | p99 ms | logged | connect ms | peak PSS MiB | "
               "error |", "|--:|---|--:|--:|--:|--:|--:|--:|--:|---|"]
        table = md[-2:]
        for r in sorted(sc.conns, key=lambda r: (r.clients, r.server)):
            line = (f"| {r.clients:,} | {r.server} | {B.fmt_num(r.tps)} | {B.fmt_num(r.steady_tps)} | "
                    f"{B.fmt_num(r.p50_ms)} | {B.fmt_num(r.p99_ms)} | {r.logged:,} | {B.fmt_num(r.connect_ms)} | "
                    f"{B.fmt_num(r.peak_mib)} | {r.error} |")
            md.append(line)
            table.append(line)
        cs = args.scaling_connections

        def cseries(get):
            by = {(r.server, r.clients): r for r in sc.conns}
            return {s: [get(by[(s, c)]) if (s, c) in by else None for c in cs] for s in ("PostgreSQL", "tablegate")}

        charts["connections"] = svg_panels(
            "Many connections: tablegate vs PostgreSQL 15", subtitle, "clients (pgbench -c N -j 2)",
            [f"{c:,}" for c in cs],
            [("point lookups, tps (2nd half of the run)", cseries(lambda r: r.steady_tps)),
             ("p99 latency, ms (lower is better)", cseries(lambda r: r.p99_ms)),
             ("peak PSS, MiB (lower is better)", cseries(lambda r: r.peak_mib))], colors,
            [f"{rows_label(args.scaling_rows)}, prepared point lookups, {args.scaling_duration} s per run"])
        md += ["", f"![connections]({stem}-connections.svg)", ""]
        printed += ["Connections", *table, ""]
    if sc.partitions:
        rs = [sc.partitions[p] for p in sorted(sc.partitions)]
        table = layout_rows(rs, ("PartitionKeys", lambda r: f"{r.layout.partitions:,} × {r.layout.rows:,} rows"))
        md += ["## PartitionKeys", "",
               f"The same {args.scaling_rows:,} rows in fewer or more PartitionKeys (rows per key = rows ÷ keys). "
               f"{layout_note} ×1st: the figure ÷ the {rs[0].layout.partitions:,}-key figure. A row range returns "
               "the rows in parentheses (a PartitionKey with fewer than 100 rows is returned whole)."
               + (" The row with the base layout is the data-size run's." if any(
                   r.layout.total == args.scaling_rows and r in sc.sizes for r in rs) else ""), "", *table, "",
               f"![partitions]({stem}-partitions.svg)", ""]
        charts["partitions"] = svg_panels("PartitionKeys: tablegate vs PostgreSQL 15", subtitle,
                                          f"PartitionKeys ({args.scaling_rows:,} rows)",
                                          [short_count(r.layout.partitions) for r in rs],
                                          layout_panels(rs, True), colors)
        printed += ["PartitionKeys", *table, ""]
    if sc.throttled:
        rs = sc.throttled
        t0 = rs[0].targets
        lifted = [r for r in rs if r.series]

        def hot_label(r: ThrottleResult) -> str:
            return f"{r.hot}" + (f" (server target {r.targets['server']:,})" if r.series else "")
        md += ["## The throttled path (tablegate only)", "",
               f"tablegate with `--throttle on` (targets: {t0['partition']:,} entities/s per PartitionKey, "
               f"{t0['server']:,}/s per partition server, {t0['account']:,}/s per account) over "
               f"{THROTTLE_LAYOUT.total:,} rows in {THROTTLE_LAYOUT.partitions:,} PartitionKeys, loaded with "
               "throttling off; a fresh start per run. Each run: pgbench with one script per hot PartitionKey "
               "(point lookups by random RowKey, equal weights), "
               f"`-M prepared -c {args.throttle_clients} -j 2 -T {args.throttle_duration}`; tablegate retries a "
               "throttled lookup itself (exponential backoff, up to "
               f"{args.throttle_retry_max} retries), a lookup whose retries run out fails with 53000 and ends its "
               "pgbench client (counted as failed). Admitted: lookups (one entity each) that pgbench's "
               "per-transaction log shows ending in the steady window — from "
               f"{min(1.0, args.throttle_duration / 10):g} s after the first one to "
               f"{min(1.0, args.throttle_duration / 10):g} s before -T is over ({rs[0].window_s:.1f} s) — per "
               "second, per script = per hot key. (pgbench's own tps, in the notes, also counts the first burst and "
               "the tail in which it waits for lookups still backing off.)", "",
               "Expected: what the targets admit when each hot key is asked for more than it gets — each key up "
               "to the partition target, the keys of one partition server sharing its target, all of them "
               "sharing the account's. Where the hot keys live decides which bucket binds: a table starts as one "
               "range on one partition server, and the balancer moves ranges only after a server has been over "
               "capacity for its whole window (60 s), so in runs this short all hot keys share one server's "
               f"target ({t0['server']:,}/s): it binds from {math.floor(t0['server'] / t0['partition']) + 1:,} hot "
               f"keys on, unless the account target ({t0['account']:,}/s) is lower. "
               + (f"The runs marked with a server target ({', '.join(str(r.hot) for r in lifted)} hot keys; `*` in "
                  f"the chart) lift it to {lifted[0].targets['server']:,}/s, over the account target, so that the "
                  "account target binds. " if lifted else "")
               + "The goal is within ±10% of expected.", "",
               "| hot keys | servers (keys) | binds | expected total/s | admitted total/s | deviation | expected "
               "per key/s | admitted per key/s: mean (min–max) | deviation of mean | keys within ±10% | refused "
               "(partition/server/account) | retries | failed |",
               "|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        table = md[-2:]
        for r in rs:
            keys = Counter(r.pk_server)
            exp_key = statistics.mean(r.expected_pk)
            mean = statistics.mean(r.pk_tps)
            within = sum(1 for v, e in zip(r.pk_tps, r.expected_pk) if abs(v / e - 1) <= 0.10)
            line = (f"| {hot_label(r)} | {', '.join(f'{s} ({k})' for s, k in sorted(keys.items()))} | {r.binding} | "
                    f"{r.expected_total:,.0f} | {r.total_tps:,.1f} | {pct((r.total_tps / r.expected_total - 1) * 100)} "
                    f"| {exp_key:,.1f} | {mean:,.1f} ({min(r.pk_tps):,.1f}–{max(r.pk_tps):,.1f}) | "
                    f"{pct((mean / exp_key - 1) * 100)} | {within} of {r.hot} | "
                    f"{r.refused.get('partition', 0):,}/{r.refused.get('server', 0):,}/{r.refused.get('account', 0):,} "
                    f"| {int(r.point.get('throttled_retries', 0)):,} | {r.aborted} |")
            md.append(line)
            table.append(line)
        md += ["", "Per partition server (admitted = the sum of its hot keys):", "",
               "| hot keys | server | keys | expected/s | admitted/s | deviation |", "|--:|--:|--:|--:|--:|--:|"]
        for r in rs:
            for s, e in sorted(r.expected_server.items()):
                got = sum(v for v, ps in zip(r.pk_tps, r.pk_server) if ps == s)
                md.append(f"| {hot_label(r)} | {s} | {r.pk_server.count(s)} | {e:,.0f} | {got:,.1f} | "
                          f"{pct((got / e - 1) * 100)} |")
        notes = []
        for r in rs:
            if r.moved:
                notes.append(f"- {hot_label(r)} hot key{'s' if r.hot != 1 else ''}: {r.moved}")
            if r.errors:
                notes.append(f"- {hot_label(r)} hot key{'s' if r.hot != 1 else ''}, pgbench errors: " + "; ".join(f"`{e}`" for e in r.errors))
            notes.append(f"- {hot_label(r)} hot key{'s' if r.hot != 1 else ''}: tablegate counted {int(r.point.get('statements', 0)):,} point "
                         f"lookups ({int(r.point.get('errors', 0)):,} errors), "
                         f"{int(r.point.get('throttled_retries', 0)):,} throttled retries, "
                         f"{r.point.get('backoff_ms', 0) / 1000:,.1f} s backing off in all; pgbench "
                         f"{r.transactions:,} transactions, {r.pgbench_tps:,.1f} tps by its own count")
        md += ["", *notes, "", f"![throttle]({stem}-throttle.svg)", ""]
        hs = [f"{r.hot}{'*' if r.series else ''}" for r in rs]
        tcolors = {"expected from the targets": EXPECTED_COLOR, "admitted (measured)": TG_COLOR}
        charts["throttle"] = svg_panels(
            "tablegate's throttled path: admitted throughput against the targets", subtitle,
            "hot PartitionKeys", hs,
            [("all hot keys together, lookups/s", {"expected from the targets": [r.expected_total for r in rs],
                                                   "admitted (measured)": [r.total_tps for r in rs]}),
             ("per hot key (mean), lookups/s", {"expected from the targets": [statistics.mean(r.expected_pk)
                                                                             for r in rs],
                                                "admitted (measured)": [statistics.mean(r.pk_tps) for r in rs]}),
             ("slowest hot key, lookups/s", {"expected from the targets": [min(r.expected_pk) for r in rs],
                                            "admitted (measured)": [min(r.pk_tps) for r in rs]})], tcolors,
            [f"targets {t0['partition']:,}/s per key, {t0['server']:,}/s per server, {t0['account']:,}/s per "
             f"account; {args.throttle_clients} clients, {args.throttle_duration} s per run"
             + (f"; *: server target lifted to {lifted[0].targets['server']:,}/s" if lifted else "")])
        printed += ["Throttled path", *table, ""]
    if sc.class_problems:
        md += ["**Warning: some queries were not classified as expected; their numbers do not measure what they "
               "say.**", ""] + [f"- {p}" for p in sc.class_problems] + [""]
    md_path.write_text("\n".join(md) + "\n")
    for name, svg in charts.items():
        (out_dir / f"{stem}-{name}.svg").write_text(svg)
    print()
    print("\n".join(printed))
    log(f"wrote {md_path}" + (f" and {', '.join(f'{stem}-{n}.svg' for n in charts)}" if charts else ""))


if __name__ == "__main__":
    print("bench/scale.py is run through bench/run.py: python3 bench/run.py --scaling [only] ...", file=sys.stderr)
    sys.exit(2)
