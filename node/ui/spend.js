// llmesh dashboard: spend over time from the ledger (GET
// /v1/mesh/spend, what `llmesh spend` prints), by key, tag set, model,
// provider or tenant: stacked bars per hour (or day), the biggest rows
// in colour and the rest together, and a table of every row. It reads
// this node's replica of the ledger (a stale read), at the page's pace.
// Uses get, esc, usd, matches and $ (app.js) and colour (mesh.js).
"use strict";

const spendView = { by: "key", since: "24h", data: null, err: "", timer: 0 };
const spendTop = 8; // rows drawn in their own colour; the rest are one

async function refreshSpend() {
  try {
    const q = new URLSearchParams({ by: spendView.by, since: spendView.since, consistency: "stale" });
    spendView.data = await get("/v1/mesh/spend?" + q);
    spendView.err = "";
  } catch (e) {
    spendView.err = e.message;
  }
  renderSpend();
  spendView.timer = setTimeout(refreshSpend, every);
}

// spendName is a row's name as shown: a key's label with its id, and
// the tenant's name first unless the rows are tenants.
function spendName(d, r) {
  const name = r.label ? `${r.label} (${r.name})` : r.name;
  return d.by === "tenant" ? name : `${r.tenant}: ${name}`;
}

// spendBuckets is every bucket from the view's start to its end, those
// without spend as zeros, each with what each drawn row spent in it.
function spendBuckets(d, drawn) {
  const step = (d.step === "day" ? 24 : 1) * 3600e3;
  const have = new Map(d.series.map((p) => [Date.parse(p.start), p]));
  const out = [];
  for (let t = Date.parse(d.from); t <= Date.parse(d.until); t += step) {
    const p = have.get(t);
    const parts = drawn.map((i) => (p ? p.rows_nanos[i] : 0));
    const rest = p ? p.nanos - parts.reduce((a, b) => a + b, 0) : 0;
    out.push({ start: t, total: p ? p.nanos : 0, parts, rest });
  }
  return out;
}

// spendChart draws the buckets as stacked bars, one colour per drawn row.
function spendChart(d, names, drawn) {
  const W = 900, H = 180, L = 64, R = 8, T = 8, B = 22;
  const bars = spendBuckets(d, drawn);
  const most = Math.max(0, ...bars.map((b) => b.total));
  const yMax = most > 0 ? most * 1.1 : 1;
  const bw = (W - L - R) / Math.max(1, bars.length);
  const y = (v) => T + (H - T - B) * (1 - v / yMax);
  const out = [];
  let shown = 0;
  bars.forEach((b, k) => {
    if (b.total <= 0) return;
    shown++;
    const x = L + k * bw + bw * 0.1;
    let base = 0;
    const label = new Date(b.start).toLocaleString();
    const stack = b.parts.map((v, j) => [names[drawn[j]], v]).concat([["other rows", b.rest]]);
    for (const [name, v] of stack) {
      if (v <= 0) continue;
      out.push(`<rect x="${x.toFixed(1)}" y="${y(base + v).toFixed(1)}" width="${(bw * 0.8).toFixed(1)}" height="${(y(base) - y(base + v)).toFixed(1)}"` +
        ` fill="${name === "other rows" ? "#8c959f" : colour(name)}" data-key="${esc(name)}"><title>${esc(label)} · ${esc(name)}: ${esc(usd(v / 1e9))}</title></rect>`);
      base += v;
    }
  });
  const first = bars.length ? new Date(bars[0].start) : null;
  const when = (t) => (d.step === "day" ? t.toLocaleDateString() : t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
  return `<svg class="chart" id="chart-spend" data-bars="${shown}" data-total="${d.total_nanos}" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">
    <line x1="${L}" y1="${y(0)}" x2="${W - R}" y2="${y(0)}" class="axis"/><line x1="${L}" y1="${T}" x2="${W - R}" y2="${T}" class="grid"/>
    <text x="${L - 4}" y="${T + 8}" text-anchor="end" class="small">${esc(most > 0 ? usd(most / 1e9) : "$0")}</text>
    <text x="${L - 4}" y="${y(0)}" text-anchor="end" class="small">0</text>
    <text x="${L}" y="${H - 4}" class="small">${first ? esc(when(first)) : ""}</text>
    <text x="${W - R}" y="${H - 4}" text-anchor="end" class="small">now, per ${esc(d.step)}</text>${out.join("")}</svg>`;
}

function renderSpend() {
  const d = spendView.data;
  if (spendView.err || !d) {
    $("#spend-chart").innerHTML = `<p class="muted">${esc(spendView.err || "reading the ledger…")}</p>`;
    $("#spend tbody").innerHTML = "";
    return;
  }
  const names = d.rows.map((r) => spendName(d, r));
  const drawn = d.rows.map((_, i) => i).filter((i) => matches(names[i])).slice(0, spendTop);
  const legend = drawn.map((i) => `<span><i style="background:${colour(names[i])}"></i>${esc(names[i])}</span>`).join("");
  $("#spend-chart").innerHTML = spendChart(d, names, drawn) +
    `<div class="legend">${d.total_nanos > 0 ? legend : '<span class="muted">nothing spent in this window</span>'}</div>`;
  const rows = d.rows.map((r, i) => [r, i]).filter(([, i]) => matches(names[i])).map(([r, i]) =>
    `<tr data-spend="${esc(r.tenant)}/${esc(r.name)}"><td>${esc(r.tenant)}</td><td>${esc(d.by === "tenant" ? "" : names[i].slice(r.tenant.length + 2))}</td>` +
    `<td class="num">${esc(usd(r.usd))}</td><td class="num">${r.requests.toLocaleString()}</td><td class="num">${(100 * r.share).toFixed(1)}%</td></tr>`);
  $("#spend tbody").innerHTML = rows.join("") +
    `<tr class="total"><td>total</td><td></td><td class="num">${esc(usd(d.total_usd))}</td><td class="num">${d.requests.toLocaleString()}</td><td></td></tr>`;
  $("#spend-summary").textContent = `since ${new Date(d.from).toLocaleString()}, by ${d.by}` +
    (d.by === "tag" ? " (a request's cost counts once, under its set of tags)" : "");
}

document.addEventListener("DOMContentLoaded", () => {
  for (const [sel, field] of [["#spend-by", "by"], ["#spend-since", "since"]]) {
    $(sel).value = spendView[field];
    $(sel).addEventListener("change", () => {
      spendView[field] = $(sel).value;
      spendView.data = null;
      clearTimeout(spendView.timer);
      refreshSpend();
    });
  }
  $("#filter").addEventListener("input", renderSpend);
  refreshSpend();
});
