// The tablegate console: three pages over the JSON API (/api). No
// framework: the DOM, a canvas and a little SVG.
"use strict";

const $ = (sel) => document.querySelector(sel);
const fmt = (n) => (n == null ? "" : Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 }));
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

async function api(path, init) {
  const r = await fetch(path, init);
  const body = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) {
    const e = new Error(body.error || `HTTP ${r.status}`);
    e.sqlstate = body.sqlstate;
    e.hint = body.hint;
    throw e;
  }
  return body;
}

function status(text, bad) {
  const s = $("#status");
  s.textContent = text;
  s.className = bad ? "bad" : "";
}

// ---------------------------------------------------------------- routing

let timer = null;
// Bumped on every navigation: a page whose first load finishes after the
// user moved on starts no polling.
let generation = 0;

function poll(gen, load, ms) {
  if (gen === generation) timer = setInterval(() => load().catch((e) => status(e.message, true)), ms);
}

function route() {
  generation++;
  const [, page, query] = location.hash.match(/^#\/(\w+)\??(.*)$/) || [null, "keys", ""];
  const params = new URLSearchParams(query);
  document.querySelectorAll(".page").forEach((p) => (p.hidden = p.id !== `page-${page}`));
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === page));
  clearInterval(timer);
  const run = { keys: keysPage, partitions: partitionsPage, explain: explainPage }[page] || keysPage;
  const gen = generation;
  run(params, gen)
    .catch((e) => status(`${e.message}${e.sqlstate ? ` (${e.sqlstate})` : ""}`, true))
    // When the page first showed its data (bench/console.py reads it).
    .finally(() => gen === generation && (document.documentElement.dataset.loadedMs = Math.round(performance.now())));
}

window.addEventListener("hashchange", route);

// ------------------------------------------------------- key visualizer

let kv = null; // the last /api/keyviz answer

async function keysPage(params, gen) {
  const tables = await api("/api/views/tables");
  const select = $("#kv-table");
  const wanted = params.get("table") || select.value || (tables[0] && tables[0].table_name);
  select.innerHTML = tables.map((t) => `<option>${esc(t.table_name)}</option>`).join("");
  if (!wanted) {
    status("no tables yet: create one and put some load on it");
    return;
  }
  select.value = wanted;
  const metric = params.get("metric");
  if (metric) $("#kv-metric").value = metric;
  const win = params.get("window") || "";
  $("#kv-cell").hidden = true;
  const load = async () => {
    kv = await api(`/api/keyviz?table=${encodeURIComponent(select.value)}${win ? `&window=${encodeURIComponent(win)}` : ""}`);
    windows(String(kv.window_seconds));
    drawKeys();
    status(`updated ${new Date().toLocaleTimeString()}`);
  };
  await load();
  // `cell=hot`: open the busiest cell by the metric shown (a link that
  // shows who made a key hot).
  if (params.get("cell") === "hot") await openHottestCell();
  poll(gen, load, Math.max(2, Math.min(kv.slot_seconds, 60)) * 1000);
}

// The windows the history keeps, each in its own slot width.
function windows(current) {
  const w = $("#kv-window");
  const span = (s) => (s >= 86400 ? `${fmt(s / 86400)} days` : s >= 3600 ? `${fmt(s / 3600)} h` : `${fmt(s / 60)} min`);
  const slot = (s) => (s >= 60 ? `${fmt(s / 60)} min` : `${s} s`);
  w.innerHTML = kv.windows
    .map((s, i) => `<option value="${s}">the last ${span(s)} · ${slot(kv.window_slot_seconds[i])} slots</option>`)
    .join("");
  w.value = String(current);
  if (w.value !== String(current)) w.insertAdjacentHTML("beforeend", `<option value="${esc(current)}" selected>the last ${span(Number(current))}</option>`);
}

const keysHash = () =>
  `#/keys?table=${encodeURIComponent($("#kv-table").value)}&window=${$("#kv-window").value}&metric=${$("#kv-metric").value}`;
$("#kv-table").addEventListener("change", () => (location.hash = keysHash()));
$("#kv-window").addEventListener("change", () => (location.hash = keysHash()));
$("#kv-metric").addEventListener("change", () => kv && drawKeys());

function cellValue(b, s, metric) {
  if (metric === "total") return kv.read[b][s] + kv.written[b][s] + kv.throttled[b][s];
  return kv[metric][b][s];
}

// Absolute level of a cell: 2 when one PartitionKey in it ran at ≥ the
// hot share of its target, 1 at ≥ the warm share.
function level(b, s) {
  const target = kv.partition_target;
  if (!target) return 0;
  const p = kv.peak[b][s];
  return p >= kv.hot_share * target ? 2 : p >= kv.warm_share * target ? 1 : 0;
}

function colour(v, max) {
  if (v <= 0) return "#11151c";
  const t = Math.log1p(v) / Math.log1p(max);
  // Dark blue → teal → yellow → white.
  const stops = [[17, 35, 90], [20, 140, 140], [240, 200, 40], [255, 255, 240]];
  const x = t * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const f = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function drawKeys() {
  const metric = $("#kv-metric").value;
  const canvas = $("#heatmap");
  const ctx = canvas.getContext("2d");
  const rows = kv.buckets.length;
  const cols = kv.slots.length;
  const W = canvas.width, H = canvas.height;
  ctx.fillStyle = "#0b0e13";
  ctx.fillRect(0, 0, W, H);
  $("#kv-target").textContent = fmt(kv.partition_target || 0);
  $("#kv-hot-share").textContent = Math.round(kv.hot_share * 100);
  $("#kv-warm-share").textContent = Math.round(kv.warm_share * 100);
  const host = $("#keyviz");
  host.dataset.table = kv.table;
  host.dataset.buckets = rows;
  host.dataset.slots = cols;
  if (rows === 0) {
    ctx.fillStyle = "#8b95a5";
    ctx.font = "16px sans-serif";
    ctx.fillText(`no traffic on ${kv.table} yet`, 20, 40);
    host.dataset.peaks = "[]";
    host.dataset.hottest = "";
    host.dataset.warnings = "0";
    $("#hot-buckets tbody").innerHTML = "";
    return;
  }
  const cw = W / cols, rh = H / rows;
  let max = 0;
  for (let b = 0; b < rows; b++) for (let s = 0; s < cols; s++) max = Math.max(max, cellValue(b, s, metric));
  const peaks = [];
  let warnings = 0;
  for (let s = 0; s < cols; s++) {
    let best = -1, bestV = 0;
    for (let b = 0; b < rows; b++) {
      const v = cellValue(b, s, metric);
      if (v > bestV) { bestV = v; best = b; }
      ctx.fillStyle = colour(v, max || 1);
      ctx.fillRect(s * cw, b * rh, Math.ceil(cw), Math.ceil(rh));
    }
    peaks.push(best);
  }
  // Absolute warnings, drawn over the colour scale.
  ctx.lineWidth = 2;
  for (let b = 0; b < rows; b++) for (let s = 0; s < cols; s++) {
    const l = level(b, s);
    if (!l) continue;
    warnings++;
    ctx.strokeStyle = l === 2 ? "#ff3b30" : "#ff9f0a";
    ctx.strokeRect(s * cw + 1, b * rh + 1, Math.max(cw - 2, 1), Math.max(rh - 2, 1));
  }
  // Range-partition boundaries: a line above the first bucket at or past
  // each range's lower bound, from the split that made it (if that is in
  // the window) to now.
  ctx.font = "11px sans-serif";
  const t0 = Date.parse(kv.slots[0]);
  const column = (at) => Math.floor((Date.parse(at) - t0) / (kv.slot_seconds * 1000));
  let boundaries = 0;
  for (const r of kv.ranges) {
    const b = kv.buckets.findIndex((k) => k.first >= r.lo);
    if (b < 0) continue;
    const split = kv.events.filter((e) => e.kind === "split" && e.key === r.lo).pop();
    const x0 = split ? Math.max(0, column(split.at)) * cw : 0;
    boundaries++;
    ctx.strokeStyle = "rgba(255,255,255,0.55)";
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(x0, b * rh);
    ctx.lineTo(W, b * rh);
    ctx.stroke();
    ctx.setLineDash([]);
    if (rh >= 6 || kv.ranges.length <= 64) {
      ctx.fillStyle = "#e8edf5";
      ctx.fillText(`server ${r.server}`, W - 70, b * rh + 12);
    }
  }
  host.dataset.boundaries = String(boundaries);
  // Balancer events: a diamond at their time and key.
  for (const e of kv.events) {
    const s = column(e.at);
    const b = Math.max(0, kv.buckets.findIndex((k) => k.last >= e.key));
    if (s < 0 || s >= cols) continue;
    const x = s * cw + cw / 2, y = b * rh + rh / 2;
    ctx.fillStyle = e.kind === "split" ? "#bf5af2" : "#64d2ff";
    ctx.beginPath();
    ctx.moveTo(x, y - 6); ctx.lineTo(x + 6, y); ctx.lineTo(x, y + 6); ctx.lineTo(x - 6, y); ctx.fill();
  }
  host.dataset.peaks = JSON.stringify(peaks);
  host.dataset.warnings = String(warnings);
  // Axis: a label every few rows.
  const every = Math.max(1, Math.ceil(rows / 16));
  $("#kv-axis").innerHTML = kv.buckets
    .map((k, b) => (b % every ? "" : `<div style="top:${(b * rh).toFixed(1)}px">${esc(k.first_label)}</div>`))
    .join("");
  $("#kv-time").textContent =
    `${cols} slots of ${kv.slot_seconds} s, ${kv.slots[0]} → now (older history is kept in coarser slots: choose a longer window)` + (kv.coarse ? " · some rows merge keys by prefix (more keys than the budget)" : "");
  // The busiest ranges over the whole history.
  const totals = kv.buckets.map((k, b) => {
    let read = 0, written = 0, throttled = 0, peak = 0, lv = 0;
    for (let s = 0; s < cols; s++) {
      read += kv.read[b][s]; written += kv.written[b][s]; throttled += kv.throttled[b][s];
      peak = Math.max(peak, kv.peak[b][s]); lv = Math.max(lv, level(b, s));
    }
    return { k, b, read, written, throttled, peak, lv, sum: read + written + throttled };
  });
  totals.sort((x, y) => y.sum - x.sum);
  host.dataset.hottest = totals.length && totals[0].sum > 0 ? totals[0].k.peak_key : "";
  $("#hot-buckets tbody").innerHTML = totals.slice(0, 10).filter((t) => t.sum > 0).map((t) => `
    <tr data-bucket="${t.b}"><td>${esc(t.k.first_label)}${t.k.keys > 1 ? ` … ${esc(t.k.last_label)} (${t.k.keys})` : ""}</td>
    <td>${esc(t.k.peak_key)}</td><td>${t.k.server ?? ""}</td><td>${fmt(t.peak)}</td>
    <td>${fmt(t.read)}</td><td>${fmt(t.written)}</td><td>${fmt(t.throttled)}</td>
    <td class="lv${t.lv}">${["", "warm", "hot"][t.lv]}</td></tr>`).join("");
  $("#kv-events").innerHTML = kv.events.length
    ? kv.events.map((e) => `<li>${esc(e.at)}: ${e.kind === "split" ? `split at ${esc(e.key)}` : `moved the range from ${esc(e.key)}: server ${e.from} → ${e.to}`}</li>`).join("")
    : "<li class=muted>no splits or moves</li>";
}

// The cell under a mouse event: [bucket, slot], or null.
function cellAt(ev) {
  if (!kv || !kv.buckets.length) return null;
  const r = ev.target.getBoundingClientRect();
  const s = Math.floor(((ev.clientX - r.left) / r.width) * kv.slots.length);
  const b = Math.floor(((ev.clientY - r.top) / r.height) * kv.buckets.length);
  return kv.buckets[b] && s >= 0 && s < kv.slots.length ? [b, s] : null;
}

// The statements that hit a cell (the gateway tags each statement's store
// traffic; the store keeps the heaviest per key).
async function openCell(b, s) {
  const k = kv.buckets[b];
  const box = $("#kv-cell");
  const q = new URLSearchParams({ table: kv.table, first: k.first, last: k.last, from: kv.slot_micros[s], window: kv.window_seconds });
  const r = await api(`/api/keyviz/statements?${q}`);
  box.hidden = false;
  box.dataset.bucket = b;
  box.dataset.slot = s;
  box.dataset.statements = r.statements.length;
  box.dataset.top = (r.statements[0] && r.statements[0].query) || "";
  box.innerHTML = `<h4>${esc(k.first_label)}${k.keys > 1 ? ` … ${esc(k.last_label)} (${k.keys} keys)` : ""} · ${esc(r.from)} → ${esc(r.to)}</h4>
    <p class="muted">${fmt(r.entities)} entities counted here; ${fmt(r.attributed)} by the statements below
    (the heaviest per key are kept; the rest, and work of the analytics engine's own tasks, is not attributed)</p>
    <ol>${r.statements.map((x) => `<li><b>${fmt(x.entities)}</b> entities · ${x.query == null
      ? `<span class="muted">a statement no longer in the statement log (${esc(x.tag)})</span>`
      : `<code>${esc(x.query)}</code> <span class="muted">${esc(x.classes.join(", "))} · ${fmt(x.calls)} call${x.calls === 1 ? "" : "s"} in all</span>`}</li>`).join("")
      || "<li class=muted>no statement recorded (internal work, or traffic before the statement log)</li>"}</ol>`;
}

// The busiest cell by the metric shown.
async function openHottestCell() {
  const metric = $("#kv-metric").value;
  let best = null;
  for (let b = 0; b < kv.buckets.length; b++) for (let s = 0; s < kv.slots.length; s++) {
    const v = cellValue(b, s, metric);
    if (v > 0 && (!best || v > best[2])) best = [b, s, v];
  }
  if (best) await openCell(best[0], best[1]);
}

$("#heatmap").addEventListener("click", (ev) => {
  const c = cellAt(ev);
  if (c) openCell(c[0], c[1]).catch((e) => status(e.message, true));
});

$("#heatmap").addEventListener("mousemove", (ev) => {
  const c = cellAt(ev);
  if (!c) return;
  const [b, s] = c;
  const k = kv.buckets[b];
  const r = ev.target.getBoundingClientRect();
  const tip = $("#kv-tip");
  tip.hidden = false;
  tip.style.left = `${ev.clientX - r.left + 14}px`;
  tip.style.top = `${ev.clientY - r.top + 14}px`;
  tip.innerHTML = `<b>${esc(k.first_label)}${k.keys > 1 ? ` … ${esc(k.last_label)}` : ""}</b> (${k.keys} key${k.keys > 1 ? "s" : ""}, server ${k.server ?? "?"})<br>
    ${esc(kv.slots[s])}<br>read ${fmt(kv.read[b][s])}/s · written ${fmt(kv.written[b][s])}/s · throttled ${fmt(kv.throttled[b][s])}/s<br>
    busiest key ${fmt(kv.peak[b][s])}/s of a ${fmt(kv.partition_target)}/s target (in its busiest ${kv.base_seconds} s)<br>
    <span class="muted">click: the statements that hit it</span>`;
});
$("#heatmap").addEventListener("mouseleave", () => ($("#kv-tip").hidden = true));

// ------------------------------------------------------------ partitions

function table(el, rows, columns) {
  if (!rows.length) {
    el.innerHTML = `<tr><td class="muted">none</td></tr>`;
    return;
  }
  const cols = columns || Object.keys(rows[0]);
  el.innerHTML = `<thead><tr>${cols.map((c) => `<th>${esc(c)}</th>`).join("")}</tr></thead><tbody>` +
    rows.map((r) => `<tr>${cols.map((c) => `<td>${esc(typeof r[c] === "number" ? fmt(r[c]) : r[c])}</td>`).join("")}</tr>`).join("") +
    "</tbody>";
}

const MAX_RANGE_ROWS = 200;

async function partitionsPage(params, gen) {
  const load = async () => {
    const [servers, hot, patterns, ranges, throttles] = await Promise.all(
      ["servers", "hot_partitions", "insert_patterns", "range_partitions", "throttle_counters"].map((v) => api(`/api/views/${v}`)));
    const svg = $("#servers-chart");
    const bar = 26, w = 520;
    svg.setAttribute("height", servers.length * (bar + 8) + 10);
    svg.innerHTML = servers.map((s, i) => {
      const share = s.capacity_per_sec ? Math.min(s.load_per_sec / s.capacity_per_sec, 1.5) : 0;
      const y = i * (bar + 8) + 4;
      const colour = share >= 0.9 ? "#ff3b30" : share >= 0.5 ? "#ff9f0a" : "#30d158";
      return `<g data-server="${s.server}"><text x="0" y="${y + 17}">server ${s.server}</text>
        <rect x="80" y="${y}" width="${w}" height="${bar}" fill="#1c2330"/>
        <rect x="80" y="${y}" width="${(w * share) / 1.5}" height="${bar}" fill="${colour}"/>
        <line x1="${80 + w / 1.5}" x2="${80 + w / 1.5}" y1="${y - 2}" y2="${y + bar + 2}" stroke="#e8edf5"/>
        <text x="${90 + w}" y="${y + 17}">${fmt(s.load_per_sec)}/s of ${fmt(s.capacity_per_sec)}/s · ${s.range_partitions} ranges</text></g>`;
    }).join("");
    table($("#hot-partitions"), hot, ["table_name", "partition_key", "load_per_sec", "target_per_sec", "level"]);
    table($("#insert-patterns"), patterns, ["table_name", "pattern", "share", "inserts", "advice"]);
    // Thousands of ranges would bury the page: the busiest are shown.
    const shown = [...ranges].sort((a, b) => b.load_per_sec - a.load_per_sec || b.entities - a.entities).slice(0, MAX_RANGE_ROWS);
    table($("#range-partitions"), shown,
      ["table_name", "lower_bound", "upper_bound", "server", "entities", "partition_keys", "load_per_sec", "offline"]);
    $("#range-count").textContent = ranges.length > shown.length
      ? `${fmt(ranges.length)} range partitions; the ${shown.length} busiest are shown (all: /api/views/range_partitions)`
      : `${fmt(ranges.length)} range partitions`;
    table($("#throttle-counters"), throttles, ["scope", "target_per_sec", "throttled"]);
    status(`updated ${new Date().toLocaleTimeString()}`);
  };
  await load();
  poll(gen, load, 5000);
}

// --------------------------------------------------------------- EXPLAIN

async function explainPage(params) {
  if (params.get("sql")) $("#ex-sql").value = params.get("sql");
  if (params.get("run")) await explain(params.get("run") === "analyze");
}

async function explain(analyze) {
  const out = $("#ex-out");
  out.innerHTML = "<p class=muted>…</p>";
  let r;
  try {
    r = await api("/api/explain", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sql: $("#ex-sql").value, analyze }),
    });
  } catch (e) {
    out.innerHTML = `<div class="error" data-sqlstate="${esc(e.sqlstate)}"><b>ERROR ${esc(e.sqlstate)}</b> ${esc(e.message)}${e.hint ? `<br>HINT: ${esc(e.hint)}` : ""}</div>`;
    return;
  }
  if (!r.plan) {
    out.innerHTML = `<pre>${esc(r.text.join("\n"))}</pre>`;
    return;
  }
  const p = Array.isArray(r.plan) && r.plan[0] && r.plan[0].Plan;
  if (!p) {
    out.innerHTML = `<pre>${esc(JSON.stringify(r.plan, null, 2))}</pre>`;
    return;
  }
  const scanned = analyze ? p["Actual Entities Scanned"] : p["Estimated Entities Scanned"];
  const returned = analyze ? p["Actual Entities Returned"] : p["Estimated Entities Returned"];
  const share = scanned ? Math.min(returned / scanned, 1) : 1;
  const spans = Array.isArray(p["Key Spans"]) ? p["Key Spans"] : [p["Key Spans"]];
  out.innerHTML = `
    <div class="plan" data-class="${esc(p.Class)}">
      <div class="badge class-${esc(p.Class)}" id="ex-class">${esc(p.Class)}</div> <span class="muted">${esc(p.Rating)}</span>
      <div>${esc(p["Relation Name"])} · ${esc(p.Route)}</div>
      <svg width="620" height="64" id="ex-bar">
        <text x="0" y="14">entities scanned ${fmt(scanned)} → returned ${fmt(returned)} (${analyze ? "actual" : "estimated"})</text>
        <rect x="0" y="22" width="600" height="16" fill="#3a4456"/>
        <rect x="0" y="22" width="${(600 * share).toFixed(1)}" height="16" fill="#30d158"/>
        <text x="0" y="58">${share < 1 ? `${fmt((1 - share) * 100)}% of what is read is thrown away` : "everything read is returned"}</text>
      </svg>
      <dl class="facts">
        <dt>store requests</dt><dd>${fmt(p["Estimated Store Requests"])}</dd>
        <dt>pages</dt><dd>${fmt(analyze ? p["Actual Pages"] : p["Estimated Pages"])}</dd>
        <dt>PartitionKeys</dt><dd>${fmt(p["Estimated Partitions"])}</dd>
        <dt>range partitions</dt><dd>${fmt(p["Estimated Range Partitions"])}</dd>
        <dt>servers</dt><dd>${fmt(analyze ? p["Actual Servers"] : p["Estimated Servers"])}</dd>
        <dt>minimum time at the targets</dt><dd>${p["Minimum Seconds At Targets"] == null ? "unknown" : `${fmt(p["Minimum Seconds At Targets"] * 1000)} ms`}</dd>
        ${analyze ? `<dt>elapsed</dt><dd>${fmt(p["Actual Elapsed Seconds"] * 1000)} ms</dd><dt>throttled retries</dt><dd>${fmt(p["Actual Throttled Retries"])}</dd>` : ""}
      </dl>
      <h4>Key spans pushed to the store</h4>
      <ul>${spans.map((s) => `<li><code>${esc(s)}</code></li>`).join("")}</ul>
      ${keySpace(r.key_space)}
      ${p["Residual Filter"] ? `<h4>Filter</h4><code>${esc(p["Residual Filter"])}</code>` : ""}
      <h4>Advice</h4>
      <ul id="ex-advice">${(p.Advice || []).map((a) => `<li>${esc(a)}</li>`).join("") || "<li class=muted>none</li>"}</ul>
    </div>`;
}

// The table's key space as a bar of its range partitions (widths by
// entities held), the ones the spans touch lit in their server's colour.
function keySpace(ks) {
  if (!ks || !ks.ranges.length) return "";
  const W = 1000, total = ks.ranges.reduce((a, r) => a + r.entities, 0);
  const floor = Math.max(total, 1) / (4 * ks.ranges.length);
  // Neighbours alike (server, touched) merge into one segment, and so do
  // neighbours too thin to see (under 2 px, touched or not alike): ten
  // thousand ranges still draw as a few hundred shapes.
  const weight = ks.ranges.reduce((a, r) => a + Math.max(r.entities, floor), 0);
  const thin = (2 * weight) / W;
  const segs = [];
  for (const r of ks.ranges) {
    const w = Math.max(r.entities, floor);
    const last = segs[segs.length - 1];
    if (last && last.touched === r.touched && (last.server === r.server || last.w + w <= thin)) {
      last.w += w; last.n++; last.entities += r.entities;
      if (last.server !== r.server) last.server = -1;
    } else segs.push({ lo: r.lo_label, server: r.server, touched: r.touched, w, n: 1, entities: r.entities });
  }
  const sum = segs.reduce((a, g) => a + g.w, 0);
  const hues = ["#64d2ff", "#30d158", "#ffd60a", "#bf5af2", "#ff9f0a", "#ff6482", "#5e5ce6", "#66d4cf"];
  let x = 0;
  const rects = segs.map((g) => {
    const w = (W * g.w) / sum, at = x;
    x += w;
    const mixed = g.server < 0;
    return `<rect x="${at.toFixed(1)}" y="18" width="${Math.max(w, 1).toFixed(1)}" height="26" fill="${g.touched ? (mixed ? "#8ab4f8" : hues[g.server % hues.length]) : "#2a3342"}"
      stroke="#0b0e13" stroke-width="0.5"><title>${esc(g.lo)}… · ${g.n} range${g.n > 1 ? "s" : ""} · ${mixed ? "several servers" : `server ${g.server}`} · ${fmt(g.entities)} entities${g.touched ? " · read by this plan" : ""}</title></rect>`
      + (g.touched && !mixed && w > 50 ? `<text x="${(at + 4).toFixed(1)}" y="60">server ${g.server}</text>` : "");
  }).join("");
  const touched = ks.ranges.filter((r) => r.touched).length;
  return `<h4>Over the key space</h4>
    <svg id="ex-keyspace" width="${W}" height="70" data-touched="${touched}" data-ranges="${ks.ranges.length}" data-servers="${ks.servers_touched.join(",")}">
      <text x="0" y="12">${esc(ks.table)}: ${fmt(ks.ranges.length)} range partition${ks.ranges.length === 1 ? "" : "s"}, ${fmt(total)} entities · the plan touches ${fmt(touched)} of them on server${ks.servers_touched.length === 1 ? "" : "s"} ${ks.servers_touched.join(", ") || "none"}</text>
      ${rects}
    </svg>`;
}

$("#ex-run").addEventListener("click", () => explain(false));
$("#ex-analyze").addEventListener("click", () => explain(true));

route();
