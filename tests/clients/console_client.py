#!/usr/bin/env python3
"""The web console against a running server, as a user meets it: a
workload through psycopg, then the JSON API read with urllib and the pages
rendered by headless Chromium (`chromium --dump-dom`: the DOM after the
page's script ran).

    console_client.py workload HTTP_PORT PG_PORT [--screenshots DIR]
    console_client.py history HTTP_PORT
    console_client.py scram HTTP_PORT USER PASSWORD

`workload` expects a trust server started with `--keyviz-slot-seconds 1`
and `--partition-target 1000` (one client outruns it whatever the
machine's load); `history` the same server restarted after `workload`
(the key visualizer's history and statements survive); `scram` one with
SCRAM users.
Prints "console ok" at the end; any failed check raises.
"""

from __future__ import annotations

import base64
import html.parser
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import psycopg


def get(port: int, path: str, auth: str | None = None, body: dict | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    if body is not None:
        req.data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read() or b"{}")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("no chromium: apt-get install chromium (.ci/run does)")


def browse(port: int, fragment: str, screenshot: str | None = None) -> str:
    """The DOM of the console at `fragment` once its script has run."""
    url = f"http://127.0.0.1:{port}/{fragment}"
    args = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--hide-scrollbars", "--virtual-time-budget=4000", "--window-size=1400,1300"]
    if screenshot:
        out = subprocess.run([*args, f"--screenshot={screenshot}", url], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    out = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "<html" in out.stdout, f"chromium failed: {out.stderr[-2000:]}"
    return out.stdout


class Elements(html.parser.HTMLParser):
    """Attributes and text of elements with an id."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict] = {}
        self.stack: list[str | None] = []
        self.all: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.all.append((tag, a))
        if a.get("id"):
            self.by_id[a["id"]] = {"attrs": a, "text": ""}
        if tag not in ("br", "img", "input", "meta", "link", "line", "rect", "col"):
            self.stack.append(a.get("id"))

    def handle_endtag(self, tag):
        if self.stack and tag not in ("br", "img", "input", "meta", "link", "line", "rect", "col"):
            self.stack.pop()

    def handle_data(self, data):
        for i in self.stack:
            if i:
                self.by_id[i]["text"] += data


def parse(dom: str) -> Elements:
    p = Elements()
    p.feed(dom)
    return p


def insert(cur, table: str, pk: str, ids: range, body: str) -> None:
    """One multi-row INSERT: one entity-group transaction per 100 rows."""
    values = ", ".join(f"('{pk}', {i}, '{body}')" for i in ids)
    cur.execute(f"INSERT INTO {table} VALUES {values}")


def workload(http: int, pg: int, shots: str | None) -> None:
    conn = psycopg.connect(host="127.0.0.1", port=pg, user="tablegate", dbname="tablegate", autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TABLE events (tenant text, id bigint, body text, PRIMARY KEY (tenant, id))")
    cur.execute("CREATE TABLE log (day text, seq bigint, body text, PRIMARY KEY (day, seq))")
    # Cool traffic over 40 tenants, then one hot tenant: batches of 100 rows
    # (one entity-group transaction each) as fast as the target lets them.
    for t in range(40):
        insert(cur, "events", f"t{t:02d}", range(1, 6), "x")
    hot_until = time.monotonic() + 3.0
    n = 0
    while time.monotonic() < hot_until:
        insert(cur, "events", "t17", range(1000 + n, 1100 + n), "hot")
        n += 100
        cur.execute("SELECT id FROM events WHERE tenant = 't17' AND id < 1050")
        cur.fetchall()
    # Append-only: every insert goes to a new PartitionKey above the last
    # (a time-ordered key), 30 of them a second for 6 seconds.
    for sec in range(6):
        start = time.monotonic()
        for j in range(30):
            insert(cur, "log", f"d{sec}-{j:03d}", range(10), "entry")
        time.sleep(max(0.0, 1.05 - (time.monotonic() - start)))

    # The API: the hot tenant is the busiest key range, flagged against
    # its per-partition target; its writes and throttled requests count.
    status, _, kv = get(http, "/api/keyviz?table=events")
    assert status == 200, kv
    assert kv["slot_seconds"] == 1 and kv["partition_target"] == 1000, kv
    labels = [b["first"] for b in kv["buckets"]]
    assert labels == sorted(labels) and "t17" in labels and len(labels) == 40, labels
    hot = labels.index("t17")
    totals = [sum(kv["written"][b]) + sum(kv["read"][b]) for b in range(len(labels))]
    assert max(range(len(totals)), key=totals.__getitem__) == hot, totals
    assert max(kv["peak"][hot]) >= kv["hot_share"] * kv["partition_target"], kv["peak"][hot]
    assert sum(kv["throttled"][hot]) > 0, kv["throttled"][hot]
    assert sum(kv["written"][hot]) >= 1000, kv["written"][hot]
    cool = labels.index("t03")
    assert max(kv["peak"][cool]) < 100, kv["peak"][cool]
    assert kv["ranges"] and kv["ranges"][0]["lo"] == "", kv["ranges"]

    # Append-only: the busiest row of each column climbs the key space.
    status, _, lg = get(http, "/api/keyviz?table=log")
    assert status == 200, lg
    peaks = []
    for s in range(len(lg["slots"])):
        col = [lg["written"][b][s] for b in range(len(lg["buckets"]))]
        if max(col, default=0) > 0:
            peaks.append(col.index(max(col)))
    assert len(set(peaks)) >= 4 and peaks == sorted(peaks), peaks

    hot_cell_statements(http)

    # Longer windows come from the coarser tiers: 6× and 60× the slot.
    assert kv["windows"] == [360, 2160, 21600] and kv["window_seconds"] == 360, kv["windows"]
    status, _, wide = get(http, "/api/keyviz?table=events&window=2160")
    assert status == 200 and wide["slot_seconds"] == 6 and wide["window_seconds"] == 2160, wide
    wide_labels = [b["first"] for b in wide["buckets"]]
    # Every entity is in both pictures (the coarse one rolls the base
    # slots up, plus the one still filling); the clock moved on meanwhile,
    # so only at least.
    whot = wide_labels.index("t17")
    assert sum(wide["written"][whot]) * 6 >= 0.9 * sum(kv["written"][hot]), (wide["written"][whot], kv["written"][hot])
    assert max(wide["peak"][whot]) >= kv["hot_share"] * kv["partition_target"], wide["peak"][whot]

    status, _, v = get(http, "/api/views/servers")
    assert status == 200 and isinstance(v, list) and {"server", "load_per_sec", "capacity_per_sec"} <= set(v[0]), v
    status, _, v = get(http, "/api/views/insert_patterns")
    assert status == 200 and any(p["table_name"] == "log" for p in v), v
    status, _, v = get(http, "/api/views/nonsense")
    assert status == 404 and "range_partitions" in v["error"], v
    status, _, v = get(http, "/api/keyviz?table=nope")
    assert status == 404 and v["sqlstate"] == "42P01", v
    status, _, v = get(http, "/api/explain", body={"sql": "SELECT * FROM events WHERE tenant = 't17' AND id = 3"})
    assert status == 200 and v["plan"][0]["Plan"]["Class"] == "point", v
    # Over the key space: a point touches the one range holding t17.
    space = v["key_space"]
    touched = [r for r in space["ranges"] if r["touched"]]
    assert len(touched) == 1 and touched[0]["lo"] <= "t17" and (touched[0]["hi"] is None or "t17" < touched[0]["hi"]), space
    assert space["servers_touched"] == [touched[0]["server"]], space
    status, _, v = get(http, "/api/explain", body={"sql": "SELECT body FROM events WHERE body = 'hot'", "analyze": True})
    assert status == 200, v
    plan = v["plan"][0]["Plan"]
    assert plan["Class"] == "full-scan" and plan["Actual Entities Scanned"] == plan["Actual Entities Returned"] + 200, plan
    assert all(r["touched"] for r in v["key_space"]["ranges"]), v["key_space"]
    status, _, v = get(http, "/api/explain", body={"sql": "SELEC nonsense"})
    assert status == 400 and v["sqlstate"] == "42601", v
    status, _, v = get(http, "/api/explain", body={"sql": "SELECT * FROM missing"})
    assert status == 404 and v["sqlstate"] == "42P01", v
    status, _, v = get(http, "/api")
    assert status == 200 and len(v["endpoints"]) == 4, v

    # The pages, rendered by a real browser.
    shot = (lambda name: f"{shots}/{name}.png") if shots else (lambda name: None)
    # (The full scan's pages above count too, some where the table begins.)
    buckets = len(get(http, "/api/keyviz?table=events")[2]["buckets"])
    dom = parse(browse(http, "#/keys?table=events"))
    kvel = dom.by_id["keyviz"]["attrs"]
    assert kvel.get("data-table") == "events" and kvel.get("data-buckets") == str(buckets), kvel
    assert kvel.get("data-hottest") == "t17", kvel
    assert int(kvel.get("data-warnings", "0")) >= 1, kvel
    rows = [a for t, a in dom.all if t == "tr" and "data-bucket" in a]
    assert rows and rows[0]["data-bucket"] == str(hot + buckets - 40), rows
    assert "hot" in dom.by_id["hot-buckets"]["text"], dom.by_id["hot-buckets"]

    # A cell names the statements that hit it.
    dom = parse(browse(http, "#/keys?table=events&metric=written&cell=hot", shot("console-keys")))
    cell = dom.by_id["kv-cell"]
    assert int(cell["attrs"].get("data-statements", "0")) >= 1, cell
    # The busiest cell by entities written: the one the API's numbers say,
    # named with the statements the API gives for it (the hot INSERT).
    kv = get(http, "/api/keyviz?table=events")[2]
    b, s = int(cell["attrs"]["data-bucket"]), int(cell["attrs"]["data-slot"])
    assert kv["buckets"][b]["first"] == "t17", (b, kv["buckets"][b])
    assert kv["written"][b][s] == max(max(row) for row in kv["written"]), (b, s)
    q = urllib.parse.urlencode({"table": "events", "first": kv["buckets"][b]["first"], "last": kv["buckets"][b]["last"],
                                "from": kv["slot_micros"][s]})
    top = get(http, f"/api/keyviz/statements?{q}")[2]["statements"][0]["query"]
    assert cell["attrs"].get("data-top") == top and top in cell["text"], (cell, top)
    assert top.startswith("INSERT INTO events VALUES"), top
    # The window's slot count moves with the clock: the page's count lies
    # between the API's just before and just after it drew.
    slots = lambda: len(get(http, "/api/keyviz?table=events&window=2160")[2]["slots"])
    before = slots()
    dom = parse(browse(http, "#/keys?table=events&window=2160"))
    after = slots()
    assert "6 s slots" in dom.by_id["kv-window"]["text"], dom.by_id["kv-window"]
    drawn = int(dom.by_id["keyviz"]["attrs"]["data-slots"])
    assert min(before, after) <= drawn <= max(before, after), (before, drawn, after)

    dom = parse(browse(http, "#/keys?table=log&metric=written", shot("console-append-only")))
    page_peaks = [p for p in json.loads(dom.by_id["keyviz"]["attrs"]["data-peaks"]) if p >= 0]
    assert len(set(page_peaks)) >= 4 and page_peaks == sorted(page_peaks), page_peaks

    dom = parse(browse(http, "#/partitions", shot("console-partitions")))
    servers = [a for t, a in dom.all if t == "g" and "data-server" in a]
    assert len(servers) == len(get(http, "/api/views/servers")[2]), servers
    assert "append" in dom.by_id["insert-patterns"]["text"], dom.by_id["insert-patterns"]
    assert "events" in dom.by_id["range-partitions"]["text"]

    q = urllib.parse.quote("SELECT * FROM events WHERE tenant = 't17' AND id BETWEEN 1 AND 20")
    dom = parse(browse(http, f"#/explain?sql={q}&run=plan", shot("console-explain")))
    assert dom.by_id["ex-class"]["text"] == "row-range", dom.by_id.get("ex-class")
    ks = dom.by_id["ex-keyspace"]["attrs"]
    assert ks["data-touched"] == "1" and int(ks["data-ranges"]) >= 1, ks
    q = urllib.parse.quote("SELECT * FROM events WHERE body = 'x'")
    dom = parse(browse(http, f"#/explain?sql={q}&run=plan"))
    assert dom.by_id["ex-class"]["text"] == "full-scan", dom.by_id.get("ex-class")
    assert "Full scan" in dom.by_id["ex-advice"]["text"], dom.by_id["ex-advice"]
    q = urllib.parse.quote("SELECT * FROM nowhere")
    dom = parse(browse(http, f"#/explain?sql={q}&run=plan"))
    errs = [a for t, a in dom.all if t == "div" and a.get("class") == "error"]
    assert errs and errs[0]["data-sqlstate"] == "42P01", errs


def hot_cell_statements(http: int) -> None:
    """The hot tenant's busiest cell names the workload's statements,
    constants as parameters."""
    status, _, kv = get(http, "/api/keyviz?table=events")
    assert status == 200, kv
    labels = [b["first"] for b in kv["buckets"]]
    hot = labels.index("t17")
    busiest = max(range(len(kv["slots"])), key=lambda s: kv["written"][hot][s])
    q = urllib.parse.urlencode({"table": "events", "first": "t17", "last": "t17", "from": kv["slot_micros"][busiest]})
    status, _, cell = get(http, f"/api/keyviz/statements?{q}")
    assert status == 200 and cell["entities"] > 0, cell
    queries = [x["query"] or "" for x in cell["statements"]]
    assert queries and queries[0].startswith("INSERT INTO events VALUES ($1, $2, $3)"), queries
    assert "write" in cell["statements"][0]["classes"], cell
    assert cell["attributed"] >= 0.9 * cell["entities"], cell
    # Over the whole history the hot key's reads name the SELECT as well.
    reads = set()
    for s in range(len(kv["slots"])):
        if kv["read"][hot][s] > 0:
            q = urllib.parse.urlencode({"table": "events", "first": "t17", "last": "t17", "from": kv["slot_micros"][s]})
            reads |= {x["query"] for x in get(http, f"/api/keyviz/statements?{q}")[2]["statements"]}
    assert "SELECT id FROM events WHERE tenant = $1 AND id < $2" in reads, reads
    status, _, v = get(http, "/api/keyviz/statements?table=nope&first=a&last=b&from=0")
    assert status == 404 and v["sqlstate"] == "42P01", v
    status, _, v = get(http, "/api/keyviz/statements?table=events&first=a")
    assert status == 400 and v["sqlstate"] == "22023" and "last" in v["error"], v
    status, _, v = get(http, "/api/keyviz?table=events&window=soon")
    assert status == 400 and v["sqlstate"] == "22023", v


def history(http: int) -> None:
    """After a restart: the hot tenant is still the busiest range, and its
    cells still name their statements."""
    status, _, kv = get(http, "/api/keyviz?table=events")
    assert status == 200, kv
    labels = [b["first"] for b in kv["buckets"]]
    assert "t17" in labels and len(labels) == 40, labels
    totals = [sum(kv["written"][b]) for b in range(len(labels))]
    assert labels[max(range(len(totals)), key=totals.__getitem__)] == "t17", totals
    assert sum(kv["written"][labels.index("t17")]) >= 1000, kv["written"]
    hot_cell_statements(http)
    status, _, lg = get(http, "/api/keyviz?table=log")
    assert status == 200 and len(lg["buckets"]) >= 100, len(lg["buckets"])


def scram(http: int, user: str, password: str) -> None:
    status, headers, v = get(http, "/api/views/servers")
    assert status == 401 and v["sqlstate"] == "28000", v
    assert headers.get("www-authenticate", "").startswith("Basic"), headers
    status, _, v = get(http, "/", auth=f"{user}:wrong")
    assert status == 401 and v["sqlstate"] == "28000" and "password authentication failed" in v["error"], v
    status, _, v = get(http, "/api/views/servers", auth=f"{user}:{password}")
    assert status == 200 and isinstance(v, list), v


def main() -> None:
    mode = sys.argv[1]
    if mode == "workload":
        shots = sys.argv[sys.argv.index("--screenshots") + 1] if "--screenshots" in sys.argv else None
        workload(int(sys.argv[2]), int(sys.argv[3]), shots)
    elif mode == "history":
        history(int(sys.argv[2]))
    elif mode == "scram":
        scram(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("console ok")


if __name__ == "__main__":
    main()
