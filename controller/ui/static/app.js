// llmgw console: plain JavaScript over the controller's JSON API. No build
// step, no dependencies. Everything shown comes from GET /v1/nodes,
// /v1/facility, /v1/power, /v1/replicas, /v1/replicas/{id}, /v1/catalog,
// /v1/models, /v1/models/{model}/history and /healthz; the picture's racks
// and rows are derived from the nodes' locations.
'use strict';

const API = '../v1/';
const LEVELS = ['site', 'room', 'row', 'rack', 'pdu'];
const TOKEN_KEY = 'llmgw.token';
const MODEL_KEY = 'llmgw.model';
const POLL_MS = 3000;

const state = {
  nodes: [],
  facility: { headroom: 0, domains: [] },
  power: null,          // GET /v1/power: learned draw, caps; null from a controller without it
  replicas: [],
  catalog: { models: [] },
  models: [],           // GET /v1/models
  history: {},          // model -> GET /v1/models/{model}/history (Models view only)
  health: null,
  loaded: false,
  fetchError: null,
  // UI state
  holdForm: null,       // domain key whose hold form is open
  labelForm: null,      // node name whose label form is open
  expanded: new Set(),  // replica ids whose explanation is shown
  explain: {},          // replica id -> detail (GET /v1/replicas/{id})
  // What is being typed, kept across the re-renders of every refresh.
  draft: { holdReason: '', holdDrain: false, panelDomain: '', panelReason: '', panelDrain: false, labels: {} },
  focus: null,          // element id to focus after the next render
  replicaModel: '',     // Replicas view filter
  nodeFilter: '',       // Nodes view filter
  busy: false,
};

// ---------- small helpers ----------

// h builds an element: h('div', {class: 'x', onclick: f}, child, 'text', ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    // Through the CSSOM: the page's Content-Security-Policy refuses style
    // attributes.
    else if (k === 'style') el.style.cssText = v;
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = true;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const kW = (w) => (w / 1000).toFixed(1) + ' kW';
const kWn = (w) => (w / 1000).toFixed(1);
const pct = (a, b) => (b > 0 ? Math.max(0, Math.min(100, (100 * a) / b)) : 0);
const domainKey = (level, value) => level + '=' + value;
const isoTime = (t) => new Date(t).toISOString().replace('.000Z', 'Z');

function age(since) {
  if (!since || since.startsWith('0001-')) return '-';
  let s = Math.max(0, Math.floor((Date.now() - Date.parse(since)) / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + (s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h' + Math.floor((s % 3600) / 60) + 'm';
  return Math.floor(s / 86400) + 'd' + Math.floor((s % 86400) / 3600) + 'h';
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

class APIError extends Error {
  constructor(status, msg, hint) { super(msg); this.status = status; this.hint = hint || ''; }
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(API + path, init);
  } catch (e) {
    throw new APIError(0, 'cannot reach the controller: ' + e.message, 'is it running? reload the page when it is');
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = (data && data.error) || (resp.status + ' ' + resp.statusText + ': ' + text.trim());
    let hint = data && data.hint;
    if (resp.status === 401 || resp.status === 403) hint = 'enter the controller\'s api_token in the API token field at the top right';
    throw new APIError(resp.status, msg, hint);
  }
  return data;
}

// ---------- banner ----------

let bannerTimer = null;
function banner(kind, msg, hint) {
  const el = document.getElementById('banner');
  el.replaceChildren(...[h('span', {}, msg), hint ? h('span', { class: 'hint' }, hint) : null].filter(Boolean));
  el.className = 'banner' + (kind === 'ok' ? ' ok' : '');
  el.hidden = false;
  clearTimeout(bannerTimer);
  if (kind === 'ok') bannerTimer = setTimeout(() => { el.hidden = true; }, 4000);
}
function clearBanner() { document.getElementById('banner').hidden = true; }

// ---------- data ----------

async function refresh() {
  try {
    const [nodes, facility, power, replicas, catalog, models, health] = await Promise.all([
      api('GET', 'nodes'), api('GET', 'facility'),
      api('GET', 'power').catch((e) => (e.status === 404 ? null : Promise.reject(e))), // an older controller has none
      api('GET', 'replicas'), api('GET', 'catalog'),
      api('GET', 'models').catch((e) => (e.status === 404 ? [] : Promise.reject(e))), // an older controller has none
      fetch('../healthz', { cache: 'no-store' }).then((r) => r.json()).catch(() => null),
    ]);
    Object.assign(state, { nodes: nodes || [], facility: facility || { domains: [] }, power, replicas: replicas || [], catalog: catalog || { models: [] }, models: models || [], health, loaded: true, fetchError: null });
    if (currentView() === 'models') {
      const hist = {};
      await Promise.all(state.models.filter((m) => m.autoscale).map(async (m) => {
        try { hist[m.name] = await api('GET', 'models/' + encodeURIComponent(m.name) + '/history'); } catch (e) { hist[m.name] = { error: e }; }
      }));
      state.history = hist;
    }
    await Promise.all([...state.expanded].map(async (id) => {
      try { state.explain[id] = await api('GET', 'replicas/' + encodeURIComponent(id)); } catch (e) { state.explain[id] = { error: e }; }
    }));
  } catch (e) {
    state.fetchError = e;
  }
  // Rebuild the view only when something changed: a stable page keeps its
  // text selection, hover and scroll, and does not flicker.
  const sig = JSON.stringify([state.nodes, state.facility, powerSig(), state.replicas, state.catalog, state.models, state.history, state.explain, state.fetchError && state.fetchError.message]);
  if (sig === lastSig) {
    renderStatus();
    return;
  }
  lastSig = sig;
  render();
}
let lastSig = '';

// refreshSoon refreshes after a change: at once (a label or hold answers
// once the controller's view shows it), then a few times as the passes
// that follow carry it out (a drain's moves).
function refreshSoon() {
  for (const ms of [0, 1500, 3000]) setTimeout(refresh, ms);
}

async function act(what, method, path, body) {
  if (state.busy) return false;
  state.busy = true;
  try {
    await api(method, path, body);
    banner('ok', what);
    refreshSoon();
    return true;
  } catch (e) {
    banner('error', e.message, e.hint);
    return false;
  } finally {
    state.busy = false;
  }
}

function hold(domain, reason, drain) {
  return act(domain + (drain ? ' held and draining' : ' held') + (reason ? ': ' + reason : ''),
    'PUT', 'facility/holds/' + encodeURIComponent(domain), { reason, drain });
}
function release(domain) {
  return act(domain + ' released', 'DELETE', 'facility/holds/' + encodeURIComponent(domain));
}

// ---------- derived facts ----------

function domainsByKey() {
  const m = new Map();
  for (const d of state.facility.domains || []) m.set(d.domain, d);
  return m;
}

// replicasByNode maps a node name to the replicas with a shard on it.
function replicasByNode() {
  const m = new Map();
  for (const r of state.replicas) {
    for (const n of r.nodes || []) {
      if (!m.has(n)) m.set(n, []);
      m.get(n).push(r);
    }
  }
  return m;
}

// draw of a domain: the API's figures when it has a budget or hold, else
// the sum over its nodes.
function drawOf(key, nodes, byKey) {
  const d = byKey.get(key);
  if (d) return { committed: d.committed_watts, measured: d.measured_watts, cap: d.cap_watts || 0, limit: d.limit_watts || 0, hold: d.hold || null };
  let committed = 0, measured = 0;
  for (const n of nodes) { committed += n.committed_watts; measured += n.measured_watts; }
  return { committed, measured, cap: 0, limit: 0, hold: null };
}

// powerSig is what the page shows of GET /v1/power: its caps, not the
// learned table's sample counts, which grow every poll and would rebuild
// the page for nothing.
function powerSig() {
  const p = state.power;
  if (!p) return null;
  return [p.domains, (p.gpus || []).filter((g) => g.cap_watts).map((g) => [g.uuid, g.node, g.cap_watts, g.cap_domain]), p.refused];
}

// capsOf says a budgeted domain's caps in the leader's last cap round:
// null where GET /v1/power has no word on it (no round yet, no GPU node in
// it, an older controller); else { engaged, refused (why), capped (GPUs it
// capped), limit, bound, draw, shortfall }.
function capsOf(key) {
  const p = state.power;
  if (!p) return null;
  const refused = (p.refused || []).find((r) => r.domain === key);
  const d = (p.domains || []).find((x) => x.domain === key);
  if (!d && !refused) return null;
  const capped = (p.gpus || []).filter((g) => g.cap_watts && g.cap_domain === key).length;
  return {
    engaged: !!(d && d.engaged), refused: refused ? refused.reason : '', capped,
    limit: d ? d.limit_watts : 0, bound: d ? d.bound_watts : 0, draw: d ? d.draw_watts : 0, shortfall: d ? d.shortfall_watts || 0 : 0,
  };
}

// cappedOnNode counts a node's GPUs with a cap.
function cappedOnNode(name) {
  const p = state.power;
  if (!p) return 0;
  return (p.gpus || []).filter((g) => g.cap_watts && g.node === name).length;
}

function heldKeys() {
  return new Set((state.facility.domains || []).filter((d) => d.hold).map((d) => d.domain));
}

function allDomainKeys() {
  const s = new Set();
  for (const n of state.nodes) for (const l of LEVELS) if (n.location && n.location[l]) s.add(domainKey(l, n.location[l]));
  return [...s].sort();
}

function modelHue(model) {
  let x = 0;
  for (const ch of model) x = (x * 31 + ch.charCodeAt(0)) % 360;
  return x;
}

// ---------- widgets ----------

function meter(d, scale) {
  const max = d.cap > 0 ? d.cap : scale;
  const over = d.limit > 0 && d.committed > d.limit;
  const bar = h('div', { class: 'bar' + (d.cap > 0 ? '' : ' nocap'), title: `committed ${kW(d.committed)}, measured ${kW(d.measured)}` + (d.cap > 0 ? `, cap ${kW(d.cap)}, limit ${kW(d.limit)}` : ', no budget') },
    h('div', { class: 'committed' + (over ? ' over' : ''), style: `width:${pct(d.committed, max)}%` }),
    h('div', { class: 'measured', style: `width:${pct(d.measured, max)}%` }),
    d.cap > 0 && d.limit > 0 && d.limit < d.cap ? h('div', { class: 'limit', style: `left:${pct(d.limit, max)}%` }) : null);
  const figures = h('div', { class: 'figures' },
    h('b', { class: 'c', title: 'committed' }, kWn(d.committed)), ' · ', h('b', { class: 'm', title: 'measured' }, kWn(d.measured)),
    d.cap > 0 ? [' of ', h('b', { title: 'cap' }, kW(d.cap))] : ' kW, no budget');
  return h('div', { class: 'meter' }, bar, figures);
}

// countLine: how a budgeted domain counts shards; for a measured one, what
// it admitted against what declared would be.
function countLine(d) {
  if (!d || !d.cap_watts || !d.count) return null;
  if (d.count !== 'measured') return h('span', { class: 'count declared', title: 'shards count at their declared draw' }, 'declared');
  return h('span', { class: 'count measured', title: d.explain || '' },
    h('span', { class: 'badge measured' }, 'measured'), ' ', kW(d.committed_watts), ' admitted, declared would be ', kW(d.declared_watts || 0));
}

// capsLine: a domain's GPU caps: engaged with how many GPUs it capped and
// its bound against its limit, off, or refused (it admits as declared).
function capsLine(key) {
  const c = capsOf(key);
  if (!c) return null;
  if (c.refused) {
    return h('span', { class: 'caps refused', title: c.refused }, h('span', { class: 'badge refused' }, 'caps refused'), ' admits as declared');
  }
  if (!c.engaged) return h('span', { class: 'caps off', title: `draws ${kW(c.draw)} of its ${kW(c.limit)} limit` }, 'caps off');
  return h('span', { class: 'caps engaged', title: `draws ${kW(c.draw)}; with every GPU at its cap at most ${kW(c.bound)}` + (c.shortfall ? `, ${kW(c.shortfall)} over even at the floors` : '') },
    h('span', { class: 'badge capped' }, 'capped'), ' ', c.capped + (c.capped === 1 ? ' GPU' : ' GPUs'),
    ', bound ', h('b', { class: 'bound' }, kW(c.bound)), ' of ', kW(c.limit), ' limit');
}

// powerLine: a budgeted domain's count and caps, under its meter.
function powerLine(key, byKey) {
  const count = countLine(byKey.get(key));
  const caps = capsLine(key);
  if (!count && !caps) return null;
  return h('div', { class: 'power' }, count, count && caps ? ' · ' : null, caps);
}

function holdBadge(hd) {
  if (!hd) return null;
  return h('span', { class: 'badge held', title: (hd.reason || '') + ' (' + (hd.source === 'facility' ? 'facility file' : 'set through the API') + ')' }, hd.drain ? 'draining' : 'held');
}

// holdControls: the hold button, or release for a run-time hold, or a note
// for a hold in the facility file; with the hold form when open.
function holdControls(key, hd) {
  if (hd) {
    if (hd.source === 'facility') return h('div', { class: 'actions muted' }, 'held in the facility file');
    return h('div', { class: 'actions' }, h('button', { class: 'release', dataset: { domain: key }, onclick: () => release(key) }, 'Release'));
  }
  if (state.holdForm === key) {
    const dr = state.draft;
    const reason = h('input', { type: 'text', id: 'holdform-reason', class: 'reason', placeholder: 'reason (shown in rejections)', 'aria-label': 'reason',
      value: dr.holdReason, oninput: (e) => { dr.holdReason = e.target.value; } });
    const drain = h('input', { type: 'checkbox', class: 'drain', checked: dr.holdDrain, onchange: (e) => { dr.holdDrain = e.target.checked; } });
    const submit = async (ev) => {
      ev.preventDefault();
      if (await hold(key, dr.holdReason.trim(), dr.holdDrain)) {
        state.holdForm = null;
        render();
      }
    };
    return h('form', { class: 'holdform', onsubmit: submit },
      h('strong', {}, 'Hold ' + key),
      reason,
      h('label', {}, drain, 'drain: also move the replicas running here'),
      h('div', { class: 'actions' },
        h('button', { type: 'submit', class: 'danger primary confirm-hold' }, 'Hold'),
        h('button', { type: 'button', onclick: () => { state.holdForm = null; render(); } }, 'Cancel')));
  }
  const open = () => {
    state.holdForm = key;
    state.draft.holdReason = '';
    state.draft.holdDrain = false;
    state.focus = 'holdform-reason';
    render();
  };
  return h('div', { class: 'actions' }, h('button', { class: 'danger hold', dataset: { domain: key }, onclick: open }, 'Hold'));
}

// ---------- Facility view ----------

function viewFacility() {
  const byKey = domainsByKey();
  const held = heldKeys();
  const onNode = replicasByNode();
  const model = sessionStorage.getItem(MODEL_KEY) || '';

  const select = h('select', { id: 'model', onchange: (e) => { sessionStorage.setItem(MODEL_KEY, e.target.value); render(); } },
    h('option', { value: '' }, 'none'),
    state.catalog.models.map((m) => h('option', { value: m.Name, selected: m.Name === model }, m.Name)));
  const toolbar = h('div', { class: 'toolbar' },
    h('label', {}, 'Highlight the replicas of ', select),
    h('div', { class: 'legend' },
      h('span', {}, h('i', { class: 'c' }), 'committed'), h('span', {}, h('i', { class: 'm' }), 'measured'),
      h('span', {}, h('i', { class: 'l' }), 'limit (cap less headroom)'), h('span', {}, h('i', { class: 'h' }), 'held'),
      h('span', {}, h('i', { class: 'hl' }), 'highlighted model'),
      h('span', {}, h('i', { class: 'cap' }), 'GPU capped')));

  // site/room -> row -> rack -> nodes
  const tree = new Map();
  for (const n of state.nodes) {
    const loc = n.location || {};
    const sr = [loc.site, loc.room].filter(Boolean).join(' / ') || 'no site';
    const row = loc.row || '';
    const rack = loc.rack || '';
    if (!tree.has(sr)) tree.set(sr, new Map());
    const rows = tree.get(sr);
    if (!rows.has(row)) rows.set(row, new Map());
    const racks = rows.get(row);
    if (!racks.has(rack)) racks.set(rack, []);
    racks.get(rack).push(n);
  }
  // A rack without a budget is drawn against the largest rack's draw.
  let scale = 1;
  for (const rows of tree.values()) for (const racks of rows.values()) for (const [rack, nodes] of racks) {
    scale = Math.max(scale, drawOf(domainKey('rack', rack), nodes, byKey).committed);
  }

  const sites = [];
  for (const [sr, rows] of [...tree].sort()) {
    const rowEls = [];
    for (const [row, racks] of [...rows].sort()) {
      const rowNodes = [...racks.values()].flat();
      const rowKey = row ? domainKey('row', row) : null;
      const rowDraw = rowKey ? drawOf(rowKey, rowNodes, byKey) : null;
      const rackEls = [];
      for (const [rack, nodes] of [...racks].sort()) {
        nodes.sort((a, b) => a.name.localeCompare(b.name));
        const key = rack ? domainKey('rack', rack) : null;
        const d = drawOf(key || '', nodes, byKey);
        const isHeld = key && held.has(key);
        let hasHL = false;
        const nodeEls = nodes.map((n) => {
          const reps = onNode.get(n.name) || [];
          const hl = model && reps.some((r) => r.model === model);
          hasHL = hasHL || hl;
          const gpus = [];
          const capped = cappedOnNode(n.name);
          for (let i = 0; i < n.gpus_total; i++) gpus.push(h('i', { class: (i < n.gpus_total - n.gpus_free ? 'used' : '') + (i < capped ? ' cap' : '') }));
          return h('li', { class: 'node' + (hl ? ' hl' : '') + (n.schedulable ? '' : ' unsched'), dataset: { node: n.name },
            title: `${n.name}: ${n.gpus_free}/${n.gpus_total} GPUs free, ${kW(n.measured_watts)} measured, ${kW(n.committed_watts)} committed` + (capped ? `, ${capped} GPU${capped === 1 ? '' : 's'} capped` : '') + (n.held ? ', held: ' + n.held.join(', ') : '') },
          h('span', { class: 'name' }, n.name),
          h('span', { class: 'pdu' }, n.location && n.location.pdu ? n.location.pdu : ''),
          h('span', { class: 'gpus' }, gpus),
          capped ? h('span', { class: 'ncap' }, capped + ' capped') : null,
          reps.length ? h('span', { class: 'reps' }, reps.map((r) => h('span', {
            class: 'chip' + (r.model === model ? ' hl' : ''), title: `${r.id} (${r.model}, ${r.state})`,
            style: r.model === model ? null : `background:hsl(${modelHue(r.model)} 60% 92%);color:hsl(${modelHue(r.model)} 50% 28%)`,
          }, r.id))) : null);
        });
        const over = d.limit > 0 && d.committed > d.limit;
        rackEls.push(h('section', { class: 'rack' + (isHeld ? ' held' : '') + (over ? ' over' : '') + (hasHL ? ' has-hl' : ''), dataset: { domain: key || '' } },
          h('header', {}, h('h4', {}, rack || 'no rack'), h('span', {}, over ? h('span', { class: 'badge over' }, 'over') : null, holdBadge(d.hold))),
          d.hold && d.hold.reason ? h('div', { class: 'reason' }, d.hold.reason) : null,
          meter(d, scale),
          key ? powerLine(key, byKey) : null,
          h('ol', { class: 'nodes' }, nodeEls),
          key ? holdControls(key, d.hold) : null));
      }
      const rowHeld = rowKey && held.has(rowKey);
      rowEls.push(h('section', { class: 'row' + (rowHeld ? ' held' : ''), dataset: { domain: rowKey || '' } },
        h('header', {},
          h('h3', {}, row ? 'Row ' + row : 'No row'),
          rowDraw && (rowDraw.cap > 0 || rowDraw.hold) ? meter(rowDraw, rowDraw.committed || 1) : null,
          rowKey ? powerLine(rowKey, byKey) : null,
          rowDraw ? holdBadge(rowDraw.hold) : null,
          rowKey ? holdControls(rowKey, rowDraw.hold) : null),
        h('div', { class: 'racks' }, rackEls)));
    }
    sites.push(h('div', { class: 'site' }, tree.size > 1 || sr !== 'no site' ? h('h2', {}, sr) : null, rowEls));
  }
  if (!state.nodes.length) sites.push(h('p', { class: 'empty' }, 'No nodes: Nomad has none, or none has llmgw location meta.'));

  return [toolbar, sites, domainsTable(byKey)];
}

// domainsTable lists every budgeted or held domain (PDUs, sites and rooms
// too, which the picture does not draw).
function domainsTable(byKey) {
  const ds = state.facility.domains || [];
  let scale = 1;
  for (const d of ds) scale = Math.max(scale, d.committed_watts);
  return h('div', {},
    h('h2', {}, 'Budgeted and held domains'),
    ds.length ? h('table', { id: 'domains' },
      h('thead', {}, h('tr', {}, ['Domain', 'Nodes', 'Draw', 'Cap', 'Headroom', 'Count', 'GPU caps', 'Hold', ''].map((c) => h('th', {}, c)))),
      h('tbody', {}, ds.map((d) => {
        const draw = drawOf(d.domain, [], byKey);
        return h('tr', { class: d.hold ? 'held' : '', dataset: { domain: d.domain } },
          h('td', { class: 'mono' }, d.domain),
          h('td', {}, d.nodes),
          h('td', {}, meter(draw, scale)),
          h('td', {}, d.cap_watts ? kW(d.cap_watts) : '-'),
          h('td', {}, d.cap_watts ? kW(d.headroom_watts || 0) : '-'),
          h('td', { class: 'count-cell' }, countLine(d) || '-'),
          h('td', { class: 'caps-cell' }, capsLine(d.domain) || '-'),
          h('td', {}, d.hold ? [holdBadge(d.hold), ' ', d.hold.reason || '', h('span', { class: 'muted' }, d.hold.source === 'facility' ? ' (file)' : ' (runtime)')] : '-'),
          h('td', {}, holdControls(d.domain, d.hold)));
      }))) : h('p', { class: 'empty' }, 'No budgets or holds.'));
}

// ---------- Nodes view ----------

function viewNodes() {
  const byKey = domainsByKey();
  const keys = allDomainKeys();

  const dr = state.draft;
  const domainSel = h('select', { id: 'hold-domain', 'aria-label': 'domain', onchange: (e) => { dr.panelDomain = e.target.value; } },
    keys.map((k) => h('option', { value: k, selected: k === dr.panelDomain }, k)));
  const reason = h('input', { type: 'text', id: 'hold-reason', placeholder: 'reason', value: dr.panelReason, oninput: (e) => { dr.panelReason = e.target.value; } });
  const drain = h('input', { type: 'checkbox', id: 'hold-drain', checked: dr.panelDrain, onchange: (e) => { dr.panelDrain = e.target.checked; } });
  const submitHold = async (e) => {
    e.preventDefault();
    if (await hold(domainSel.value, dr.panelReason.trim(), dr.panelDrain)) {
      dr.panelReason = '';
      dr.panelDrain = false;
      render();
    }
  };
  const holdPanel = h('div', { class: 'panel' },
    h('h2', {}, 'Holds'),
    h('form', { onsubmit: submitHold },
      'Hold', domainSel, reason, h('label', {}, drain, ' drain'), h('button', { type: 'submit', class: 'danger primary' }, 'Hold')),
    h('ul', {}, (state.facility.domains || []).filter((d) => d.hold).map((d) => h('li', { dataset: { domain: d.domain } },
      h('span', { class: 'mono' }, d.domain), ' ', holdBadge(d.hold), ' ', d.hold.reason || '', ' ',
      d.hold.source === 'facility' ? h('span', { class: 'muted' }, '(facility file: edit it and reload the controller to release)')
        : h('button', { class: 'release', onclick: () => release(d.domain) }, 'Release')))));

  const filter = h('input', { type: 'text', id: 'node-filter', placeholder: 'filter: name or rack=r01-k01', value: state.nodeFilter,
    oninput: (e) => { state.nodeFilter = e.target.value; renderSoon(); } });
  const f = state.nodeFilter.trim();
  const match = (n) => {
    if (!f) return true;
    if (f.includes('=')) { const [l, v] = f.split('=', 2); return n.location && n.location[l] === v; }
    return n.name.includes(f) || Object.values(n.location || {}).some((v) => v.includes(f));
  };
  const rows = [];
  for (const n of state.nodes.filter(match)) {
    const loc = n.location || {};
    rows.push(h('tr', { class: n.held ? 'held' : '', dataset: { node: n.name } },
      h('td', { class: 'mono' }, n.name),
      h('td', { class: 'mono' }, LEVELS.map((l) => loc[l] || '-').join('/')),
      h('td', {}, `${n.gpus_free}/${n.gpus_total}`, n.gpu_model ? h('span', { class: 'muted' }, ' ' + n.gpu_model) : null),
      h('td', {}, (n.measured_watts > 0 ? kWn(n.measured_watts) : '-') + ' / ' + kW(n.committed_watts)),
      h('td', {}, n.schedulable ? 'schedulable' : h('span', { class: 'muted' }, 'unschedulable')),
      h('td', { class: 'mono' }, n.held ? n.held.join(', ') : '-'),
      h('td', {}, h('button', { class: 'edit-labels', onclick: () => toggleLabels(n) }, state.labelForm === n.name ? 'Close' : 'Labels'))));
    if (state.labelForm === n.name) rows.push(h('tr', { class: 'detail' }, h('td', { colspan: 7 }, labelForm(n))));
  }
  const table = h('table', { id: 'nodes' },
    h('thead', {}, h('tr', {}, ['Node', 'Location (site/room/row/rack/pdu)', 'GPUs free/total', 'Power measured/committed', 'Status', 'Held', ''].map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No node matches.'))));
  void byKey;
  return [holdPanel, h('div', { class: 'toolbar' }, filter), table];
}

function toggleLabels(n) {
  if (state.labelForm === n.name) {
    state.labelForm = null;
  } else {
    state.labelForm = n.name;
    state.draft.labels = Object.assign({}, n.location || {});
    state.focus = 'label-rack';
  }
  render();
}

function labelForm(n) {
  const loc = n.location || {};
  const draft = state.draft.labels;
  const inputs = {};
  for (const l of LEVELS) {
    inputs[l] = h('input', { type: 'text', id: 'label-' + l, name: l, value: draft[l] || '', spellcheck: 'false', oninput: (e) => { draft[l] = e.target.value; } });
  }
  const submit = async (e) => {
    e.preventDefault();
    const set = {}, unset = [];
    for (const l of LEVELS) {
      const v = (draft[l] || '').trim();
      if (v && v !== (loc[l] || '')) set[l] = v;
      if (!v && loc[l]) unset.push(l);
    }
    if (!Object.keys(set).length && !unset.length) { banner('error', 'nothing changed'); return; }
    const parts = Object.entries(set).map(([k, v]) => k + '=' + v).concat(unset.map((k) => '-' + k));
    if (await act(`${n.name}: ${parts.join(' ')}`, 'PUT', 'nodes/' + encodeURIComponent(n.name) + '/labels', { set, unset })) {
      state.labelForm = null;
      render();
    }
  };
  return h('form', { class: 'labelform', onsubmit: submit },
    LEVELS.map((l) => h('label', {}, l, inputs[l])),
    h('button', { type: 'submit', class: 'primary' }, 'Save labels'),
    h('p', { class: 'muted', style: 'grid-column:1/-1;margin:0' }, 'Written as Nomad dynamic node metadata (llmgw.rack, …): wins over the client file\'s meta and survives restarts. Clear a field to remove the label.'));
}

// ---------- Replicas view ----------

function viewReplicas() {
  const models = state.catalog.models.map((m) => m.Name);
  const sel = h('select', { id: 'replica-model', onchange: (e) => { state.replicaModel = e.target.value; render(); } },
    h('option', { value: '' }, 'every model'), models.map((m) => h('option', { value: m, selected: m === state.replicaModel }, m)));
  const reps = state.replicas.filter((r) => !state.replicaModel || r.model === state.replicaModel);
  const rows = [];
  for (const r of reps) {
    const open = state.expanded.has(r.id);
    rows.push(h('tr', { class: 'clickable', dataset: { replica: r.id }, onclick: () => toggleExplain(r.id) },
      h('td', { class: 'mono' }, (open ? '▾ ' : '▸ ') + r.id),
      h('td', {}, r.model), h('td', {}, r.profile || '-'),
      h('td', {}, h('span', { class: 'state ' + r.state }, r.state), r.jobs && r.jobs.length > 1 ? h('span', { class: 'muted' }, ` (${r.jobs.length} jobs)`) : null,
        r.engine && r.engine.asleep ? h('span', { class: 'muted', title: 'The engine sleeps: its model is freed until the next request loads it again.' }, ', asleep') : null),
      h('td', { class: 'mono' }, r.domain || '-'),
      h('td', { class: 'mono' }, (r.nodes || []).join(', ') || '-'),
      h('td', {}, age(r.since))));
    if (open) rows.push(h('tr', { class: 'detail' }, h('td', { colspan: 7 }, explainPanel(r.id))));
  }
  return [
    h('div', { class: 'toolbar' }, h('label', {}, 'Model ', sel), h('span', { class: 'muted' }, 'Click a replica for its placement explanation.')),
    h('table', { id: 'replicas' },
      h('thead', {}, h('tr', {}, ['Replica', 'Model', 'Profile', 'State', 'Domain', 'Nodes', 'Age'].map((c) => h('th', {}, c)))),
      h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No replicas.')))),
  ];
}

async function toggleExplain(id) {
  if (state.expanded.has(id)) { state.expanded.delete(id); render(); return; }
  state.expanded.add(id);
  render();
  try { state.explain[id] = await api('GET', 'replicas/' + encodeURIComponent(id)); } catch (e) { state.explain[id] = { error: e }; }
  render();
}

function explainPanel(id) {
  const d = state.explain[id];
  if (!d) return h('p', { class: 'muted' }, 'Loading…');
  if (d.error) return h('p', {}, d.error.message, d.error.hint ? h('span', { class: 'muted' }, ' — ' + d.error.hint) : null);
  const e = d.explain;
  const out = [];
  const dl = [['State', d.state], ['Job', d.job_id || '-']];
  if (d.jobs && d.jobs.length > 1) dl.push(['Jobs', d.jobs.join(', ')]);
  if (!e) dl.push(['Decision', 'none stored yet']);
  else if (e.placed) {
    dl.push(['Decision', 'placed ' + isoTime(e.at)], ['Profile', e.profile || '-'],
      ['Domain', LEVELS.filter((l) => e.domain && e.domain[l]).map((l) => l + '=' + e.domain[l]).join(' ') || '-'],
      ['Nodes', (e.nodes || []).join(', ')], ['Draw', kW(e.watts || 0)]);
  } else dl.push(['Decision', 'not placed ' + isoTime(e.at) + ': no profile fits anywhere']);
  out.push(h('dl', {}, dl.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
  if (e && e.rejections && e.rejections.length) {
    out.push(h('h5', {}, 'Rejections'), h('table', {},
      h('thead', {}, h('tr', {}, ['Profile', 'Domain', 'Nodes', 'Reason'].map((c) => h('th', {}, c)))),
      h('tbody', {}, e.rejections.map((r) => h('tr', {}, h('td', {}, r.Profile), h('td', { class: 'mono' }, r.Domain || '-'), h('td', {}, r.Nodes), h('td', {}, r.Message))))));
  }
  if (d.nomad && d.nomad.length) {
    out.push(h('h5', {}, 'Nomad could not place the job'), h('table', {},
      h('thead', {}, h('tr', {}, ['Group', 'Evaluated', 'Filtered', 'Exhausted', 'Why'].map((c) => h('th', {}, c)))),
      h('tbody', {}, d.nomad.map((n) => h('tr', {}, h('td', {}, n.group), h('td', {}, n.nodes_evaluated), h('td', {}, n.nodes_filtered), h('td', {}, n.nodes_exhausted),
        h('td', {}, [
          ...Object.entries(n.constraint_filtered || {}).map(([k, v]) => `filtered by ${k}: ${v}`),
          ...Object.entries(n.dimension_exhausted || {}).map(([k, v]) => `exhausted ${k}: ${v}`),
        ].join('; ') || '-'))))));
  }
  return h('div', { class: 'explain' }, out);
}

// ---------- Models view ----------

const SVG = 'http://www.w3.org/2000/svg';

// s builds an SVG element; attributes are set as attributes (presentation
// attributes, not style: the page's Content-Security-Policy refuses those).
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const fmtNum = (v, digits) => (v === null || v === undefined ? '-' : Number(v).toFixed(digits));

// chart draws series over the last hour: each {name, cls, key, step} is a
// line of points[key]; a null value breaks the line (a missing reading is
// drawn as a gap, never as zero).
function chart(id, title, points, series, now) {
  const W = 640, H = 120, L = 34, R = 8, T = 8, B = 18;
  const t1 = now, t0 = now - 3600 * 1000;
  let top = 0;
  for (const p of points) for (const se of series) { const v = p[se.key]; if (v !== null && v !== undefined) top = Math.max(top, v); }
  top = top > 0 ? top * 1.1 : 1;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const lines = series.map((se) => {
    const segs = [];
    let cur = [];
    for (const p of points) {
      const v = p[se.key];
      const t = Date.parse(p.at);
      if (v === null || v === undefined || t < t0) { if (cur.length) segs.push(cur); cur = []; continue; }
      if (se.step && cur.length) cur.push([x(t), cur[cur.length - 1][1]]);
      cur.push([x(t), y(v)]);
    }
    if (cur.length) segs.push(cur);
    // The latest reading as a dot, so that a line of one point shows.
    const last = segs.length ? segs[segs.length - 1][segs[segs.length - 1].length - 1] : null;
    return s('g', { class: 'series ' + se.cls, 'data-series': se.key },
      segs.map((seg) => s('polyline', { points: seg.map(([a, b]) => a.toFixed(1) + ',' + b.toFixed(1)).join(' '), fill: 'none' })),
      last ? s('circle', { cx: last[0].toFixed(1), cy: last[1].toFixed(1), r: 2.5 }) : null);
  });
  const grid = [0, 0.5, 1].map((f) => {
    const v = top * f;
    return s('g', { class: 'grid' }, s('line', { x1: L, x2: W - R, y1: y(v), y2: y(v) }),
      s('text', { x: L - 4, y: y(v) + 4, 'text-anchor': 'end' }, v >= 10 ? Math.round(v) : v.toFixed(1)));
  });
  const ticks = [0, 15, 30, 45, 60].map((m) => s('text', { x: x(t0 + m * 60000), y: H - 4, 'text-anchor': 'middle' }, m === 60 ? 'now' : '-' + (60 - m) + 'm'));
  return h('figure', { class: 'chart', id },
    h('figcaption', {}, title, ' ', series.map((se) => h('span', { class: 'key ' + se.cls }, se.name))),
    s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title }, grid, ticks, lines));
}

function signalText(sig, key, digits, unit) {
  const v = sig && sig[key];
  if (!v) return '-';
  if (v.value === null || v.value === undefined) return h('span', { class: 'missing', title: v.error || '' }, 'missing');
  return fmtNum(v.value, digits) + (unit || '');
}

// weightsText says where a model's weights are: the nodes whose store
// holds them whole, and its warm spares.
function weightsText(w) {
  if (!w) return '-';
  let t = w.nodes && w.nodes.length ? 'on ' + w.nodes.join(', ') : 'on no node yet';
  if (w.spares && w.spares.length) t += '; spares ' + w.spares.join(', ');
  return t;
}

function viewModels() {
  const rows = state.models.map((m) => {
    const d = m.decision;
    let decision = m.autoscale ? (d ? d.rule + (d.want !== d.current ? ` ${d.current}→${d.want}` : '') : '-') : 'fixed';
    if (m.pin) decision = `pin ${m.pin.replicas} until ${isoTime(m.pin.until)}`;
    const sig = m.signals;
    return h('tr', { dataset: { model: m.name } },
      h('td', { class: 'mono' }, m.name),
      h('td', { class: 'counts' }, `${m.serving} serving / ${m.wanted} wanted`, m.has !== m.wanted ? h('span', { class: 'muted' }, ` (${m.has} with a job)`) : null),
      h('td', {}, m.autoscale ? `${m.min}–${m.max}` : '-'),
      h('td', {}, m.autoscale ? signalText(sig, 'outstanding', 0) : '-'),
      h('td', {}, m.autoscale ? signalText(sig, 'queued', 0) : '-'),
      h('td', {}, m.autoscale ? signalText(sig, 'arrivals', 2, '/s') : '-'),
      h('td', {}, m.autoscale ? signalText(sig, 'waiting', 0) : '-'),
      h('td', {}, m.autoscale ? signalText(sig, 'kv_cache_use', 2) : '-'),
      h('td', { class: 'decision', title: m.reason || '' }, decision),
      h('td', { class: 'weights', title: m.weights ? m.weights.source + ' (' + m.weights.key + ')' : '' }, weightsText(m.weights)));
  });
  const cards = state.models.filter((m) => m.autoscale).map((m) => {
    const hist = state.history[m.name];
    // The controller's clock ends the hour, not the browser's.
    const now = hist && hist.at ? Date.parse(hist.at) : Date.now();
    let body;
    if (!hist) body = h('p', { class: 'muted' }, 'Loading…');
    else if (hist.error) body = h('p', {}, hist.error.message);
    else if (!hist.points.length) body = h('p', { class: 'muted' }, 'No signal round yet.');
    else {
      body = [
        chart('demand-' + m.name, 'Demand', hist.points, [
          { name: 'outstanding', cls: 'out', key: 'outstanding' }, { name: 'queued', cls: 'queued', key: 'queued' },
          { name: 'waiting in engines', cls: 'waiting', key: 'waiting' }], now),
        chart('replicas-' + m.name, 'Replicas', hist.points, [
          { name: 'wanted', cls: 'wanted', key: 'wanted', step: true }, { name: 'with a job', cls: 'has', key: 'has', step: true },
          { name: 'serving', cls: 'serving', key: 'serving', step: true }], now),
      ];
    }
    return h('section', { class: 'model-card', dataset: { model: m.name } },
      h('header', {}, h('h3', {}, m.name), h('span', { class: 'muted' }, `${m.target} · priority ${m.priority}`)),
      h('p', { class: 'explain-line' }, m.explain || ''),
      h('p', { class: 'reason-line muted' }, m.reason || ''),
      body);
  });
  return [
    h('table', { id: 'models' },
      h('thead', {}, h('tr', {}, ['Model', 'Replicas', 'Min–max', 'Outstanding', 'Queued', 'Arrivals', 'Waiting', 'KV cache', 'Decision', 'Weights'].map((c) => h('th', {}, c)))),
      h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 10, class: 'empty' }, 'No models.')))),
    cards.length ? h('div', { class: 'model-cards' },
      h('p', { class: 'muted' }, 'The last hour of each autoscaled model, one point per signal round, kept in the controller\'s memory (a restarted controller starts empty). A gap is a missing reading: the count holds on it.'),
      cards) : null,
  ];
}

// ---------- shell ----------

function currentView() {
  const v = location.hash.replace('#', '');
  return ['facility', 'nodes', 'replicas', 'models'].includes(v) ? v : 'facility';
}

function renderStatus() {
  const s = document.getElementById('status');
  const parts = [];
  if (state.fetchError) parts.push(h('span', { class: 'bad' }, state.fetchError.message));
  else if (state.health) {
    parts.push(state.health.leader ? 'leader' : 'standby', ' · ', state.health.synced ? 'synced with Nomad' : h('span', { class: 'bad' }, 'not synced yet'));
    if (state.health.config_error) parts.push(' · ', h('span', { class: 'bad', title: state.health.config_error }, 'last reload refused'));
  }
  if (state.loaded) parts.push(' · ', `${state.nodes.length} nodes, ${state.replicas.length} replicas`, ' · updated ', new Date().toLocaleTimeString());
  s.replaceChildren(...parts);
  document.getElementById('token-state').textContent = token() ? 'set' : 'none';
}

let renderTimer = null;
function renderSoon() { clearTimeout(renderTimer); renderTimer = setTimeout(render, 150); }

function render() {
  renderStatus();
  const view = currentView();
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === view);
  // Keep what is being typed: no re-render while a text field has focus.
  const active = document.activeElement;
  const main = document.getElementById('view');
  if (!state.focus && active && main.contains(active) && active.tagName === 'INPUT' && active.type === 'text' && active.id !== 'node-filter') return;
  if (!state.loaded) {
    if (state.fetchError) main.replaceChildren(h('p', { class: 'empty' }, state.fetchError.message, state.fetchError.hint ? h('br') : null, state.fetchError.hint || ''));
    return;
  }
  const focusID = state.focus || (active && active.id);
  state.focus = null;
  const content = view === 'nodes' ? viewNodes() : view === 'replicas' ? viewReplicas() : view === 'models' ? viewModels() : viewFacility();
  main.replaceChildren(...[content].flat(Infinity).filter(Boolean));
  main.dataset.view = view;
  main.dataset.loaded = 'true';
  if (focusID) { const el = document.getElementById(focusID); if (el) el.focus(); }
}

function init() {
  const input = document.getElementById('token');
  input.value = token();
  document.getElementById('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const v = input.value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY);
    renderStatus();
    banner('ok', v ? 'API token saved for this tab' : 'API token cleared');
    refresh(); // reads need the token too when the controller has an api_token
  });
  window.addEventListener('hashchange', () => { clearBanner(); state.holdForm = null; render(); if (currentView() === 'models') refresh(); });
  refresh();
  setInterval(refresh, POLL_MS);
}

document.addEventListener('DOMContentLoaded', init);
