#!/usr/bin/env python3
"""Side-by-side benchmark: tablegate against PostgreSQL 15 on the same data.

Starts a throwaway PostgreSQL 15 cluster and a tablegate server, loads the
same table into both, drives both with pgbench custom scripts and prints
tablegate/PostgreSQL ratios. Writes the results (every raw number) as
Markdown plus an SVG bar chart of the ratios under bench/results/.

Python 3.11 standard library only. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import random
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

REPO = Path(__file__).resolve().parent.parent
PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCAN_SQL = "SELECT count(*), avg(d) FROM entities WHERE n % 7 = 3"
T0 = time.monotonic()


class BenchError(Exception):
    """A failure that ends the run with a message on stderr."""


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:8.1f}s] {msg}", flush=True)


def fmt_num(v: float | None) -> str:
    """One decimal from 10 up, three significant digits below (a tiny
    data set has loads and scans of a few milliseconds)."""
    if v is None:
        return "n/a"
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"


def plural(n: int, word: str = "client") -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_ratio(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}"


# ---------------------------------------------------------------------------
# Processes and memory


def read_pss_kib(pid: int) -> int:
    """PSS of one process in KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def read_status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def descendants(root: int) -> list[int]:
    """root and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after it.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class MemSampler(threading.Thread):
    """Samples the summed PSS of each server every `interval` seconds and
    keeps the peak per phase."""

    def __init__(self, interval: float = 0.2):
        super().__init__(daemon=True)
        self.interval = interval
        self.targets: dict[str, tuple[int, bool]] = {}  # name -> (pid, with children)
        self.phase = "load"
        self.peaks: dict[tuple[str, str], int] = {}
        self.samples = 0
        self.lock = threading.Lock()
        self.stop_event = threading.Event()

    def watch(self, name: str, pid: int, tree: bool) -> None:
        with self.lock:
            self.targets[name] = (pid, tree)

    def sample(self) -> None:
        with self.lock:
            targets = dict(self.targets)
            phase = self.phase
        for name, (pid, tree) in targets.items():
            pids = descendants(pid) if tree else [pid]
            kib = sum(read_pss_kib(p) for p in pids)
            with self.lock:
                key = (name, phase)
                self.peaks[key] = max(self.peaks.get(key, 0), kib)
        self.samples += 1

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.sample()

    def peak_mib(self, name: str, phase: str | None = None) -> float | None:
        with self.lock:
            vals = [v for (n, p), v in self.peaks.items() if n == name and (phase is None or p == phase)]
        return max(vals) / 1024 if vals else None


def disk_bytes(path: Path) -> int:
    """Allocated bytes under path (as du counts them)."""
    total = 0
    seen = set()
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile(want: int = 65536) -> int:
    """Raises this process's open-files limit (inherited by pgbench and both
    servers): 1,000 clients need 1,000 sockets in pgbench and in the server.
    Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want and os.geteuid() == 0:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return want
        except (ValueError, OSError):
            pass
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def pss_kib(pid: int, tree: bool) -> int:
    """PSS of a server now: the process, or the process and every process
    below it (PostgreSQL's postmaster and its backends)."""
    return sum(read_pss_kib(p) for p in (descendants(pid) if tree else [pid]))


def settled_pss_kib(pid: int, tree: bool, samples: int = 3, gap: float = 0.3) -> int:
    """The median of a few PSS samples a moment apart."""
    vals = []
    for i in range(samples):
        if i:
            time.sleep(gap)
        vals.append(pss_kib(pid, tree))
    return int(statistics.median(vals))


# ---------------------------------------------------------------------------
# Idle connections: raw protocol-3 sessions, authenticated and left idle


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buf += chunk
        return buf

    head = exactly(5)
    length = struct.unpack("!i", head[1:])[0]
    return head[:1], exactly(length - 4)


def _until_ready(sock: socket.socket, what: str) -> None:
    """Reads messages up to ReadyForQuery; an ErrorResponse or a request for
    a password is a BenchError."""
    while True:
        kind, body = _read_message(sock)
        if kind == b"Z":
            return
        if kind == b"R" and struct.unpack("!i", body[:4])[0] != 0:
            raise BenchError(f"{what}: the server asks for a password (authentication request "
                             f"{struct.unpack('!i', body[:4])[0]}); the bench needs trust authentication")
        if kind == b"E":
            fields = {f[:1]: f[1:].decode(errors="replace") for f in body.split(b"\0") if f}
            raise BenchError(f"{what}: {fields.get(b'S', 'ERROR')} {fields.get(b'C', '?')}: {fields.get(b'M', '')}")


def open_idle_session(server: Server, timeout: float = 60) -> socket.socket:
    """A connection that has done what a client does before it waits: the
    startup message, authentication (trust), one `SELECT 1`."""
    what = f"idle connection to {server.name}"
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    try:
        params = b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in
                          (("user", server.user), ("database", server.db), ("application_name", "bench-idle")))
        params += b"\0"
        sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        _until_ready(sock, what)
        query = b"SELECT 1\0"
        sock.sendall(b"Q" + struct.pack("!i", 4 + len(query)) + query)
        _until_ready(sock, what)
    except OSError as e:
        sock.close()
        raise BenchError(f"{what}: {e}") from e
    except BaseException:
        sock.close()
        raise
    return sock


def close_idle_sessions(socks: list[socket.socket]) -> None:
    for sock in socks:
        try:
            sock.sendall(b"X" + struct.pack("!i", 4))
        except OSError:
            pass
        sock.close()


def idle_connection_memory(server: Server, pid: int, tree: bool, n: int) -> dict:
    """PSS of a server before and with n idle connections; MiB each."""
    time.sleep(0.5)
    before = settled_pss_kib(pid, tree)
    socks: list[socket.socket] = []
    start = time.monotonic()
    try:
        try:
            for _ in range(n):
                socks.append(open_idle_session(server))
        except BenchError as e:
            raise BenchError(f"idle connection {len(socks) + 1} of {n}: {e}") from e
        opened = time.monotonic() - start
        time.sleep(1.0)
        server.check_alive()
        with_n = settled_pss_kib(pid, tree)
    finally:
        close_idle_sessions(socks)
    per = (with_n - before) / n / 1024
    log(f"e idle connections        {server.name:<10} {n} opened in {opened:.1f} s: PSS {before / 1024:,.1f} MiB -> "
        f"{with_n / 1024:,.1f} MiB, {per:.3f} MiB per connection")
    return {"n": n, "before_mib": before / 1024, "with_mib": with_n / 1024, "per_conn_mib": per,
            "open_s": opened}


def clean_env() -> dict[str, str]:
    """The environment without PG* variables that could redirect a client."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def run(cmd: list[str], what: str, timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=clean_env(), **kw)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{what}: no answer after {timeout:.0f} s: {' '.join(cmd)}") from e
    if out.returncode != 0:
        raise BenchError(f"{what} failed (exit {out.returncode}): {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return out


# ---------------------------------------------------------------------------
# Servers


@dataclass
class Server:
    name: str  # "PostgreSQL" or "tablegate"
    port: int
    user: str
    db: str
    data_dir: Path
    alive_check: object = None

    def conn_args(self) -> list[str]:
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", self.user]

    def psql(self, *commands: str, what: str = "psql", timeout: float | None = 600, tuples: bool = True) -> str:
        cmd = ["psql", "-X", "-v", "ON_ERROR_STOP=1", *self.conn_args(), "-d", self.db]
        if tuples:
            cmd += ["-A", "-t", "-F", "|"]
        for c in commands:
            cmd += ["-c", c]
        out = run(cmd, f"{what} on {self.name}", timeout=timeout)
        self.check_alive()
        return out.stdout

    def check_alive(self) -> None:
        if self.alive_check is not None:
            self.alive_check()


def as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


class PgCluster:
    def __init__(self, work: Path, max_connections: int | None = None):
        self.dir = work / "pg"
        self.data = self.dir / "data"
        self.port = free_port()
        self.max_connections = max_connections  # None: PostgreSQL's default (100)
        self.started = False
        self.server = Server("PostgreSQL", self.port, "postgres", "postgres", self.data)
        self.server.alive_check = self.check_alive

    def start(self) -> None:
        self.dir.mkdir()
        if os.geteuid() == 0:
            if subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
                raise BenchError("the `postgres` system user is missing (PostgreSQL refuses to run as root): useradd -r postgres")
            run(["chown", "-R", "postgres", str(self.dir)], "chown")
        # Same key order as tablegate (ordinal): the C collation.
        run(as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                         "-E", "UTF8", "--locale=C", "--no-sync"]), "initdb", timeout=300)
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir}"
        if self.max_connections:
            opts += f" -c max_connections={self.max_connections}"
        self.started = True  # a start that timed out may still leave a server to stop
        try:
            run(as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                             str(self.dir / "log"), "-w", "-t", "120", "start"]), "pg_ctl start", timeout=180)
        except BenchError as e:
            raise BenchError(f"{e}\n{self.log_tail()}") from e

    def log_tail(self) -> str:
        try:
            return (self.dir / "log").read_text()[-3000:]
        except OSError:
            return ""

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def check_alive(self) -> None:
        try:
            os.kill(self.postmaster_pid(), 0)
        except (OSError, ValueError) as e:
            raise BenchError(f"PostgreSQL is not running any more:\n{self.log_tail()}") from e

    def stop(self, keep: bool) -> None:
        if not self.started:
            return
        mode = "fast" if keep else "immediate"
        subprocess.run(as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
                       capture_output=True, timeout=300)
        self.started = False


class Tablegate:
    def __init__(self, binary: Path, work: Path, extra: list[str] | None = None, throttle: bool = False):
        self.binary = binary
        self.extra = extra or []
        self.throttle = throttle
        self.data = work / "tg-data"
        self.log_path = work / "tablegate.log"
        self.proc: subprocess.Popen | None = None
        self.server = Server("tablegate", 0, "tablegate", "tablegate", self.data)
        self.server.alive_check = self.check_alive

    def start(self) -> None:
        self.log_file = open(self.log_path, "w")
        # Its own session: a Ctrl-C reaches the script, which stops it.
        self.proc = subprocess.Popen(
            [str(self.binary), "serve", "--data", str(self.data), "--listen", "127.0.0.1:0",
             "--throttle", "on" if self.throttle else "off", *self.extra],
            stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=clean_env(),
            start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = re.search(r"tablegate listening on [\d.]+:(\d+)", self.log_path.read_text())
            if m:
                self.server.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise BenchError(f"tablegate exited with {self.proc.returncode} at start:\n{self.log_tail()}")
            time.sleep(0.05)
        raise BenchError(f"tablegate did not print its listen address in 120 s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            rc = None if self.proc is None else self.proc.returncode
            raise BenchError(f"tablegate is not running any more (exit status {rc}):\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.log_file.close()


# ---------------------------------------------------------------------------
# Data


@dataclass
class Layout:
    partitions: int
    rows: int

    @property
    def pk_base(self) -> int:
        # Every PartitionKey has the same number of digits: base .. base+P-1.
        return 10 ** len(str(self.partitions))

    @property
    def rk_base(self) -> int:
        return 10 ** len(str(self.rows))

    @property
    def total(self) -> int:
        return self.partitions * self.rows


WORDS = ("amber basalt cedar delta ember fjord garnet harbor indigo juniper kestrel lagoon meadow "
         "nectar onyx prairie quartz raven sierra tundra umber violet willow xenon yarrow zephyr").split()


def write_csv(path: Path, layout: Layout, seed: int = 20240917) -> None:
    """Writes the data set, sorted by key. n and d are pseudo-random but the
    same for every run with the same seed; s is about 100 characters."""
    rng = random.Random(seed)
    text = "-".join(rng.choice(WORDS) for _ in range(200))
    start = time.monotonic()
    last = start
    with open(path, "w") as f:
        for p in range(layout.partitions):
            pk = layout.pk_base + p
            lines = []
            for r in range(layout.rows):
                o = rng.randrange(len(text) - 120)
                s = text[o:o + 96 + rng.randrange(9)].strip("-")
                lines.append(f"{pk},{layout.rk_base + r},{rng.randrange(1_000_000)},{s},{rng.random() * 1000:.6f}\n")
            f.write("".join(lines))
            now = time.monotonic()
            if now - last > 10:
                last = now
                log(f"  generating CSV: {(p + 1) * layout.rows:,} of {layout.total:,} rows")
    log(f"generated {path.name}: {layout.total:,} rows, {path.stat().st_size / 2**20:.1f} MiB "
        f"in {time.monotonic() - start:.1f} s")


CREATE_SQL = ("CREATE TABLE entities (pk text, rk text, n int, s text, d double precision, "
              "PRIMARY KEY (pk, rk))")


def load(server: Server, csv: Path, total: int) -> float:
    """COPYs the CSV through psql's stdin (one COPY statement), printing
    progress; returns the elapsed seconds."""
    cmd = ["psql", "-X", "-v", "ON_ERROR_STOP=1", *server.conn_args(), "-d", server.db,
           "-c", r"\copy entities FROM pstdin WITH (FORMAT csv)"]
    with tempfile.TemporaryFile("w+") as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=clean_env())
        sent, last, next_pct = 0, start, 10
        try:
            with open(csv, "rb") as f:
                while block := f.read(1 << 20):
                    proc.stdin.write(block)
                    sent += block.count(b"\n")
                    now = time.monotonic()
                    pct = 100 * sent // max(total, 1)
                    if pct >= next_pct or now - last >= 15:
                        last = now
                        next_pct = pct // 10 * 10 + 10
                        log(f"  load {server.name}: {sent:,} of {total:,} rows sent ({pct}%), "
                            f"{now - start:.1f} s, {sent / (now - start):,.0f} rows/s")
            proc.stdin.close()
        except BrokenPipeError:
            pass
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        rc = proc.wait()
        elapsed = time.monotonic() - start
        out.seek(0)
        text = out.read()
    if rc != 0 or f"COPY {total}" not in text:
        raise BenchError(f"loading {server.name} failed (psql exit {rc}):\n{text}")
    server.check_alive()
    log(f"loaded {server.name}: {total:,} rows in {elapsed:.1f} s ({total / elapsed:,.0f} rows/s)")
    return elapsed


# ---------------------------------------------------------------------------
# Workloads


@dataclass
class Workload:
    id: str  # a, b, c or d
    key: str  # unique name
    title: str
    mode: str = "prepared"
    clients: int = 1
    script: str = ""
    rows_per_txn: int = 1
    expect_class: str = ""  # tablegate class in EXPLAIN / query_counters
    writes: bool = False
    explain_sql: str = ""


def pgbench_scripts(layout: Layout, group_rows: int = 100) -> dict[str, str]:
    pb, rb, P, R = layout.pk_base, layout.rk_base, layout.partitions, layout.rows
    rk_hi = rb + max(R - 100, 0)
    # `:p::text`: in -M prepared pgbench sends `$1::text`, in -M simple the
    # text `10042::text`; PostgreSQL and tablegate accept both.
    point = (f"\\set p random({pb}, {pb + P - 1})\n"
             f"\\set r random({rb}, {rb + R - 1})\n"
             "SELECT n, s, d FROM entities WHERE pk = :p::text AND rk = :r::text;\n")
    rng = (f"\\set p random({pb}, {pb + P - 1})\n"
           f"\\set lo random({rb}, {rk_hi})\n"
           "\\set hi :lo + 100\n"
           "SELECT rk, n, s, d FROM entities WHERE pk = :p::text AND rk >= :lo::text AND rk < :hi::text;\n")
    # New PartitionKeys: a per-client counter (-D c=0), the client id and a
    # per-run base (-D base=...): never one of the loaded keys, never twice.
    newkey = "\\set c :c + 1\n\\set k :base + :c * 1000 + :client_id\n"
    egt = newkey + "BEGIN;\n" + "".join(
        f"INSERT INTO entities (pk, rk, n, s, d) VALUES (:k::text, '{1000 + i}', {i}, 'egt row {i}', {i}.5);\n"
        for i in range(group_rows)) + "COMMIT;\n"
    multi = newkey + "INSERT INTO entities (pk, rk, n, s, d) VALUES " + ", ".join(
        f"(:k::text, '{1000 + i}', {i}, 'multi row {i}', {i}.5)" for i in range(group_rows)) + ";\n"
    # One loaded row by its key, read and written back (an OLTP write).
    update = (f"\\set p random({pb}, {pb + P - 1})\n"
              f"\\set r random({rb}, {rb + R - 1})\n"
              "UPDATE entities SET n = n + 1 WHERE pk = :p::text AND rk = :r::text;\n")
    return {"point": point, "range": rng, "egt": egt, "multi": multi, "update": update}


def substitute(script: str, values: dict[str, int]) -> str:
    """The script's SQL with pgbench variables replaced as -M simple would."""
    sql = " ".join(line for line in script.splitlines() if not line.startswith("\\"))
    return re.sub(r"(?<!:):([A-Za-z_]\w*)", lambda m: str(values.get(m.group(1), m.group(0))), sql)


@dataclass
class PgbenchResult:
    server: str
    workload: str
    mode: str
    clients: int
    duration: int
    transactions: int
    failed: int
    tps: float
    latency_ms: float | None
    counters: dict[str, int] = field(default_factory=dict)


def parse_pgbench(text: str) -> tuple[int, int, float, float | None]:
    def grab(pattern: str) -> str | None:
        m = re.search(pattern, text, re.M)
        return m.group(1) if m else None

    txns = grab(r"^number of transactions actually processed: (\d+)")
    failed = grab(r"^number of failed transactions: (\d+)")
    tps = grab(r"^tps = ([\d.]+)")
    lat = grab(r"^latency average = ([\d.]+) ms")
    if txns is None or tps is None:
        raise BenchError(f"cannot read pgbench's output:\n{text}")
    return int(txns), int(failed or 0), float(tps), float(lat) if lat else None


def query_counters(tg: Server) -> dict[str, int]:
    out = tg.psql("SELECT class, statements, errors FROM tablegate.query_counters", what="query_counters")
    counts = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3:
            counts[parts[0]] = int(parts[1])
            counts[parts[0] + " errors"] = int(parts[2])
    return counts


class Bench:
    def __init__(self, args, work: Path, pg: PgCluster, tg: Tablegate, sampler: MemSampler):
        self.args = args
        self.work = work
        self.pg = pg.server
        self.tg = tg.server
        self.sampler = sampler
        self.results: list[PgbenchResult] = []
        self.explain: dict[str, str] = {}  # workload key -> tablegate class and route
        self.class_problems: list[str] = []
        self.write_runs = 0
        self.titles: dict[str, str] = {}

    def pgbench(self, server: Server, w: Workload, duration: int, measured: bool = True) -> PgbenchResult:
        path = self.work / f"{w.key}.sql"
        path.write_text(w.script)
        cmd = ["pgbench", "-n", "-f", str(path), "-T", str(duration), "-c", str(w.clients), "-j", str(w.clients),
               "-M", w.mode, *server.conn_args()]
        if w.writes:
            self.write_runs += 1
            cmd += ["-D", "c=0", "-D", f"base={(10 + self.write_runs) * 10 ** 12}"]
        cmd.append(server.db)
        before = query_counters(server) if server is self.tg else {}
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 3 + 120, env=clean_env())
        except subprocess.TimeoutExpired as e:
            server.check_alive()
            raise BenchError(f"pgbench did not finish in {duration * 3 + 120} s: {' '.join(cmd)}") from e
        server.check_alive()
        text = out.stdout + out.stderr
        if out.returncode != 0 or "aborted" in out.stderr or "error:" in out.stderr.lower():
            raise BenchError(f"pgbench on {server.name} ({w.key}) failed (exit {out.returncode}):\n"
                             f"{' '.join(cmd)}\n{text}")
        txns, failed, tps, lat = parse_pgbench(out.stdout)
        if failed:
            raise BenchError(f"pgbench on {server.name} ({w.key}) reported {failed} failed transactions:\n{text}")
        if txns == 0:
            raise BenchError(f"pgbench on {server.name} ({w.key}) processed no transaction:\n{text}")
        r = PgbenchResult(server.name, w.key, w.mode, w.clients, duration, txns, failed, tps, lat)
        if server is self.tg:
            after = query_counters(server)
            r.counters = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        unit = "rows/s" if w.rows_per_txn > 1 else "tps"
        tag = "" if measured else " (warm-up, not reported)"
        log(f"{w.id} {w.key:<22} {server.name:<10} {tps * w.rows_per_txn:>12,.1f} {unit:<6} "
            f"lat {lat or 0:.3f} ms  ({txns:,} txns in {duration} s){tag}")
        if server is self.tg and measured:
            self.check_counters(w, r)
        if measured:
            self.results.append(r)
            self.titles[w.key] = w.title
        return r

    def rounds(self, w: Workload, duration: int, rounds: int) -> None:
        """`rounds` runs on each server, alternating which goes first, so
        that a slow spell of this shared machine (or a warm cache left by
        the other server) does not land on one server only."""
        for i in range(rounds):
            for s in ((self.pg, self.tg) if i % 2 == 0 else (self.tg, self.pg)):
                self.pgbench(s, w, duration)

    def check_counters(self, w: Workload, r: PgbenchResult) -> None:
        """tablegate's own per-class statement counters must show the class
        EXPLAIN promised, once per statement pgbench ran."""
        want = "write" if w.writes else w.expect_class
        statements = r.transactions * (w.rows_per_txn if w.key.startswith("egt") else 1)
        got = r.counters.get(want, 0)
        stray = {k: v for k, v in r.counters.items()
                 if k not in (want, "analytics", "other") and not k.endswith(" errors")}
        if got < statements or stray:
            self.class_problems.append(
                f"{w.key}: expected {statements:,} `{want}` statements in tablegate.query_counters, "
                f"counted {r.counters}")
            print(f"WARNING: {self.class_problems[-1]}", file=sys.stderr, flush=True)

    def explain_class(self, w: Workload) -> None:
        if w.key in self.explain or not w.explain_sql:
            return
        out = self.tg.psql(f"EXPLAIN {w.explain_sql}", what="EXPLAIN")
        classes = sorted(set(re.findall(r"Class: ([\w-]+)", out)) | set(re.findall(r"class=([\w-]+)", out)))
        route = re.search(r"Route: ([^:(\n]+)", out)
        desc = f"class {', '.join(classes) or '?'}, route {route.group(1).strip() if route else '?'}"
        self.explain[w.key] = desc
        log(f"{w.id} {w.key:<22} tablegate EXPLAIN: {desc}   [{w.explain_sql}]")
        if classes != [w.expect_class]:
            self.class_problems.append(f"{w.key}: EXPLAIN {w.explain_sql} gives {desc}, expected {w.expect_class}")
            print(f"WARNING: {self.class_problems[-1]}", file=sys.stderr, flush=True)

    def scan(self, server: Server, serial: bool, runs: int) -> tuple[list[float], str]:
        cmds = []
        if serial:
            cmds.append("SET max_parallel_workers_per_gather = 0")
        cmds.append("\\timing on")
        cmds += [SCAN_SQL] * runs
        out = server.psql(*cmds, what="full-scan aggregate", timeout=3600 * runs)
        times = [float(t) for t in re.findall(r"^Time: ([\d.]+) ms", out, re.M)]
        answers = [line for line in out.splitlines() if "|" in line]
        # A parallel plan sums in a different order each run: the average
        # may differ in its last digits.
        if len(times) != runs or len(answers) != runs or any(not same_answer(a, answers[0]) for a in answers):
            raise BenchError(f"full-scan aggregate on {server.name}: unexpected psql output:\n{out}")
        label = f"{server.name}{' serial' if serial else ''}"
        log(f"c scan-aggregate         {label:<10} median {statistics.median(times):,.1f} ms, "
            f"min {min(times):,.1f} ms ({runs} runs)")
        return times, answers[0]


def columnar_reference(csv: Path, work: Path, runs: int) -> dict | None:
    """The full-scan aggregate in a columnar engine on the same rows:
    DataFusion (its Python package) over a Parquet file written from the
    CSV, the same SQL, timed in this process (planning, reading the file and
    collecting the answer) after one untimed run. None, with a log line, when `datafusion` and
    `pyarrow` are not installed: they are optional (`pip install datafusion
    pyarrow`)."""
    try:
        import datafusion
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        log("c scan-aggregate: no columnar reference (pip install datafusion pyarrow to measure one)")
        return None
    schema = pa.schema([("pk", pa.string()), ("rk", pa.string()), ("n", pa.int32()), ("s", pa.string()),
                        ("d", pa.float64())])
    table = pacsv.read_csv(csv, read_options=pacsv.ReadOptions(column_names=schema.names),
                           convert_options=pacsv.ConvertOptions(column_types=schema))
    path = work / "entities.parquet"
    pq.write_table(table, path)
    del table
    ctx = datafusion.SessionContext()
    ctx.register_parquet("entities", str(path))
    ctx.sql(SCAN_SQL).collect()  # not timed: starts its thread pool (the servers are warm by now)
    times, answers = [], []
    for _ in range(runs):
        t = time.perf_counter()
        batches = ctx.sql(SCAN_SQL).collect()
        times.append((time.perf_counter() - t) * 1000)
        row = pa.Table.from_batches(batches).to_pylist()[0]
        count, avg = row.values()
        answers.append(f"{count}|{avg}")
    if any(not same_answer(a, answers[0]) for a in answers):
        raise BenchError(f"DataFusion over Parquet answered {SCAN_SQL} differently between runs: {answers}")
    label = f"DataFusion {datafusion.__version__} over Parquet (pyarrow {pa.__version__})"
    log(f"c scan-aggregate         DataFusion median {statistics.median(times):,.1f} ms, "
        f"min {min(times):,.1f} ms ({runs} runs; {label}; Parquet {path.stat().st_size / 2**20:.1f} MiB)")
    return {"label": label, "times": times, "answer": answers[0], "parquet_mib": path.stat().st_size / 2**20}


def same_answer(a: str, b: str) -> bool:
    """count|avg lines: the same count, the same average but for rounding."""
    try:
        (ca, aa), (cb, ab) = (x.split("|") for x in (a, b))
        return int(ca) == int(cb) and math.isclose(float(aa), float(ab), rel_tol=1e-9, abs_tol=1e-9)
    except ValueError:
        return False


# ---------------------------------------------------------------------------
# Report


@dataclass
class Row:
    id: str
    key: str
    title: str
    unit: str
    pg: float | None
    tg: float | None
    ratio: float | None
    spread: str = ""  # what the medians summarise (each round's ratio, or the runs)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def machine_info() -> dict[str, str]:
    info = {"nproc": str(len(os.sched_getaffinity(0))), "kernel": os.uname().release}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory"] = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("model name", "Model", "cpu model"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpu"] = cpu
    return info


def git_commit() -> tuple[str, str]:
    try:
        short = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                               text=True).stdout.strip()
        full = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return short or "unknown", (full or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown", "unknown"


def profile_of(binary: Path) -> str:
    parts = binary.parts
    for p in ("release", "debug"):
        if p in parts:
            return p
    return "unknown (not under target/release or target/debug)"


def svg_chart(rows: list[Row], title: str, subtitle: str) -> str:
    """Horizontal bars on a log scale from the 1.0 line: right of it
    tablegate is faster, left of it slower."""
    bars = [r for r in rows if r.ratio is not None and r.ratio > 0]
    longest = max([len(r.id + ": " + r.title) for r in bars] + [20])
    label_w, plot_w, right_w, bar_h, gap, top = int(longest * 6.8) + 20, 420, 70, 20, 8, 64
    width = label_w + plot_w + right_w
    height = top + len(bars) * (bar_h + gap) + 40
    lo_exp = math.floor(math.log10(min([r.ratio for r in bars] + [1.0])))
    hi_exp = math.ceil(math.log10(max([r.ratio for r in bars] + [1.0])))
    lo_exp, hi_exp = min(lo_exp, -1), max(hi_exp, 1)

    def x(v: float) -> float:
        return label_w + (math.log10(v) - lo_exp) / (hi_exp - lo_exp) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<text x="10" y="38" fill="#555">{escape(subtitle)}</text>']
    axis_y = top + len(bars) * (bar_h + gap)
    for e in range(lo_exp, hi_exp + 1):
        gx = x(10.0 ** e)
        label = f"{10.0 ** e:g}"
        out.append(f'<line x1="{gx:.1f}" y1="{top - 6}" x2="{gx:.1f}" y2="{axis_y}" stroke="#ddd"/>')
        out.append(f'<text x="{gx:.1f}" y="{axis_y + 14}" text-anchor="middle" fill="#555">{label}</text>')
    out.append(f'<text x="{label_w + plot_w / 2:.1f}" y="{axis_y + 30}" text-anchor="middle" fill="#555">'
               f'tablegate speed ÷ PostgreSQL speed (log scale; right of 1.0: tablegate faster)</text>')
    for i, r in enumerate(bars):
        y = top + i * (bar_h + gap)
        x0, x1 = x(1.0), x(r.ratio)
        color = "#2e7d32" if r.ratio >= 1 else "#e65100"
        out.append(f'<text x="{label_w - 8}" y="{y + bar_h - 6}" text-anchor="end">'
                   f'{escape(r.id + ": " + r.title)}</text>')
        out.append(f'<rect x="{min(x0, x1):.1f}" y="{y}" width="{max(abs(x1 - x0), 1):.1f}" height="{bar_h}" '
                   f'fill="{color}"/>')
        out.append(f'<text x="{label_w + plot_w + 6}" y="{y + bar_h - 6}">{fmt_ratio(r.ratio)}×</text>')
    out.append(f'<line x1="{x(1.0):.1f}" y1="{top - 10}" x2="{x(1.0):.1f}" y2="{axis_y}" stroke="black" '
               f'stroke-width="2"/>')
    out.append(f'<text x="{x(1.0):.1f}" y="{top - 14}" text-anchor="middle">1.0</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Main


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tablegate", default=str(REPO / "target/release/tablegate"),
                    help="tablegate binary (default: target/release/tablegate)")
    ap.add_argument("--partitions", type=int, default=1000, help="PartitionKeys (default 1000)")
    ap.add_argument("--rows", type=int, default=1000, help="rows per PartitionKey (default 1000)")
    ap.add_argument("--duration", type=int, default=20, help="seconds per pgbench run (default 20)")
    ap.add_argument("--clients", default="1,4,16", help="client counts of the point lookups (default 1,4,16)")
    ap.add_argument("--group-clients", type=int, default=4,
                    help="clients of the row-range and write workloads (default 4)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="pgbench runs per server and workload, alternating which server goes first; the report "
                         "gives each server's median (default 3)")
    ap.add_argument("--runs", type=int, default=5, help="runs of the full-scan aggregate (default 5)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="seconds of point lookups on each server before measuring (default 5, 0: none)")
    ap.add_argument("--only", default="a,b,c,d",
                    help="workloads to run: a (point), b (range), c (scan), d (writes); default all")
    ap.add_argument("--out", default=str(REPO / "bench/results"), help="directory of the results")
    ap.add_argument("--keep", action="store_true", help="keep the data directories (their path is printed)")
    ap.add_argument("--tablegate-args", default="", metavar="ARGS",
                    help="extra arguments of `tablegate serve`, one string, e.g. \"--cache-mb 64 --memtable-mb 16\" "
                         "(the report names them; --throttle is the bench's)")
    ap.add_argument("--idle-connections", type=int, default=100, metavar="N",
                    help="after the load, open N idle connections to each server and report the memory each "
                         "costs (default 100, 0: skip)")
    import scale  # bench/scale.py: the scaling measurements (issue 40); it imports this module
    scale.add_args(ap)
    args = ap.parse_args(argv)
    try:
        args.tablegate_extra = shlex.split(args.tablegate_args)
    except ValueError as e:
        ap.error(f"--tablegate-args: {e}")
    if any(a == "--throttle" or a.startswith("--throttle=") for a in args.tablegate_extra):
        ap.error("--tablegate-args: the bench sets --throttle itself (off, and on for the throttled scaling runs)")
    if args.idle_connections < 0:
        ap.error("--idle-connections must be 0 or more")
    scale.check_args(ap, args)
    names = {"point": "a", "range": "b", "scan": "c", "egt": "d", "multi": "d", "writes": "d"}
    args.only = {names.get(w.strip(), w.strip()) for w in args.only.split(",") if w.strip()}
    if not args.only <= {"a", "b", "c", "d"}:
        ap.error("--only takes a, b, c, d (or point, range, scan, writes)")
    try:
        args.clients = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        ap.error("--clients is a comma-separated list of numbers, e.g. 1,4,16")
    if not args.clients or min(args.clients + [args.group_clients]) < 1 or max(args.clients + [args.group_clients]) > 1000:
        ap.error("client counts must be from 1 to 1000")
    if min(args.partitions, args.rows, args.duration, args.runs, args.rounds) < 1:
        ap.error("--partitions, --rows, --duration, --runs and --rounds must be positive")
    return args


def check_tools(args) -> Path:
    binary = Path(args.tablegate)
    if not binary.is_absolute():
        binary = (Path.cwd() / binary).resolve()
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise BenchError(f"no tablegate binary at {binary}: run `cargo build --release` first "
                         f"(or pass --tablegate PATH)")
    for tool in ("psql", "pgbench"):
        if shutil.which(tool) is None:
            raise BenchError(f"`{tool}` is not on PATH: install postgresql-client (.ci/run does)")
    for tool in ("initdb", "pg_ctl"):
        if not (PG_BIN / tool).exists():
            raise BenchError(f"PostgreSQL 15 is not installed ({PG_BIN / tool} is missing): .ci/run installs it")
    return binary


def connection_limit(args) -> int:
    """Connections each server allows in the normal run: the largest pgbench
    run or the idle connections, with room for the bench's own psql."""
    return max(100, max(args.clients + [args.group_clients]) + 20, args.idle_connections + 20)


def tablegate_extra(args, max_connections: int) -> list[str]:
    """--tablegate-args, and the connection limit unless those set it."""
    extra = list(args.tablegate_extra)
    if not any(a == "--max-connections" or a.startswith("--max-connections=") for a in extra):
        extra += ["--max-connections", str(max_connections)]
    return extra


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    binary = check_tools(args)
    nofile = raise_nofile()
    started = datetime.datetime.now().astimezone()
    status = 0
    if args.scaling != "only":
        status = main_run(args, binary, started)
    if args.scaling:
        if nofile < max(args.scaling_connections) + 100:
            raise BenchError(f"the open-files limit is {nofile}: too low for {max(args.scaling_connections)} "
                             "connections (ulimit -n)")
        import scale
        scale.run_scaling(args, binary, started)
    return status


def main_run(args, binary: Path, started: datetime.datetime) -> int:
    layout = Layout(args.partitions, args.rows)
    work = Path(tempfile.mkdtemp(prefix="tg-bench-"))
    os.chmod(work, 0o711)  # the postgres user reaches work/pg
    args.max_connections = connection_limit(args)
    pg = PgCluster(work, max_connections=args.max_connections)
    tg = Tablegate(binary, work, tablegate_extra(args, args.max_connections))
    args.tablegate_serve = " ".join(["serve", "--throttle", "off", *tg.extra])
    sampler = MemSampler()
    try:
        log(f"work directory {work}")
        pg.start()
        log(f"PostgreSQL 15 on 127.0.0.1:{pg.port} (data {pg.data})")
        tg.start()
        log(f"tablegate ({profile_of(binary)}) on 127.0.0.1:{tg.server.port} (data {tg.data})")
        sampler.watch("PostgreSQL", pg.postmaster_pid(), tree=True)
        sampler.watch("tablegate", tg.proc.pid, tree=False)
        sampler.start()
        bench = Bench(args, work, pg, tg, sampler)
        report = run_all(args, layout, bench, pg, tg, work)
        hwm = read_status_kib(tg.proc.pid, "VmHWM")
        sampler.stop_event.set()
        sampler.join()
        report["tg_hwm_mib"] = hwm / 1024 if hwm else None
        report["samples"] = sampler.samples
        write_report(args, binary, layout, started, bench, sampler, report)
        if bench.class_problems:
            print("ERROR: tablegate did not classify every benchmark query as expected "
                  "(the numbers are written but do not measure what they say):", file=sys.stderr)
            for p in bench.class_problems:
                print(f"  {p}", file=sys.stderr)
            return 3
        return 0
    finally:
        sampler.stop_event.set()
        tg.stop()
        pg.stop(args.keep)
        if args.keep:
            log(f"kept the data directories under {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def run_all(args, layout: Layout, bench: Bench, pg: PgCluster, tg: Tablegate, work: Path) -> dict:
    P, T = bench.pg, bench.tg
    report: dict = {}
    csv = work / "entities.csv"
    log(f"generating {layout.partitions:,} partitions x {layout.rows:,} rows")
    write_csv(csv, layout)
    report["csv_mib"] = csv.stat().st_size / 2**20
    for s in (P, T):
        s.psql(CREATE_SQL, what="CREATE TABLE")
    report["load_s"] = {}
    for s in (P, T):
        report["load_s"][s.name] = load(s, csv, layout.total)
    t = time.monotonic()
    P.psql("VACUUM ANALYZE entities", "CHECKPOINT", what="VACUUM ANALYZE, CHECKPOINT", timeout=3600)
    report["pg_vacuum_s"] = time.monotonic() - t
    log(f"PostgreSQL VACUUM ANALYZE + CHECKPOINT: {report['pg_vacuum_s']:.1f} s")
    for s in (P, T):
        n = int(s.psql("SELECT count(*) FROM entities", what="count", timeout=3600).strip())
        if n != layout.total:
            raise BenchError(f"{s.name} holds {n} rows after the load, expected {layout.total}")
    report["disk_mib"] = {"PostgreSQL": disk_bytes(pg.data) / 2**20, "tablegate": disk_bytes(tg.data) / 2**20}
    report["pg_relation_mib"] = int(P.psql("SELECT pg_total_relation_size('entities')").strip()) / 2**20
    log(f"on disk after the load: PostgreSQL {report['disk_mib']['PostgreSQL']:,.1f} MiB "
        f"(table + index {report['pg_relation_mib']:,.1f} MiB), tablegate {report['disk_mib']['tablegate']:,.1f} MiB")
    if "c" in args.only:
        report["columnar"] = columnar_reference(csv, work, args.runs)
    csv.unlink()

    # The same sample values on both servers: a spot check of the answers.
    sample = f"SELECT n, s, d FROM entities WHERE pk = '{layout.pk_base + layout.partitions // 2}' " \
             f"AND rk = '{layout.rk_base + layout.rows // 2}'"
    answers = {s.name: s.psql(sample, what="spot check") for s in (P, T)}
    if answers["PostgreSQL"] != answers["tablegate"] or not answers["PostgreSQL"].strip():
        raise BenchError(f"the servers disagree on {sample}: {answers}")

    if args.idle_connections:
        bench.sampler.phase = "idle connections"
        report["idle"] = {
            "PostgreSQL": idle_connection_memory(P, pg.postmaster_pid(), True, args.idle_connections),
            "tablegate": idle_connection_memory(T, tg.proc.pid, False, args.idle_connections),
        }

    scripts = pgbench_scripts(layout)
    values = {"p": layout.pk_base, "r": layout.rk_base, "lo": layout.rk_base, "hi": layout.rk_base + 100,
              "k": 10 ** 13, "c": 1, "client_id": 0}
    bench.sampler.phase = "reads"
    if args.warmup > 0 and {"a", "b"} & args.only:
        w = Workload("a", "warm-up", "point lookup", "prepared", args.group_clients, scripts["point"])
        for s in (P, T):
            bench.pgbench(s, w, args.warmup, measured=False)
    workloads: list[Workload] = []
    if "a" in args.only:
        for mode in ("prepared", "simple"):
            for c in args.clients:
                workloads.append(Workload("a", f"point-{mode}-c{c}", f"point lookup, {mode}, {plural(c)}", mode,
                                          c, scripts["point"], expect_class="point",
                                          explain_sql=substitute(scripts["point"], values)))
    if "b" in args.only:
        c = args.group_clients
        workloads.append(Workload("b", f"range100-prepared-c{c}", f"row-range 100 rows, prepared, {plural(c)}",
                                  "prepared", c, scripts["range"], expect_class="row-range",
                                  explain_sql=substitute(scripts["range"], values)))
    for w in workloads:
        bench.explain_class(w)
        bench.rounds(w, args.duration, args.rounds)

    if "c" in args.only:
        w = Workload("c", "scan-aggregate", "full-scan aggregate", expect_class="full-scan", explain_sql=SCAN_SQL)
        bench.explain_class(w)
        plan = P.psql(f"EXPLAIN {SCAN_SQL}", what="EXPLAIN")
        workers = re.search(r"Workers Planned: (\d+)", plan)
        report["pg_workers"] = int(workers.group(1)) if workers else 0
        before = query_counters(T)
        runs = {}
        answers = {}
        for label, server, serial in (("PostgreSQL", P, False), ("tablegate", T, False),
                                      ("PostgreSQL serial", P, True)):
            runs[label], answers[label] = bench.scan(server, serial, args.runs)
        after = query_counters(T)
        report["scan_counters"] = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        report["scan"] = runs
        report["scan_answer"] = answers["tablegate"]
        if report.get("columnar"):
            answers["DataFusion"] = report["columnar"]["answer"]
        if any(not same_answer(a, answers["PostgreSQL"]) for a in answers.values()):
            raise BenchError(f"the servers disagree on {SCAN_SQL}: {answers}")

    if "d" in args.only:
        bench.sampler.phase = "writes"
        c = args.group_clients
        for key, title in (("egt", f"transaction of 100 INSERTs, one new pk, {plural(c)}"),
                           ("multi", f"one 100-row INSERT, one new pk, {plural(c)}")):
            w = Workload("d", f"{key}100-prepared-c{c}", title, "prepared", c, scripts[key], rows_per_txn=100,
                         writes=True)
            bench.rounds(w, args.duration, args.rounds)
        # Not an acceptance target of issue 9; it shows what a one-row
        # write costs each layout.
        w = Workload("d", f"update1-prepared-c{c}", f"one-row UPDATE by key, {plural(c)}", "prepared", c,
                     scripts["update"], writes=True)
        bench.rounds(w, args.duration, args.rounds)
    return report


def write_report(args, binary: Path, layout: Layout, started: datetime.datetime, bench: Bench,
                 sampler: MemSampler, report: dict) -> None:
    rows: list[Row] = []
    by: dict[tuple[str, str], list[PgbenchResult]] = {}
    keys = []
    for r in bench.results:
        by.setdefault((r.server, r.workload), []).append(r)
        if r.workload not in keys:
            keys.append(r.workload)
    for k in keys:
        pg_rs, tg_rs = by[("PostgreSQL", k)], by[("tablegate", k)]
        mult = 100 if k.startswith(("egt", "multi")) else 1
        wid = "d" if k.startswith(("egt", "multi", "update")) else ("b" if k.startswith("range") else "a")
        unit = ("rows/s" if mult == 100 else "tps") + (" (median)" if len(pg_rs) > 1 else "")
        pv, tv = median([r.tps for r in pg_rs]) * mult, median([r.tps for r in tg_rs]) * mult
        # Round i's ratio pairs the two servers' i-th runs.
        per_round = sorted(t.tps / p.tps for p, t in zip(pg_rs, tg_rs) if p.tps)
        spread = (f"{fmt_ratio(per_round[0])} to {fmt_ratio(per_round[-1])}" if len(per_round) > 1 else "")
        rows.append(Row(wid, k, bench.titles.get(k, k), unit, pv, tv, tv / pv if pv else None, spread))
    if "scan" in report:
        s = report["scan"]
        tg_med = median(s["tablegate"])
        for label, title in (("PostgreSQL", f"scan-aggregate vs PG parallel ({report['pg_workers']} workers planned)"),
                             ("PostgreSQL serial", "scan-aggregate vs PG serial")):
            pg_med = median(s[label])
            rows.append(Row("c", "scan-" + ("parallel" if label == "PostgreSQL" else "serial"), title,
                            "ms (median)", pg_med, tg_med, pg_med / tg_med if tg_med else None,
                            f"{plural(len(s['tablegate']), 'run')} each"))
        if report.get("columnar"):
            df_med = median(report["columnar"]["times"])
            rows.append(Row("c", "scan-columnar", "scan-aggregate vs DataFusion over Parquet (its time in the "
                            "PostgreSQL column; target ≥ 0.5)", "ms (median)", df_med, tg_med,
                            df_med / tg_med if tg_med else None, f"{plural(len(s['tablegate']), 'run')} each"))
    rows.sort(key=lambda r: r.id)  # stable: a, b, c, d in run order
    res = []
    for phase in ("load", "idle connections", "reads", "writes", None):
        pgm, tgm = sampler.peak_mib("PostgreSQL", phase), sampler.peak_mib("tablegate", phase)
        if pgm is None and tgm is None:
            continue
        res.append(("e", f"peak PSS, {phase or 'whole run'}", "MiB", pgm, tgm))
    res.append(("e", "tablegate VmHWM (peak RSS)", "MiB", None, report.get("tg_hwm_mib")))
    res.append(("e", "on disk after the load (du of the data directory)", "MiB",
                report["disk_mib"]["PostgreSQL"], report["disk_mib"]["tablegate"]))
    res.append(("e", "load time (one COPY of the CSV)", "s", report["load_s"]["PostgreSQL"],
                report["load_s"]["tablegate"]))
    if "idle" in report:
        i_pg, i_tg = report["idle"]["PostgreSQL"], report["idle"]["tablegate"]
        n = i_pg["n"]
        res.append(("e", f"PSS before {n:,} idle connections (after the load)", "MiB", i_pg["before_mib"],
                    i_tg["before_mib"]))
        res.append(("e", f"PSS with {n:,} idle connections (each authenticated, one `SELECT 1`)", "MiB",
                    i_pg["with_mib"], i_tg["with_mib"]))
        res.append(("e", f"memory per idle connection ((with − before) ÷ {n:,})", "MiB",
                    i_pg["per_conn_mib"], i_tg["per_conn_mib"]))

    short, full = git_commit()
    mach = machine_info()
    pg_version = run([str(PG_BIN / "postgres"), "--version"], "postgres --version").stdout.strip()
    tg_version = run([str(binary), "--version"], "tablegate --version").stdout.strip()
    date = started.strftime("%Y-%m-%d")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{date}-{short}"
    n = 2
    while (out_dir / f"{stem}.md").exists():
        stem = f"{date}-{short}-{n}"
        n += 1
    md_path, svg_path = out_dir / f"{stem}.md", out_dir / f"{stem}.svg"

    ratio_table = ["| # | workload | unit | PostgreSQL | tablegate | ratio | each round's ratio |",
                   "|---|---|---|--:|--:|--:|--:|"]
    for r in rows:
        ratio_table.append(f"| {r.id} | {r.title} | {r.unit} | {fmt_num(r.pg)} | {fmt_num(r.tg)} "
                           f"| {fmt_ratio(r.ratio)} | {r.spread} |")
    res_table = ["| # | measure | unit | PostgreSQL | tablegate |", "|---|---|---|--:|--:|"]
    for wid, what, unit, pv, tv in res:
        res_table.append(f"| {wid} | {what} | {unit} | {fmt_num(pv)} | {fmt_num(tv)} |")

    print()
    print("Ratios (a, b, d: tablegate ÷ PostgreSQL median throughput; c: PostgreSQL time ÷ tablegate time;")
    print("        > 1 means tablegate is faster)")
    print("\n".join(ratio_table))
    print()
    print("Resources (e, raw numbers; lower is better)")
    print("\n".join(res_table))
    print()

    md = [f"# tablegate vs PostgreSQL 15: {date}, commit {short}", "",
          "Measured by `bench/run.py` (see bench/README.md). These are the numbers of one run on the machine "
          "below; they say nothing about other machines or commits.", "",
          "| | |", "|---|---|",
          f"| date | {started.isoformat(timespec='seconds')} |",
          f"| commit | {full} |",
          f"| tablegate binary | `{binary}` ({tg_version}), profile **{profile_of(binary)}** |",
          f"| tablegate arguments | `{args.tablegate_serve}`"
          + (f" (`--tablegate-args {shlex.quote(args.tablegate_args)}`)" if args.tablegate_args else "") + " |",
          f"| PostgreSQL | {pg_version}, fsync on, default settings, locale C, except "
          f"max_connections={args.max_connections} |",
          f"| machine | {mach['nproc']} CPUs ({mach['cpu']}), {mach.get('memory', '?')} memory, "
          f"Linux {mach['kernel']} |",
          f"| data | `entities`: {layout.partitions:,} partitions × {layout.rows:,} rows = {layout.total:,} rows "
          f"(CSV {report['csv_mib']:,.1f} MiB) |",
          f"| pgbench runs | {args.duration} s each, {args.rounds} per server and workload (alternating which "
          f"server goes first; medians reported); point lookup clients {','.join(map(str, args.clients))}; "
          f"range and write clients {args.group_clients}; warm-up {args.warmup} s |",
          f"| full-scan runs | {args.runs} per server |",
          f"| command | `bench/run.py {shlex.join(sys.argv[1:])}` |", "",
          "## Ratios", "",
          "a, b, d: tablegate median throughput ÷ PostgreSQL median throughput; the last column is the lowest "
          "and highest ratio of one round's pair of runs (how much this machine moved during the run). "
          "c: PostgreSQL median time ÷ tablegate median time. In every row **> 1 means tablegate is faster**.", "",
          *ratio_table, "",
          f"![ratios]({svg_path.name})", "",
          "## Resources (raw numbers)", "",
          f"Peak PSS sampled every {sampler.interval} s ({report['samples']} samples): tablegate's process; "
          "PostgreSQL's postmaster and all its children (PSS counts shared buffers once). "
          "Phases: load (start, COPY, VACUUM/CHECKPOINT), idle connections, reads (a to c), writes (d). "
          + (f"Idle connections: {report['idle']['PostgreSQL']['n']:,} at once to each server after the load, each "
             "a raw protocol-3 session that authenticated (trust), ran `SELECT 1` and waits; PSS is the median of "
             "3 samples 0.3 s apart, 1 s after the last one connected, and before they were opened. "
             if "idle" in report else "") +
          "Disk: allocated bytes of each data directory after the load "
          f"(PostgreSQL after VACUUM ANALYZE and CHECKPOINT; its table and index alone: "
          f"{report['pg_relation_mib']:,.1f} MiB).", "",
          *res_table, "",
          "## Every pgbench run", "",
          "| server | workload | mode | clients | s | transactions | failed | tps | latency avg ms |",
          "|---|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in bench.results:
        md.append(f"| {r.server} | {r.workload} | {r.mode} | {r.clients} | {r.duration} | {r.transactions:,} | "
                  f"{r.failed} | {r.tps:,.2f} | {fmt_num(r.latency_ms)} |")
    if "scan" in report:
        md += ["", "## Full-scan aggregate", "",
               f"`{SCAN_SQL}` (answer `{report['scan_answer']}`, the same on both servers but for the last digits of the average); wall time measured by psql "
               "`\\timing`. PostgreSQL serial is the same query after "
               "`SET max_parallel_workers_per_gather = 0`.", "",
               "| server | median ms | min ms | every run, ms |", "|---|--:|--:|---|"]
        scans = dict(report["scan"])
        if report.get("columnar"):
            scans[report["columnar"]["label"]] = report["columnar"]["times"]
        for label, times in scans.items():
            md.append(f"| {label} | {fmt_num(median(times))} | {fmt_num(min(times))} | "
                      f"{', '.join(fmt_num(t) for t in times)} |")
        if report.get("columnar"):
            md += ["", "The columnar reference is DataFusion's Python package in the benchmark's own process, "
                   f"over a Parquet file ({report['columnar']['parquet_mib']:.1f} MiB) that pyarrow wrote from the "
                   "same CSV, with the same SQL; its time covers planning, reading the file (from the page cache) "
                   "and collecting the answer, but no network round trip."]
    md += ["", "## How tablegate classified the queries", "",
           "`EXPLAIN` of each read workload (pgbench variables replaced by sample values), and the change of "
           "`tablegate.query_counters` during each tablegate run (this counter query itself is one "
           "`analytics` statement).", "",
           "| workload | EXPLAIN | query_counters change |", "|---|---|---|"]
    for r in bench.results:
        if r.server == "tablegate":
            counters = ", ".join(f"{k} +{v:,}" for k, v in sorted(r.counters.items()))
            md.append(f"| {r.workload} | {bench.explain.get(r.workload, '(writes: no EXPLAIN)')} | {counters} |")
    if "scan_counters" in report:
        counters = ", ".join(f"{k} +{v:,}" for k, v in sorted(report["scan_counters"].items()))
        md.append(f"| scan-aggregate | {bench.explain.get('scan-aggregate', '')} | {counters} |")
    if bench.class_problems:
        md += ["", "**Warning: some queries were not classified as expected; their numbers do not measure what "
               "they say.**", ""] + [f"- {p}" for p in bench.class_problems]
    md += ["", "## The pgbench scripts", ""]
    for name, text in pgbench_scripts(layout, group_rows=3).items():
        md += [f"`{name}`" + (" (shown with 3 of its 100 rows)" if name in ("egt", "multi") else "") + ":", "",
               "```", text.rstrip(), "```", ""]
    md_path.write_text("\n".join(md) + "\n")
    svg_path.write_text(svg_chart(rows, "tablegate vs PostgreSQL 15 (a, b, d: throughput ratio; "
                                  "c: PostgreSQL time ÷ tablegate time)",
                                  f"{date}, commit {short}, {profile_of(binary)} build, {layout.total:,} rows, "
                                  f"{mach['nproc']} CPUs"))
    log(f"wrote {md_path} and {svg_path.name}")


def on_sigterm(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    # bench/scale.py imports this file as `run`: one module, not two (one
    # BenchError class).
    sys.modules.setdefault("run", sys.modules["__main__"])
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"\nbench/run.py: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("\nbench/run.py: interrupted; both servers were stopped", file=sys.stderr)
        sys.exit(130)
