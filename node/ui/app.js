// llmesh dashboard: polls this node's admin API and renders the mesh.
// Members, providers and budgets are what `llmesh status`, `members`,
// `providers` and `budgets` read; decisions, rate shares and the series
// behind the map and charts (mesh.js) come from GET /v1/mesh/observe,
// which this node gathers from every peer. Nothing here writes. Text
// from the mesh (names, errors) is always escaped.
"use strict";

const every = Math.max(0.5, Number(new URLSearchParams(location.search).get("every")) || 2) * 1000;
const $ = (sel) => document.querySelector(sel);

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function usd(v) {
  if (v == null) return "";
  const a = Math.abs(v);
  return "$" + Number(v).toFixed(a === 0 || a >= 1 ? 2 : a >= 0.01 ? 4 : 6);
}

function msText(v) {
  if (v == null || v < 0) return "?";
  return v < 10 ? v.toFixed(2) + " ms" : Math.round(v) + " ms";
}

function badge(state) {
  return `<span class="state s-${esc(state)}">${esc(state)}</span>`;
}

// get fetches one admin endpoint, giving up after 5 s so that one slow
// answer (a ledger read while voters change) cannot stop the refresh. A
// 401 means the session ran out: the page reloads, and the node answers
// with its sign-in form.
async function get(path) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 5000);
  let res;
  try {
    res = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store", signal: ctl.signal });
  } catch (e) {
    throw new Error(`${path}: ${e.name === "AbortError" ? "no answer within 5 s" : e.message}`);
  } finally {
    clearTimeout(timer);
  }
  if (res.status === 401) {
    location.reload();
    throw new Error("signed out");
  }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(`${path}: ${body.error?.message || res.status}`);
  return body;
}

function matches(text) {
  const f = $("#filter").value.trim().toLowerCase();
  return f === "" || text.toLowerCase().includes(f);
}

// providerHealth sums up a provider as the mesh sees it: failing when this
// node or any node reporting on it has ejected it, cooling after a 429,
// degraded, unobserved when nobody has called it yet, else healthy.
function providerHealth(p) {
  const fresh = p.observers.filter((o) => o.age_s < 60);
  const ejectedBy = fresh.filter((o) => o.ejected).map((o) => o.observer);
  const coolingBy = fresh.filter((o) => o.cooling_s > 0).map((o) => o.observer);
  if (p.view.ejected || ejectedBy.length) return { state: "failing", by: ejectedBy };
  if (p.view.cooling_s > 0 || coolingBy.length) return { state: "cooling", by: coolingBy };
  if (p.view.degraded || p.view.error_rate > 0.2) return { state: "degraded", by: [] };
  if (p.view.latency_ms === 0 && p.view.ttft_ms === 0 && fresh.length === 0) return { state: "unobserved", by: [] };
  return { state: "healthy", by: [] };
}

function renderNodes(members, peers) {
  const voters = new Map((peers || []).map((p) => [p.id, p]));
  const counts = {};
  const rows = members
    .slice()
    .sort((a, b) => a.region.localeCompare(b.region) || a.name.localeCompare(b.name))
    .filter((m) => {
      counts[m.state] = (counts[m.state] || 0) + 1;
      return matches(`${m.name} ${m.region} ${m.jurisdiction} ${m.state}`) && (!$("#problems").checked || m.state !== "alive");
    })
    .map((m) => {
      const v = voters.get(m.name);
      const raft = v ? (v.leader ? badge("leader") : v.voter ? "voter" : "non-voter") : m.voter ? "voter" : "";
      return `<tr data-node="${esc(m.name)}" data-region="${esc(m.region)}" data-state="${esc(m.state)}">
        <td>${esc(m.name)}${m.self ? ' <span class="muted">(this node)</span>' : ""}</td><td>${esc(m.region)}</td>
        <td>${esc(m.jurisdiction)}</td><td>${badge(m.state)}</td><td>${raft}</td>
        <td class="num">${m.self ? "" : msText(m.rtt_ms)}</td><td>${esc(m.http)}</td><td class="muted">${esc(m.build)}</td></tr>`;
    });
  $("#nodes tbody").innerHTML = rows.join("");
  $("#nodes-summary").textContent = Object.entries(counts).map(([s, k]) => `${k} ${s}`).join(", ");
}

function renderRaft(peers, status) {
  if (!peers) {
    $("#raft").textContent = "Raft: " + (status.leader ? `leader ${status.leader}` : "no leader known");
    return;
  }
  const leader = peers.find((p) => p.leader);
  const voters = peers.filter((p) => p.voter).map((p) => p.id);
  $("#raft").textContent = `Raft leader: ${leader ? leader.id : "none"} · voters: ${voters.join(", ") || "none"}`;
}

function renderProviders(providers) {
  const byRegion = new Map();
  const tally = {};
  for (const p of providers) {
    p.health = providerHealth(p);
    tally[p.health.state] = (tally[p.health.state] || 0) + 1;
    if (!byRegion.has(p.region)) byRegion.set(p.region, []);
    byRegion.get(p.region).push(p);
  }
  const problemsOnly = $("#problems").checked;
  const html = [];
  for (const [region, list] of [...byRegion].sort((a, b) => a[0].localeCompare(b[0]))) {
    const shown = list
      .filter((p) => matches(`${p.name} ${p.kind} ${p.region} ${p.jurisdictions} ${p.models.join(" ")} ${p.health.state}`))
      .filter((p) => !problemsOnly || !["healthy", "unobserved"].includes(p.health.state))
      .sort((a, b) => a.name.localeCompare(b.name));
    if (shown.length === 0) continue;
    const bad = list.filter((p) => p.health.state === "failing").length;
    html.push(`<div class="region" data-region="${esc(region)}"><h3>${esc(region)} <span class="muted">${list.length} providers${bad ? `, <span class="s-failing">${bad} failing</span>` : ""}</span></h3>
      <table><thead><tr><th>provider</th><th>health</th><th>kind</th><th>reach</th><th>jurisdictions</th><th>models</th>
      <th class="num">TTFT</th><th class="num">latency</th><th class="num">errors</th><th class="num" title="share of prompt tokens served from the provider's prompt cache in this node's recent answers">cache hits</th><th class="num">cooling</th><th>reported by</th></tr></thead><tbody>`);
    for (const p of shown) {
      const v = p.view;
      const by = p.health.by.length ? ` <span class="muted">by ${esc(p.health.by.join(", "))}</span>` : "";
      const observers = p.observers.map((o) => `${o.observer}${o.ejected ? " (ejected)" : ""}`).join(", ");
      html.push(`<tr data-provider="${esc(p.name)}" data-health="${esc(p.health.state)}">
        <td>${esc(p.name)}</td><td>${badge(p.health.state)}${by}</td><td>${esc(p.kind)}</td><td>${esc(p.reach)}</td>
        <td>${esc(p.jurisdictions)}</td><td>${esc(p.models.join(", "))}</td>
        <td class="num">${v.ttft_ms ? msText(v.ttft_ms) : ""}</td><td class="num">${v.latency_ms ? msText(v.latency_ms) : ""}</td>
        <td class="num">${(v.error_rate * 100).toFixed(0)}%</td><td class="num cache-hit">${v.cache_hit_ratio > 0 ? (v.cache_hit_ratio * 100).toFixed(0) + "%" : ""}</td>
        <td class="num">${v.cooling_s > 0 ? Math.ceil(v.cooling_s) + " s" : ""}</td>
        <td class="muted">${esc(observers)}</td></tr>`);
    }
    html.push("</tbody></table></div>");
  }
  $("#providers").innerHTML = html.join("") || '<p class="muted">no provider matches</p>';
  $("#providers-summary").textContent = `${providers.length} in ${byRegion.size} regions: ` +
    Object.entries(tally).map(([s, k]) => `${k} ${s}`).join(", ");
}

function renderBudgets(budgets, err) {
  if (err) {
    $("#budgets tbody").innerHTML = `<tr><td colspan="8" class="muted">${esc(err)}</td></tr>`;
    $("#budgets-summary").textContent = "";
    return;
  }
  const rows = budgets
    .filter((b) => matches(`${b.tenant} ${b.period}`))
    .map((b) => {
      const left = b.limit_usd > 0 ? Math.max(0, Math.min(1, b.remaining_usd / b.limit_usd)) : 0;
      return `<tr data-tenant="${esc(b.tenant)}"><td>${esc(b.tenant)}</td><td>${esc(b.period)}</td>
        <td class="num">${usd(b.limit_usd)}</td><td class="num">${usd(b.settled_usd)}</td><td class="num">${usd(b.reserved_usd)}</td>
        <td class="num">${usd(b.remaining_usd)}</td><td><span class="bar${left < 0.1 ? " low" : ""}"><span style="width:${(left * 100).toFixed(0)}%"></span></span></td>
        <td class="num">${b.leases}</td></tr>`;
    });
  $("#budgets tbody").innerHTML = rows.join("") ||
    `<tr><td colspan="8" class="muted">${budgets.length ? "no budget matches" : "no budget set"}</td></tr>`;
  $("#budgets-summary").textContent = `${budgets.length} tenants with a budget`;
}

// renderShares lists every node's rate shares, node by node.
function renderShares(observations) {
  const per = (v) => (v < 0 ? "unlimited" : Math.floor(v).toLocaleString());
  const shares = observations.flatMap((o) => (o.rate_shares || []).map((s) => ({ node: o.node, ...s })));
  $("#shares tbody").innerHTML =
    shares.filter((s) => matches(`${s.node} ${s.provider}`)).map((s) =>
      `<tr data-share="${esc(s.node)}/${esc(s.provider)}"><td>${esc(s.node)}</td><td>${esc(s.provider)}</td><td class="num">${per(s.rpm)}</td>
        <td class="num">${per(s.tpm)}</td><td class="num">${s.spare < 0 ? "" : s.spare.toLocaleString()}</td></tr>`).join("") ||
    `<tr><td colspan="5" class="muted">${shares.length ? "no rate share matches" : "no rate-limited provider"}</td></tr>`;
  const unread = observations.filter((o) => o.error).map((o) => `${o.node}: ${o.error}`);
  $("#unread").textContent = unread.length ? "Not read from every node: " + unread.join("; ") : "";
}

function renderAdmission(a) {
  if (!a) return;
  const mean = a.waited_total ? ` (mean ${(1000 * a.waited_seconds_total / a.waited_total).toFixed(1)} ms)` : "";
  $("#admission").textContent = `Admission: ${a.waiting} of at most ${a.queue_limit} waiting now for escrow or a rate share; ` +
    `${a.waited_total.toLocaleString()} requests waited since start${mean}, each at most ${a.max_wait_s} s.`;
}

// renderDecisions lists every node's last decisions, newest first; a
// forwarded request shows at both ends.
function renderDecisions(observations) {
  const decisions = observations.flatMap((o) => (o.decisions || []).map((d) => ({ node: o.node, ...d })))
    .sort((a, b) => b.time.localeCompare(a.time)).slice(0, 200);
  const rows = decisions
    .filter((d) => matches(`${d.node} ${d.request_id} ${d.tenant} ${d.model} ${d.provider || ""} ${d.via || ""} ${d.outcome} ${d.why}`))
    .filter((d) => !$("#problems").checked || d.outcome !== "ok")
    .map((d) => {
      const t = new Date(d.time).toLocaleTimeString();
      const via = d.via || (d.forwarded_by ? `from ${d.forwarded_by}` : "");
      return `<tr data-request="${esc(d.request_id)}" data-at="${esc(d.node)}"><td>${esc(t)}</td><td>${esc(d.node)}</td><td class="muted">${esc(d.request_id)}</td><td>${esc(d.tenant)}</td>
        <td>${esc(d.model)}</td><td>${esc(d.provider || "")}${d.replica ? ` <span class="muted">${esc(d.replica)}</span>` : ""}</td>
        <td>${esc(via)}</td><td class="num">${d.status}</td><td>${badge(d.outcome)}</td><td class="num">${d.ms}</td>
        <td class="num">${d.cost_usd ? usd(d.cost_usd) : ""}</td>
        <td class="num cached">${d.cached_tokens ? `${d.cached_tokens.toLocaleString()} of ${d.prompt_tokens.toLocaleString()}` : ""}</td><td class="why">${esc(d.why)}</td></tr>`;
    });
  $("#decisions tbody").innerHTML = rows.join("") ||
    `<tr><td colspan="13" class="muted">${decisions.length ? "no decision matches" : "no request yet"}</td></tr>`;
}

let last = null; // the last data fetched, so the filter re-renders at once

function render() {
  if (!last) return;
  const began = performance.now();
  const { status, members, peers, providers, budgets, budgetsErr, observed } = last;
  document.querySelectorAll(".self-name").forEach((e) => (e.textContent = status.node));
  $("#self").innerHTML = `${esc(status.node)} · ${esc(status.region)} (${esc(status.jurisdiction)}) · ${badge(status.phase)} · ` +
    `${esc(status.role)}${status.raft ? " " + esc(status.raft) : ""} · leader ${esc(status.leader || "none")} · ${status.in_flight} in flight`;
  renderNodes(members, peers);
  renderRaft(peers, status);
  renderProviders(providers);
  drawMap(members, peers, providers, observed.nodes);
  drawCharts(observed.series);
  renderBudgets(budgets, budgetsErr);
  renderShares(observed.nodes);
  renderAdmission(status.admission);
  renderDecisions(observed.nodes);
  window.llmeshRenderMs = performance.now() - began; // shown with the refresh time; the browser test reads it
}

async function refresh() {
  try {
    const [status, members, providers, observed, peers, budgets] = await Promise.allSettled([
      get("/v1/mesh/status"), get("/v1/mesh/members"), get("/v1/mesh/providers"), get("/v1/mesh/observe?decisions=100&seconds=300"),
      get("/v1/mesh/raft/peers"), get("/v1/mesh/budgets?consistency=stale"),
    ]);
    const failed = [status, members, providers, observed].filter((r) => r.status === "rejected").map((r) => r.reason.message);
    if (failed.length) throw new Error(failed.join("\n"));
    last = {
      status: status.value, members: members.value.members, providers: providers.value.providers,
      observed: observed.value, peers: peers.status === "fulfilled" ? peers.value.peers : null,
      budgets: budgets.status === "fulfilled" ? budgets.value.budgets : [],
      budgetsErr: budgets.status === "rejected" ? budgets.reason.message : "",
    };
    render();
    $("#banner").hidden = true;
    $("#updated").textContent = `updated ${new Date().toLocaleTimeString()} (drawn in ${Math.round(window.llmeshRenderMs)} ms)`;
  } catch (e) {
    $("#banner").textContent = "Cannot read the node: " + e.message;
    $("#banner").hidden = false;
  } finally {
    setTimeout(refresh, every);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#filter").addEventListener("input", render);
  $("#problems").addEventListener("change", render);
  refresh();
});
