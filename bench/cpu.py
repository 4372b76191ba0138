#!/usr/bin/env python3
"""Where the CPU goes, PostgreSQL 15 and tablegate side by side.

run.py says which server is faster; this says why. For one workload of
run.py (same data, same pgbench scripts) it alternates pgbench runs on the
two servers and reports, per transaction:

- the server's CPU (user + system, and the share of it in the kernel, from
  /proc: tablegate's process, or the postmaster and every backend,
  including those that have exited);
- pgbench's CPU (the client shares the machine's cores: a server that makes
  its clients work harder loses throughput there);
- context switches and rescheduling interrupts of the whole machine
  (/proc/stat, /proc/interrupts): a wake-up of a thread asleep on another
  core is an inter-processor interrupt, which on a VM costs microseconds;
- TCP segments (/proc/net/snmp, both ends: on loopback a query and its
  answer are 2): a server that splits an answer wakes its client twice.

    bench/cpu.py --tablegate target/release/tablegate --workload point

It is a diagnostic, not the benchmark: runs are short, and the report is
printed, not written. Needs what run.py needs (PostgreSQL 15, pgbench, the
postgres system user when run as root).
"""

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as B  # noqa: E402  (run.py is this script's library)

TICK = os.sysconf("SC_CLK_TCK")
NEEDS_DATA = {"point", "range", "update"}


def proc_cpu(pid: int, children: bool = False) -> tuple[float, float]:
    """Seconds of CPU (user, system) of a process (its threads together),
    and optionally of its children that have exited and been waited for."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rfind(")") + 2:].split()
    user, system = int(fields[11]), int(fields[12])
    if children:
        user, system = user + int(fields[13]), system + int(fields[14])
    return user / TICK, system / TICK


def tree_cpu(root: int) -> tuple[float, float]:
    user, system = proc_cpu(root, children=True)
    for pid in B.descendants(root)[1:]:
        try:
            u, s = proc_cpu(pid)
            user, system = user + u, system + s
        except OSError:
            pass  # exited meanwhile: counted in its parent's children
    return user, system


def machine() -> dict[str, float]:
    """Counters of the whole machine: context switches, rescheduling
    interrupts, and CPU time by state."""
    out: dict[str, float] = {}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts[0] == "cpu":
                ticks = [int(x) for x in parts[1:]]
                out["busy"] = (sum(ticks) - ticks[3] - ticks[4]) / TICK
                out["all"] = sum(ticks) / TICK
            elif parts[0] == "ctxt":
                out["ctxt"] = int(parts[1])
    with open("/proc/interrupts") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] == "RES:":
                out["res"] = sum(int(x) for x in parts[1:] if x.isdigit())
    # TCP segments sent, both ends counted (loopback): a server that splits
    # its answers wakes its clients more often.
    with open("/proc/net/snmp") as f:
        tcp = [line.split() for line in f if line.startswith("Tcp:")]
    if len(tcp) == 2:
        out["segs"] = int(dict(zip(tcp[0], tcp[1]))["OutSegs"])
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tablegate", default=str(B.REPO / "target/release/tablegate"))
    ap.add_argument("--workload", default="point", choices=["point", "range", "egt", "multi", "update"])
    ap.add_argument("--mode", default="prepared", choices=["prepared", "simple", "extended"])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=int, default=6, help="seconds per pgbench run (default 6)")
    ap.add_argument("--pairs", type=int, default=2,
                    help="runs per server, alternating which goes first (default 2)")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--load", action="store_true",
                    help="load the table before a write workload too, as run.py does (egt and multi "
                         "otherwise run on an empty table)")
    args = ap.parse_args(argv)
    if min(args.clients, args.duration, args.pairs, args.partitions, args.rows) < 1:
        ap.error("every number must be positive")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    binary = B.check_tools(argparse.Namespace(tablegate=args.tablegate))
    layout = B.Layout(args.partitions, args.rows)
    work = Path(tempfile.mkdtemp(prefix="tg-cpu-"))
    os.chmod(work, 0o711)  # the postgres user reaches work/pg
    pg, tg = B.PgCluster(work), B.Tablegate(binary, work)
    try:
        pg.start()
        tg.start()
        for s in (pg.server, tg.server):
            s.psql(B.CREATE_SQL, what="CREATE TABLE")
        if args.workload in NEEDS_DATA or args.load:
            csv = work / "entities.csv"
            B.write_csv(csv, layout)
            for s in (pg.server, tg.server):
                B.load(s, csv, layout.total)
            pg.server.psql("VACUUM ANALYZE entities", "CHECKPOINT", what="VACUUM", timeout=3600)
        script = work / f"{args.workload}.sql"
        script.write_text(B.pgbench_scripts(layout)[args.workload])
        rows = 100 if args.workload in ("egt", "multi") else 1
        print(f"{args.workload}, -M {args.mode}, {args.clients} clients, {args.duration} s runs; per transaction:")
        print(f"{'server':<11}{'tps':>10}{'rows/s':>11}{'server µs':>11}{'kernel':>8}{'pgbench µs':>12}"
              f"{'ctx sw':>8}{'resched':>9}{'segs':>7}{'busy':>7}")
        base = 10  # new PartitionKeys for every write run
        for pair in range(args.pairs):
            order = [pg, tg] if pair % 2 == 0 else [tg, pg]
            for side in order:
                s = side.server
                root = pg.postmaster_pid() if side is pg else tg.proc.pid
                base += 1
                cmd = ["pgbench", "-n", "-f", str(script), "-T", str(args.duration), "-c", str(args.clients),
                       "-j", str(args.clients), "-M", args.mode, "-D", "c=0", "-D", f"base={base * 10**12}",
                       *s.conn_args(), s.db]
                r0, c0, m0 = resource.getrusage(resource.RUSAGE_CHILDREN), tree_cpu(root), machine()
                out = subprocess.run(cmd, capture_output=True, text=True, env=B.clean_env())
                time.sleep(0.3)  # backends exit after their client
                m1, c1, r1 = machine(), tree_cpu(root), resource.getrusage(resource.RUSAGE_CHILDREN)
                s.check_alive()
                m = re.search(r"actually processed: (\d+)", out.stdout)
                n = int(m.group(1)) if m else 0
                if out.returncode != 0 or n == 0:
                    raise B.BenchError(f"pgbench on {s.name} failed:\n{out.stdout}\n{out.stderr}")
                client = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
                server = sum(c1) - sum(c0)
                print(f"{s.name:<11}{n / args.duration:>10,.0f}{n * rows / args.duration:>11,.0f}"
                      f"{server / n * 1e6:>11.1f}{(c1[1] - c0[1]) / max(server, 1e-9):>8.0%}"
                      f"{client / n * 1e6:>12.1f}"
                      f"{(m1['ctxt'] - m0['ctxt']) / n:>8.1f}{(m1.get('res', 0) - m0.get('res', 0)) / n:>9.2f}"
                      f"{(m1.get('segs', 0) - m0.get('segs', 0)) / n:>7.1f}"
                      f"{(m1['busy'] - m0['busy']) / max(m1['all'] - m0['all'], 1e-9):>7.0%}", flush=True)
        return 0
    except B.BenchError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 1
    finally:
        tg.stop()
        pg.stop(False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
