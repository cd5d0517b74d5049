// llmesh dashboard: the mesh map and the traffic charts, drawn as SVG
// from GET /v1/mesh/observe (every node's per-second series, gathered by
// the node serving this page). No library, no build step. Text from the
// mesh is always escaped (esc, from app.js).
"use strict";

const palette = ["#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#1b7c83", "#953800", "#57606a", "#6639ba"];
const colours = new Map(); // a name keeps its colour in every chart

function colour(name) {
  if (!colours.has(name)) colours.set(name, palette[colours.size % palette.length]);
  return colours.get(name);
}

// sum adds a series' array over [from, to), missing arrays counting zero.
function sum(a, from, to) {
  let s = 0;
  if (!a) return 0;
  for (let i = Math.max(0, from); i < Math.min(a.length, to); i++) s += a[i];
  return s;
}

const stateColour = { alive: "#1a7f37", draining: "#9a6700", leaving: "#9a6700", suspect: "#9a6700", failed: "#cf222e", left: "#cf222e" };
const healthColour = { healthy: "#1a7f37", unobserved: "#8c959f", degraded: "#9a6700", cooling: "#9a6700", failing: "#cf222e" };

// drawMap draws the regions as boxes holding their nodes (coloured by
// state, the Raft leader ringed) and their providers (by health), and an
// arrow from node to node for the requests one forwarded to the other in
// the last minute, as wide as their number.
function drawMap(members, peers, providers, observations) {
  const leader = (peers || []).find((p) => p.leader)?.id;
  const regions = new Map();
  const region = (name) => {
    if (!regions.has(name)) regions.set(name, { name, jurisdiction: "", nodes: [], providers: [] });
    return regions.get(name);
  };
  for (const m of members) {
    const r = region(m.region);
    r.jurisdiction = m.jurisdiction;
    r.nodes.push(m);
  }
  for (const p of providers) region(p.region).providers.push(p);
  const list = [...regions.values()].sort((a, b) => a.name.localeCompare(b.name));
  if (list.length === 0) {
    $("#map").innerHTML = "";
    return;
  }
  const W = 1000, gap = 16, top = 70;
  const bw = Math.max(150, (W - gap * (list.length + 1)) / list.length);
  const width = Math.max(W, gap + list.length * (bw + gap));
  const perRow = Math.max(1, Math.floor((bw - 16) / 96));
  const rows = Math.max(1, ...list.map((r) => Math.ceil(r.providers.length / perRow)));
  const bh = 96 + rows * 26;
  const at = new Map(); // node name → its centre
  const out = [];
  list.forEach((r, i) => {
    const x = gap + i * (bw + gap);
    out.push(`<g class="region" data-region="${esc(r.name)}"><rect x="${x}" y="${top}" width="${bw}" height="${bh}" rx="8" class="box"/>`,
      `<text x="${x + 10}" y="${top + 18}" class="region-name">${esc(r.name)}${r.jurisdiction ? ` <tspan class="muted">(${esc(r.jurisdiction)})</tspan>` : ""}</text>`);
    const nodes = r.nodes.slice().sort((a, b) => a.name.localeCompare(b.name));
    nodes.forEach((m, k) => {
      const cx = x + bw * (k + 1) / (nodes.length + 1), cy = top + 46;
      at.set(m.name, { x: cx, y: cy });
      out.push(`<g class="node" data-node="${esc(m.name)}" data-state="${esc(m.state)}"><title>${esc(m.name)}: ${esc(m.state)}${m.name === leader ? ", Raft leader" : ""}</title>`,
        m.name === leader ? `<circle cx="${cx}" cy="${cy}" r="17" class="leader"/>` : "",
        `<circle cx="${cx}" cy="${cy}" r="12" fill="${stateColour[m.state] || "#8c959f"}"/>`,
        `<text x="${cx}" y="${cy + 28}" text-anchor="middle">${esc(m.name)}${m.self ? " ●" : ""}</text></g>`);
    });
    r.providers.slice().sort((a, b) => a.name.localeCompare(b.name)).forEach((p, k) => {
      const px = x + 8 + (k % perRow) * 96, py = top + 88 + Math.floor(k / perRow) * 26;
      const h = p.health?.state || "unobserved";
      out.push(`<g class="provider" data-provider="${esc(p.name)}" data-health="${esc(h)}"><title>${esc(p.name)} (${esc(p.kind)}): ${esc(h)}</title>`,
        `<rect x="${px}" y="${py}" width="90" height="20" rx="4" fill="${healthColour[h] || "#8c959f"}" opacity="0.18" stroke="${healthColour[h] || "#8c959f"}"/>`,
        `<text x="${px + 45}" y="${py + 14}" text-anchor="middle" class="small">${esc(p.name.length > 13 ? p.name.slice(0, 12) + "…" : p.name)}</text></g>`);
    });
    out.push("</g>");
  });
  // Forwards of the last minute, from each node's own series.
  const edges = [];
  for (const o of observations) {
    const s = o.series;
    if (!s || !s.forwards) continue;
    for (const [to, samples] of Object.entries(s.forwards)) {
      const n = sum(samples.requests, s.seconds - 60, s.seconds);
      if (n > 0 && at.has(o.node) && at.has(to) && o.node !== to) edges.push({ from: o.node, to, n });
    }
  }
  for (const e of edges) {
    const a = at.get(e.from), b = at.get(e.to);
    const lift = 30 + Math.abs(b.x - a.x) / 6;
    const mx = (a.x + b.x) / 2, my = Math.min(a.y, b.y) - lift;
    const w = Math.min(8, 1.5 + Math.log2(e.n));
    out.push(`<g class="edge" data-from="${esc(e.from)}" data-to="${esc(e.to)}" data-requests="${e.n}"><title>${esc(e.from)} → ${esc(e.to)}: ${e.n} requests forwarded in the last minute</title>`,
      `<path d="M${a.x},${a.y - 14} Q${mx},${my} ${b.x},${b.y - 14}" stroke-width="${w.toFixed(1)}" marker-end="url(#arrow)"/>`,
      `<text x="${mx}" y="${(a.y + b.y) / 2 - lift / 2 - 6}" text-anchor="middle" class="small">${e.n}/min</text></g>`);
  }
  const height = top + bh + 12;
  $("#map").setAttribute("viewBox", `0 0 ${width} ${height}`);
  $("#map").innerHTML = `<defs><marker id="arrow" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="5" markerHeight="5" orient="auto-start-reverse">` +
    `<path d="M0,0 L10,5 L0,10 z"/></marker></defs>` + out.join("");
  $("#map-summary").textContent = `${list.length} regions, ${members.length} nodes, ${providers.length} providers` +
    (edges.length ? `, ${edges.reduce((t, e) => t + e.n, 0)} requests forwarded in the last minute` : "");
}

// buckets folds a key's per-second samples into points of step seconds:
// f(samples, from, to) is a point's value, or null for none.
function buckets(samples, seconds, step, f) {
  const out = [];
  for (let from = seconds % step; from < seconds; from += step) out.push(f(samples, from, from + step));
  return out;
}

const step = 5;
const measures = {
  rate: (s, a, b) => sum(s.requests, a, b) / step,
  errors: (s, a, b) => sum(s.errors, a, b) / step,
  latency: (s, a, b) => { const n = sum(s.requests, a, b); return n ? sum(s.latency_ms_sum, a, b) / n : null; },
  ttft: (s, a, b) => { const n = sum(s.ttft_count, a, b); return n ? sum(s.ttft_ms_sum, a, b) / n : null; },
  // The share of prompt tokens served from the provider's prompt cache.
  cacheHit: (s, a, b) => { const n = sum(s.prompt_tokens, a, b); return n ? (100 * sum(s.cached_tokens, a, b)) / n : null; },
};

// cumulative turns a key's cost per second into what it spent since the
// window began, per bucket.
function cumulative(s, seconds) {
  let t = 0;
  return buckets(s, seconds, step, (x, a, b) => (t += sum(x.cost_usd, a, b)));
}

function fmt(v, unit) {
  if (unit === "$") return usd(v);
  if (unit === "ms") return msText(v);
  return (v >= 10 ? Math.round(v) : Number(v.toFixed(2))) + (unit ? " " + unit : "");
}

// chart draws one chart: a line per key, the window's time along x.
function chart(id, title, unit, lines, seconds) {
  const W = 440, H = 150, L = 56, R = 8, T = 8, B = 20;
  let most = 0, points = 0, drawn = false;
  for (const l of lines) for (const v of l.values) if (v != null) { drawn = true; most = Math.max(most, v); if (v > 0) points++; }
  const yMax = most > 0 ? most * 1.1 : 1;
  const n = lines.length ? lines[0].values.length : 0;
  const x = (i) => L + (n > 1 ? (i * (W - L - R)) / (n - 1) : 0);
  const y = (v) => T + (H - T - B) * (1 - v / yMax);
  const paths = lines.map((l) => {
    let d = "", dots = "";
    const v = l.values;
    v.forEach((p, i) => {
      if (p == null) return;
      d += `${v[i - 1] != null ? "L" : "M"}${x(i).toFixed(1)},${y(p).toFixed(1)}`;
      if (v[i - 1] == null && v[i + 1] == null) dots += `<circle cx="${x(i).toFixed(1)}" cy="${y(p).toFixed(1)}" r="2.5" fill="${colour(l.name)}"/>`;
    });
    return `<path d="${d}" stroke="${colour(l.name)}" data-key="${esc(l.name)}"><title>${esc(l.name)}</title></path>${dots}`;
  });
  const legend = lines.map((l) => `<span><i style="background:${colour(l.name)}"></i>${esc(l.name)}</span>`).join("");
  return `<figure class="chart-box"><figcaption>${esc(title)}</figcaption>
    <svg class="chart" id="${id}" data-points="${points}" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">
      <line x1="${L}" y1="${y(0)}" x2="${W - R}" y2="${y(0)}" class="axis"/><line x1="${L}" y1="${T}" x2="${W - R}" y2="${T}" class="grid"/>
      <text x="${L - 4}" y="${T + 8}" text-anchor="end" class="small">${esc(most > 0 ? fmt(most, unit) : "0")}</text>
      <text x="${L - 4}" y="${y(0)}" text-anchor="end" class="small">0</text>
      <text x="${L}" y="${H - 4}" class="small">−${Math.round(seconds / 60)} min</text><text x="${W - R}" y="${H - 4}" text-anchor="end" class="small">now</text>
      ${paths.join("")}</svg>
    <div class="legend">${drawn ? legend : '<span class="muted">nothing to draw yet</span>'}</div></figure>`;
}

// drawCharts draws the mesh's last minutes: requests, errors, latency,
// TTFT and prompt cache hits by provider, requests and cost by tenant.
function drawCharts(series) {
  if (!series || !series.seconds) return;
  const secs = series.seconds;
  const keys = (m) => Object.keys(m || {}).filter((k) => matches(k)).sort();
  const by = (m, f) => keys(m).map((name) => ({ name, values: buckets(m[name], secs, step, f) }));
  const p = series.providers, t = series.tenants;
  const served = (m) => Object.fromEntries(Object.entries(m || {}).filter(([k]) => k !== "(refused)"));
  $("#charts").innerHTML = [
    chart("chart-requests", "Requests per second, by provider", "/s", by(p, measures.rate), secs),
    chart("chart-errors", "Errors per second (status ≥ 400), by provider", "/s", by(p, measures.errors), secs),
    chart("chart-latency", "Mean latency, by provider", "ms", by(served(p), measures.latency), secs),
    chart("chart-ttft", "Mean time to first token (streams), by provider", "ms", by(served(p), measures.ttft), secs),
    chart("chart-cache", "Prompt cache hits (cached of prompt tokens), by provider", "%", by(served(p), measures.cacheHit), secs),
    chart("chart-tenants", "Requests per second, by tenant", "/s", by(t, measures.rate), secs),
    chart("chart-cost", "Cost since the window began, by tenant", "$", keys(t).map((name) => ({ name, values: cumulative(t[name], secs) })), secs),
  ].join("");
}
