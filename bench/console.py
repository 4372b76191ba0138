#!/usr/bin/env python3
"""How fast the web console loads on a big table: a table of KEYS
PartitionKeys pre-split into RANGES range partitions (`tablegate split`),
with key visualizer history from a read load, then each page loaded in
headless Chromium and each API call timed.

A page's load time is what the page itself records when it first shows
its data (`data-loaded-ms` on <html>: `performance.now()` from the start
of navigation, so the HTML, script, stylesheet, the API answers and the
drawing), read over Chromium's DevTools protocol on a pipe. Every page is
also loaded against a one-range table on the same server, for comparison.

    cargo build --release
    bench/console.py --keys 20000 --ranges 10000 --runs 5

Writes bench/results/console-DATE-COMMIT.md with every raw number.
Needs psycopg and Debian's chromium.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as B  # noqa: E402  (run.py is this script's library)


class Chromium:
    """Headless Chromium driven over --remote-debugging-pipe (fd 3 in, fd 4
    out, messages separated by NUL): no WebSocket library needed."""

    def __init__(self) -> None:
        exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                   None)
        if not exe:
            raise B.BenchError("no chromium: apt-get install chromium")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.profile = tempfile.mkdtemp(prefix="tg-chromium-")
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "--window-size=1400,1300",
             "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_chrome, 1 << 16)
                if not chunk:
                    raise B.BenchError("chromium closed its DevTools pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise B.BenchError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expr: str):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, self.session)
        return r.get("result", {}).get("value")

    def load_ms(self, url: str, timeout: float = 60) -> float:
        """Navigates to `url` (after a blank page, so every load is whole)
        and answers the page's own data-loaded-ms."""
        self.call("Page.navigate", {"url": "about:blank"}, self.session)
        time.sleep(0.2)
        self.call("Page.navigate", {"url": url}, self.session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.evaluate("location.href === %s && document.documentElement.dataset.loadedMs" % json.dumps(url))
            if v:
                if self.evaluate("document.getElementById('status').className") == "bad":
                    text = self.evaluate("document.getElementById('status').textContent")
                    raise B.BenchError(f"{url}: {text}")
                return float(v)
            time.sleep(0.02)
        raise B.BenchError(f"{url} did not finish loading in {timeout:.0f} s")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def timed_get(port: int, path: str, body: dict | None = None) -> tuple[float, int]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if body is not None:
        req.data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        n = len(r.read())
    return (time.perf_counter() - t) * 1000, n


def console_port(tg: B.Tablegate) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"console on http://[\d.]+:(\d+)", tg.log_path.read_text())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise B.BenchError("no console address printed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=20_000, help="PartitionKeys of the big table")
    ap.add_argument("--ranges", type=int, default=10_000, help="its range partitions")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tablegate", default=str(B.REPO / "target/release/tablegate"))
    args = ap.parse_args()
    import psycopg

    binary = Path(args.tablegate)
    if not binary.exists():
        raise B.BenchError(f"no tablegate binary at {binary}: run `cargo build --release` first")
    started = datetime.datetime.now(datetime.timezone.utc)
    work = Path(tempfile.mkdtemp(prefix="tg-console-bench-"))
    extra = ["--http", "127.0.0.1:0"]
    tg = B.Tablegate(binary, work, extra)
    results: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    try:
        B.log(f"loading {args.keys} PartitionKeys ...")
        tg.start()
        conn = psycopg.connect(host="127.0.0.1", port=tg.server.port, user="tablegate", dbname="tablegate",
                               autocommit=True)
        cur = conn.cursor()
        cur.execute("CREATE TABLE big (tenant text, id bigint, v text, PRIMARY KEY (tenant, id))")
        cur.execute("CREATE TABLE small (tenant text, id bigint, v text, PRIMARY KEY (tenant, id))")
        for lo in range(0, args.keys, 500):
            rows = ", ".join(f"('k{i:07d}', 1, 'x')" for i in range(lo, min(lo + 500, args.keys)))
            cur.execute(f"INSERT INTO big VALUES {rows}")
        cur.execute("INSERT INTO small VALUES " + ", ".join(f"('k{i:03d}', 1, 'x')" for i in range(100)))
        conn.close()
        tg.stop()
        B.log(f"splitting into {args.ranges} range partitions ...")
        t = time.perf_counter()
        B.run([str(binary), "split", "big", "--ranges", str(args.ranges), "--data", str(tg.data)], "tablegate split",
              timeout=3600)
        split_s = time.perf_counter() - t
        tg.start()
        port = console_port(tg)
        # History: point reads spread over every key, and full scans, for
        # a few seconds (keys past the budget are cut to prefixes).
        B.log("reading for history ...")
        conn = psycopg.connect(host="127.0.0.1", port=tg.server.port, user="tablegate", dbname="tablegate",
                               autocommit=True)
        cur = conn.cursor()
        rng = random.Random(7)
        until = time.monotonic() + 12
        reads = 0
        while time.monotonic() < until:
            for _ in range(200):
                cur.execute("SELECT v FROM big WHERE tenant = %s AND id = 1", (f"k{rng.randrange(args.keys):07d}",))
                cur.fetchall()
                reads += 1
            cur.execute("SELECT count(*) FROM big")
            cur.execute("SELECT v FROM small WHERE tenant = 'k001' AND id = 1")
        conn.close()
        kv = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/keyviz?table=big").read())
        ranges = len(kv["ranges"])
        if ranges != args.ranges:
            raise B.BenchError(f"expected {args.ranges} range partitions, the console shows {ranges}")
        apis = {
            "GET /api/keyviz?table=big": ("/api/keyviz?table=big", None),
            "GET /api/views/range_partitions": ("/api/views/range_partitions", None),
            "POST /api/explain (full scan of big)": ("/api/explain", {"sql": "SELECT * FROM big WHERE v = 'y'"}),
            "POST /api/explain (point on big)": ("/api/explain",
                                                 {"sql": "SELECT * FROM big WHERE tenant = 'k0000042' AND id = 1"}),
            "GET /api/keyviz?table=small": ("/api/keyviz?table=small", None),
        }
        q = urllib.parse.quote
        pages = {
            "key visualizer, big": "#/keys?table=big",
            "partitions (every table's ranges)": "#/partitions",
            "EXPLAIN, full scan of big": f"#/explain?sql={q('SELECT * FROM big WHERE v = ' + chr(39) + 'y' + chr(39))}&run=plan",
            "key visualizer, small": "#/keys?table=small",
            "EXPLAIN, point on small": f"#/explain?sql={q('SELECT * FROM small WHERE tenant = ' + chr(39) + 'k001' + chr(39) + ' AND id = 1')}&run=plan",
        }
        for _ in range(args.runs):
            for name, (path, body) in apis.items():
                ms, n = timed_get(port, path, body)
                results.setdefault(name, []).append(ms)
                sizes[name] = n
        B.log("loading pages in Chromium ...")
        chrome = Chromium()
        try:
            for _ in range(args.runs):
                for name, frag in pages.items():
                    results.setdefault("page: " + name, []).append(
                        chrome.load_ms(f"http://127.0.0.1:{port}/{frag}"))
        finally:
            chrome.close()
    finally:
        tg.stop()
        shutil.rmtree(work, ignore_errors=True)

    short, full = B.git_commit()
    day = started.strftime("%Y-%m-%d")
    out = B.REPO / "bench/results" / f"console-{day}-{short}.md"
    m = B.machine_info()
    lines = [
        f"# The web console on {args.ranges:,} range partitions ({day})",
        "",
        f"- commit {full}; binary {binary} ({B.profile_of(binary)})",
        f"- machine: {m.get('cpu')}, {m.get('nproc')} CPUs, {m.get('memory')}; kernel {m.get('kernel')}",
        f"- table `big`: {args.keys:,} PartitionKeys split by `tablegate split` into {args.ranges:,} range "
        f"partitions over 4 servers in {split_s:.1f} s; then {reads:,} random point reads and full scans "
        f"over 12 s for history; `small`: 100 keys, one range",
        f"- {args.runs} runs each; page times are the page's own `performance.now()` when it first showed its data "
        "(HTML, script, stylesheet, API answers, drawing), headless Chromium, a blank page between loads",
        "",
        "| what | median ms | min | max | all runs (ms) | answer bytes |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, xs in results.items():
        lines.append(f"| {name} | {statistics.median(xs):.0f} | {min(xs):.0f} | {max(xs):.0f} | "
                     f"{', '.join(f'{x:.0f}' for x in xs)} | {sizes.get(name, '')} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    B.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except B.BenchError as e:
        print(f"console.py: {e}", file=sys.stderr)
        sys.exit(1)
