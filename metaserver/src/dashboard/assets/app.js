// The Ninf dashboard: one page per view (#/servers, #/network, #/graphs, #/graphs/ID,
// #/data, #/gang, #/events), drawn from the metaserver's JSON API with hand-made SVG, and redrawn
// when the live stream (/api/stream) says something changed.
"use strict";

const page = document.getElementById("page");
const SVG = "http://www.w3.org/2000/svg";

function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (!response.ok) {
    throw new Error(`${path}: ${response.status} ${await response.text()}`);
  }
  return response.json();
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  return s < 1 ? `${(s * 1000).toFixed(1)} ms` : `${s.toFixed(3)} s`;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// A stable colour per job or task number.
function colour(n) {
  const hue = (Number(n) * 137.508) % 360;
  return `hsl(${hue.toFixed(0)}, 55%, 62%)`;
}

function sparkline(values) {
  const w = 120, h = 28;
  if (!values.length) return `<svg class="sparkline" width="${w}" height="${h}"></svg>`;
  const max = Math.max(1, ...values);
  const step = values.length > 1 ? w / (values.length - 1) : 0;
  const points = values
    .map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`)
    .join(" ");
  return `<svg class="sparkline" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">` +
    `<polyline points="${points}" fill="none" stroke="#2f6fd6" stroke-width="1.5"/>` +
    `<title>load: ${values.map((v) => v.toFixed(1)).join(", ")}</title></svg>`;
}

async function serversPage() {
  const o = await api("/api/overview");
  const rows = o.servers.map((s) => {
    const modules = Object.entries(s.modules)
      .map(([m, r]) => `<span class="module"><b>${esc(m)}</b>: ${r.map(esc).join(", ")}</span>`)
      .join(" ");
    return `<tr class="server" data-address="${esc(s.address)}">
      <td>${esc(s.address)}</td>
      <td><span class="badge ${s.up ? "up" : "down"}">${s.up ? "up" : "down"}</span></td>
      <td class="num">${s.mflops.toFixed(0)}</td>
      <td class="num">${s.processors}</td>
      <td class="num">${s.load.toFixed(1)}</td>
      <td>${sparkline(s.load_history)}</td>
      <td class="num">${s.running_jobs} / ${s.queued_jobs}</td>
      <td class="num">${bytes(s.stored_bytes)}</td>
      <td class="num">${s.seconds_since_heartbeat.toFixed(1)} s</td>
      <td>${modules}${s.batch_job ? ` <span class="muted">job ${esc(s.batch_job)} of ${esc(s.allocation)},
        ${s.walltime_left.toFixed(0)} s left${s.draining ? ", draining" : ""}</span>` : ""}</td></tr>`;
  }).join("");
  const queues = o.queues.map((q) => `<tr class="queue" data-name="${esc(q.name)}">
      <td>${esc(q.name)}</td><td><span class="badge ${q.state === "active" ? "up" : "down"}">${esc(q.state)}</span></td>
      <td class="num">${q.pending}</td><td class="num">${q.running}</td><td class="num">${q.servers}</td>
      <td class="num">${q.failures}</td><td><pre>${esc(q.last_error)}</pre></td></tr>`).join("");
  const queueTable = o.queues.length === 0 ? "" : `<h2>Allocation queues</h2>
    <table id="queues"><thead><tr><th>queue</th><th>state</th><th class="num">pending</th>
    <th class="num">running</th><th class="num">servers</th><th class="num">failures</th>
    <th>last error</th></tr></thead><tbody>${queues}</tbody></table>`;
  page.innerHTML = `<h2>Servers</h2>
    <p class="muted">scheduler <b>${esc(o.scheduler)}</b>, predictor <b>${esc(o.predictor)}</b>,
    ${o.running_graphs} graph(s) running</p>
    <table id="servers"><thead><tr><th>server</th><th>state</th><th class="num">MFLOPS</th>
    <th class="num">procs</th><th class="num">load</th><th>load history</th>
    <th class="num">running / queued</th><th class="num">stored</th>
    <th class="num">heartbeat</th><th>modules</th></tr></thead><tbody>${rows}</tbody></table>
    ${queueTable}`;
}

async function networkPage() {
  const m = await api("/api/network");
  const n = m.locations.length;
  if (!n) {
    page.innerHTML = `<h2>Network</h2><p class="muted">Nothing measured yet.</p>`;
    return;
  }
  const cell = 64, left = 170, top = 130;
  const values = m.throughput_mb_s.flat().filter((v) => v !== null);
  const max = Math.log10(Math.max(1, ...values) + 1);
  let svg = `<svg id="heatmap" width="${left + n * cell + 130}" height="${top + n * cell + 10}">`;
  m.locations.forEach((l, i) => {
    svg += `<text x="${left - 6}" y="${top + i * cell + cell / 2 + 4}" text-anchor="end">${esc(l)}</text>`;
    svg += `<text transform="translate(${left + i * cell + cell / 2 + 4},${top - 6}) rotate(-50)">${esc(l)}</text>`;
  });
  m.throughput_mb_s.forEach((row, i) => row.forEach((v, j) => {
    const x = left + j * cell, y = top + i * cell;
    const lat = m.latency_ms[i][j];
    if (v === null) {
      svg += `<rect class="cell empty" x="${x}" y="${y}" width="${cell - 2}" height="${cell - 2}" fill="#eceef1"><title>${esc(m.locations[i])} → ${esc(m.locations[j])}: not measured</title></rect>`;
      return;
    }
    const t = Math.log10(v + 1) / max;
    const fill = `hsl(${(10 + 120 * t).toFixed(0)}, 65%, ${(78 - 30 * t).toFixed(0)}%)`;
    svg += `<rect class="cell" x="${x}" y="${y}" width="${cell - 2}" height="${cell - 2}" fill="${fill}"><title>${esc(m.locations[i])} → ${esc(m.locations[j])}: ${v.toFixed(1)} MB/s, ${lat.toFixed(2)} ms</title></rect>`;
    svg += `<text x="${x + cell / 2 - 1}" y="${y + cell / 2 + 4}" text-anchor="middle">${v >= 100 ? v.toFixed(0) : v.toFixed(1)}</text>`;
  }));
  svg += "</svg>";
  page.innerHTML = `<h2>Network</h2><p class="muted">Latest measured throughput, MB/s, from row to column
    (hover for latency). Green is fast, red is slow.</p><div class="card">${svg}</div>`;
}

async function graphsPage() {
  const graphs = await api("/api/graphs?limit=100");
  const rows = graphs.map((g) => {
    const error = g.actual_makespan
      ? `${(100 * (g.predicted_makespan - g.actual_makespan) / g.actual_makespan).toFixed(0)}%` : "–";
    return `<tr class="graph" data-id="${g.id}">
      <td><a href="#/graphs/${g.id}">#${g.id}</a></td><td>${esc(g.label)}</td>
      <td>${esc(g.scheduler)}</td><td class="num">${g.tasks}</td><td class="num">${g.edges}</td>
      <td><span class="badge ${esc(g.state)}">${esc(g.state)}</span></td>
      <td class="num">${seconds(g.predicted_makespan)}</td><td class="num">${seconds(g.actual_makespan)}</td>
      <td class="num">${error}</td><td class="num">${(100 * g.inter_server_ratio).toFixed(0)}%</td>
      <td class="error">${esc(g.error)}</td></tr>`;
  }).join("");
  page.innerHTML = `<h2>Recent graphs</h2><table id="graphs"><thead><tr><th>graph</th><th>label</th>
    <th>scheduler</th><th class="num">tasks</th><th class="num">edges</th><th>state</th>
    <th class="num">predicted</th><th class="num">actual</th><th class="num">prediction error</th>
    <th class="num">inter-server</th><th>error</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function ganttSvg(g) {
  const rowHeight = 44, left = 170, width = 900, top = 24;
  const end = Math.max(
    g.graph.predicted_makespan, g.graph.actual_makespan || 0,
    ...g.tasks.map((t) => Math.max(t.predicted_finish, t.actual_finish || 0)), 1e-6);
  const x = (t) => left + (t / end) * width;
  const row = (server) => g.rows.indexOf(server);
  let svg = `<svg id="gantt" width="${left + width + 30}" height="${top + g.rows.length * rowHeight + 30}">`;
  g.rows.forEach((server, i) => {
    const y = top + i * rowHeight;
    svg += `<line class="axis" x1="${left}" x2="${left + width}" y1="${y + rowHeight}" y2="${y + rowHeight}"/>`;
    svg += `<text class="row-label" x="${left - 8}" y="${y + rowHeight / 2 + 4}" text-anchor="end">${esc(server)}</text>`;
  });
  for (let k = 0; k <= 4; k += 1) {
    const t = (end * k) / 4;
    svg += `<text x="${x(t)}" y="${top + g.rows.length * rowHeight + 16}" text-anchor="middle">${seconds(t)}</text>`;
  }
  const centre = {};
  g.tasks.forEach((t) => {
    const y = top + row(t.server_address) * rowHeight;
    const title = `${t.label} (${t.function}, ${t.processors} proc) on ${t.server_address}: predicted ` +
      `${seconds(t.predicted_start)}–${seconds(t.predicted_finish)}, actual ` +
      `${seconds(t.actual_start)}–${seconds(t.actual_finish)}`;
    svg += `<g class="task" data-task="${t.task}"><title>${esc(title)}</title>`;
    svg += `<rect class="bar-predicted" x="${x(t.predicted_start)}" y="${y + 5}" width="${Math.max(1, x(t.predicted_finish) - x(t.predicted_start))}" height="15"/>`;
    if (t.actual_start !== null && t.actual_finish !== null) {
      svg += `<rect class="bar-actual" x="${x(t.actual_start)}" y="${y + 22}" width="${Math.max(1, x(t.actual_finish) - x(t.actual_start))}" height="15"/>`;
      centre[t.task] = { start: x(t.actual_start), finish: x(t.actual_finish), y: y + 29 };
    } else {
      centre[t.task] = { start: x(t.predicted_start), finish: x(t.predicted_finish), y: y + 12 };
    }
    const labelAt = t.actual_start !== null ? x(t.actual_start) : x(t.predicted_start);
    svg += `<text x="${labelAt + 3}" y="${y + 16}">${esc(t.label)}</text></g>`;
  });
  g.edges.forEach((e) => {
    const a = centre[e.from_task], b = centre[e.to_task];
    if (!a || !b) return;
    const mid = (a.finish + b.start) / 2;
    svg += `<path class="edge${e.crosses ? " crosses" : ""}" d="M${a.finish},${a.y} C${mid},${a.y} ${mid},${b.y} ${b.start},${b.y}"><title>task ${e.from_task} → ${e.to_task}: ${bytes(e.bytes)}${e.crosses ? " across servers" : ""}</title></path>`;
  });
  return svg + "</svg>";
}

async function graphPage(id) {
  const g = await api(`/api/graphs/${encodeURIComponent(id)}`);
  const s = g.graph;
  const crossing = g.edges.filter((e) => e.crosses).length;
  page.innerHTML = `<h2>Graph #${s.id} ${esc(s.label)} <span class="badge ${esc(s.state)}">${esc(s.state)}</span></h2>
    <p>scheduler <b>${esc(s.scheduler)}</b>; ${s.tasks} tasks, ${s.edges} edges
    (${crossing} crossed servers); predicted ${seconds(s.predicted_makespan)}, actual
    ${seconds(s.actual_makespan)}. <span class="error">${esc(s.error)}</span></p>
    <p class="legend"><span><i class="swatch" style="border:1px dashed #8a94a3"></i>predicted</span>
    <span><i class="swatch" style="background:#4f86d9"></i>actual</span>
    <span><i class="swatch" style="background:var(--cross)"></i>edge across servers</span></p>
    <div class="card">${ganttSvg(g)}</div>`;
}

function gangCard(v) {
  if (v.error) {
    return `<div class="card gang" data-server="${esc(v.server)}"><h3>${esc(v.server)}</h3><p class="error">${esc(v.error)}</p></div>`;
  }
  const names = {};
  v.jobs.forEach((j) => { names[j.job] = j.function; });
  const header = Array.from({ length: v.processors }, (_, c) => `<th>P${c}</th>`).join("");
  const rows = v.cells.map((cells, r) => {
    const tds = cells.map((job) => (job === null
      ? `<td class="idle">·</td>`
      : `<td class="job" style="background:${colour(job)}" title="job ${job}: ${esc(names[job] || "")}">${job}</td>`)).join("");
    return `<tr class="${v.current_row === r ? "current" : ""}"><th>row ${r}</th>${tds}</tr>`;
  }).join("");
  const queue = v.jobs.filter((j) => j.state === "queued")
    .map((j) => `job ${j.job} (${esc(j.function)}, ${j.processors} proc)`).join(", ") || "empty";
  return `<div class="card gang" data-server="${esc(v.server)}"><h3>${esc(v.server)}</h3>
    <p class="muted">${v.processors} processors, ${v.rows} of ${v.max_rows} rows, quantum
    ${seconds(v.quantum)}, ${esc(v.policy)}; running now: ${v.running_now.join(", ") || "nothing"}</p>
    <table class="gang-table"><thead><tr><th></th>${header}</tr></thead><tbody>${rows ||
      `<tr><td colspan="${v.processors + 1}" class="idle">no jobs</td></tr>`}</tbody></table>
    <p class="muted">queue: ${queue}; expected wait ${seconds(v.expected_wait_seconds)};
    ${v.admitted} admitted, ${v.finished} finished</p></div>`;
}

async function dataPage() {
  const d = await api("/api/data");
  const servers = d.servers.map((s) => `<tr class="data-server" data-server="${esc(s.server)}">
      <td>${esc(s.server)}</td><td class="num">${s.copies}</td><td class="num">${bytes(s.bytes)}</td>
      <td class="num">${s.data_cap_bytes ? bytes(s.data_cap_bytes) : "–"}</td></tr>`).join("");
  const owners = d.owners.map((o) => `<tr class="data-owner" data-owner="${esc(o.owner)}">
      <td>${esc(o.owner)}</td><td class="num">${o.handles}</td><td class="num">${bytes(o.bytes)}</td></tr>`).join("");
  const handles = d.handles.map((h) => `<tr class="handle" data-id="${esc(h.id)}">
      <td><code>${esc(h.id)}…</code></td><td>${esc(h.owner)}</td><td>${esc(h.mode)}</td>
      <td class="num">${bytes(h.bytes)}</td>
      <td class="servers">${h.servers.length ? h.servers.map(esc).join(", ") : `<span class="muted">no value yet</span>`}</td>
      <td class="num">${h.lease_left.toFixed(0)} s</td></tr>`).join("");
  page.innerHTML = `<h2>Data on the grid</h2>
    <p class="muted">Handles kept between calls (docs/data.md): their copies by server, their bytes
    over every copy by owner, and each handle.</p>
    <div class="cards"><div class="card"><h3>By server</h3><table id="data-servers"><thead><tr>
    <th>server</th><th class="num">copies</th><th class="num">bytes</th><th class="num">cap</th>
    </tr></thead><tbody>${servers}</tbody></table></div>
    <div class="card"><h3>By owner</h3><table id="data-owners"><thead><tr><th>owner</th>
    <th class="num">handles</th><th class="num">bytes</th></tr></thead><tbody>${owners ||
      `<tr><td colspan="3" class="muted">No handles.</td></tr>`}</tbody></table></div></div>
    <h3>Handles</h3><table id="handles"><thead><tr><th>handle</th><th>owner</th><th>mode</th>
    <th class="num">bytes</th><th>copies on</th><th class="num">lease left</th></tr></thead>
    <tbody>${handles || `<tr><td colspan="6" class="muted">No handles.</td></tr>`}</tbody></table>`;
}

async function gangPage() {
  const tables = await api("/api/gang");
  page.innerHTML = `<h2>Gang time tables</h2><p class="muted">Rows are time slots, columns processors;
    the outlined row is the slot in progress.</p><div class="cards">${tables.map(gangCard).join("")}</div>`;
}

async function eventsPage() {
  const events = await api("/api/events?limit=300");
  const rows = events.reverse().map((e) => `<tr class="event" data-kind="${esc(e.kind)}">
    <td>${new Date(e.time * 1000).toLocaleTimeString()}</td>
    <td><span class="badge ${esc(e.kind)}">${esc(e.kind)}</span></td><td>${esc(e.server)}</td>
    <td>${e.graph ? `<a href="#/graphs/${e.graph}">#${e.graph}</a>` : ""}</td><td>${esc(e.message)}</td></tr>`).join("");
  page.innerHTML = `<h2>Events</h2><table id="events"><thead><tr><th>time</th><th>kind</th><th>server</th>
    <th>graph</th><th>what happened</th></tr></thead><tbody>${rows ||
      `<tr><td colspan="5" class="muted">Nothing happened yet.</td></tr>`}</tbody></table>`;
}

function route() {
  const parts = (location.hash || "#/servers").slice(2).split("/");
  return { name: parts[0] || "servers", id: parts[1] };
}

let drawing = false;
let again = false;

async function draw() {
  if (drawing) { again = true; return; }
  drawing = true;
  const r = route();
  document.querySelectorAll("nav a").forEach((a) => {
    a.classList.toggle("active", a.dataset.page === r.name);
  });
  try {
    if (r.name === "network") await networkPage();
    else if (r.name === "graphs" && r.id) await graphPage(r.id);
    else if (r.name === "graphs") await graphsPage();
    else if (r.name === "data") await dataPage();
    else if (r.name === "gang") await gangPage();
    else if (r.name === "events") await eventsPage();
    else await serversPage();
    document.body.dataset.drawn = r.name + (r.id ? `/${r.id}` : "");
  } catch (error) {
    page.innerHTML = `<p class="error">${esc(error.message)}</p>`;
  } finally {
    drawing = false;
    if (again) { again = false; draw(); }
  }
}

function live() {
  const badge = document.getElementById("live");
  const stream = new EventSource("/api/stream");
  stream.onopen = () => { badge.textContent = "live"; badge.className = "live on"; };
  stream.onerror = () => { badge.textContent = "reconnecting"; badge.className = "live off"; };
  stream.addEventListener("change", draw);
  // Loads and gang slots move without events; graph pages change only with their graph.
  stream.addEventListener("tick", () => {
    const r = route();
    if (r.name !== "graphs" && r.name !== "events") draw();
  });
}

window.addEventListener("hashchange", draw);
draw();
live();
