// npumagic's live timeline: draws the kernel's answer for the visible window on a canvas and asks
// for a new one on every zoom (wheel) or pan (drag). It never holds the trace: only the latest
// answer, a few thousand columns or events. Double-click shows the whole run again; W/S zoom,
// A/D pan (as in Perfetto); shift-drag selects a range the kernel sums up; search is answered
// by the kernel, which moves the view to each match.
// Colours: one per kind of work at overview zoom (the legend's); once events come as themselves,
// one per operator name, except DataLoader waits, syncs, annotations, collectives and copies.

const GUTTER = 190, AXIS = 22, ROW = 18, DEPTH_ROW = 16, BOX = 14, SERIES = 34, RANK_HEAD = 16, CORE_ROW = 9;
const isCore = s => /^core \d+ CPU$/.test(s.label);  // the host's cores: a heat strip each, not a line
const GROUP_COLOR = {host: "#4c72b0", device: "#dd8452", comm: "#8172b3", regions: "#17becf", modules: "#bcbd22",
                     critical: "#d62728"};
// lanes drawn a row per nesting depth: the host's operators, the regions' and the modules' trees, the critical path
const DEEP = new Set(["host", "regions", "modules", "critical"]);
// a rank's regions, modules and critical path: groups that fold into one row
const NESTED = new Set(["regions", "modules", "critical"]);
const GROUP_LABEL = {regions: "regions", modules: "nn.Modules", critical: "critical path"};

// drawn in their kind's colour at any zoom: what a glance at the lanes must find
const OWN_KIND = new Set(["dataloader", "sync", "annotation", "comm", "memcpy", "critical"]);

function colorOf(name) {
  // hues 70..340: never the DataLoader wait's orange or the idle gaps' yellow
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${70 + h % 270},55%,${42 + (h >> 9) % 14}%)`;
}

function toolsOf() {
  // the search box, its regex switch, previous/next and the count of matches
  const box = document.createElement("div");
  box.className = "npumagic-tools";
  box.style.cssText = "display:flex;gap:6px;align-items:center;margin:0 0 4px 0";
  const input = document.createElement("input");
  input.className = "npumagic-search"; input.type = "text"; input.placeholder = "search a name (Enter)";
  input.style.cssText = "width:220px;font:11px sans-serif";
  const regex = document.createElement("input");
  regex.type = "checkbox"; regex.className = "npumagic-regex";
  const label = document.createElement("label");
  label.append(regex, document.createTextNode(" regex"));
  const button = (cls, text, title) => {
    const b = document.createElement("button");
    b.className = cls; b.textContent = text; b.title = title; b.style.cssText = "font:11px sans-serif;padding:0 6px";
    return b;
  };
  const prev = button("npumagic-prev", "◀", "previous match"), next = button("npumagic-next", "▶", "next match");
  const count = document.createElement("span");
  count.className = "npumagic-found"; count.style.color = "#555";
  const perfetto = button("npumagic-export", "⤓ Perfetto", "write this run as a file Perfetto and chrome://tracing open");
  perfetto.style.marginLeft = "auto";
  box.append(input, label, prev, next, count, perfetto);
  return {box, input, regex, prev, next, count, perfetto};
}

function legendOf(frame) {
  const box = document.createElement("div");
  box.className = "npumagic-legend";
  box.style.cssText = "display:flex;flex-wrap:wrap;gap:2px 12px;margin:0 0 4px 0;color:#333";
  for (const item of frame.legend || []) {
    const entry = document.createElement("span");
    entry.className = "npumagic-legend-item";
    entry.dataset.kind = item.kind;
    const swatch = document.createElement("span");
    swatch.style.cssText = `display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle;background:${item.color}`
      + (item.kind === "idle" ? ";outline:1px dashed #000;outline-offset:-1px" : "");
    entry.append(swatch, document.createTextNode(item.label));
    box.appendChild(entry);
  }
  return box;
}

function notesOf(notes) {
  // what the kernel's own work after the first view left out, and why (the widget's notes)
  const box = document.createElement("div");
  box.className = "npumagic-notes";
  box.style.cssText = "margin:0 0 4px 0;color:#8a4b00;white-space:pre-wrap" + (notes.length ? "" : ";display:none");
  box.textContent = notes.join("\n");
  return box;
}

function rowsOf(frame, collapsed = new Set(), folded = new Set()) {
  // one group per rank: a header, its lanes (host lanes as tall as their nesting), then its series;
  // a collapsed rank (a click on its header) keeps its header only. A rank's regions and modules
  // lanes come under a header of their own; folded (a click on it), the header is one summary row
  // holding their outermost spans
  const rows = [];
  let y = AXIS;
  const ranks = [...new Set(frame.lanes.map(l => l.rank).concat(frame.series.map(s => s.rank)))].sort((a, b) => a - b);
  for (const rank of ranks) {
    if (ranks.length > 1) { rows.push({kind: "rank", rank, y, h: RANK_HEAD}); y += RANK_HEAD; }
    if (collapsed.has(rank)) continue;
    let group = null;
    frame.lanes.forEach((lane, k) => {
      if (lane.rank !== rank) return;
      if (NESTED.has(lane.group) && lane.group !== group) {
        const key = `${rank}:${lane.group}`, fold = folded.has(key);
        rows.push({kind: "group", rank, group: lane.group, key, y, h: fold ? DEPTH_ROW + 2 : RANK_HEAD});
        y += fold ? DEPTH_ROW + 4 : RANK_HEAD;
      }
      group = lane.group;
      if (NESTED.has(lane.group) && folded.has(`${rank}:${lane.group}`)) {  // drawn in its header's row
        const head = rows[rows.length - 1];
        rows.push({kind: "lane", k, lane, y: head.y, h: head.h, summary: true});
        return;
      }
      // one row per nesting depth (the kernel's layout caps it), so nested boxes never overlap
      const h = DEEP.has(lane.group) ? DEPTH_ROW * (lane.depth + 1) + 2 : ROW;
      rows.push({kind: "lane", k, lane, y, h}); y += h + 2;
    });
    // under the lanes, beside the device's: the findings' marks (idle gaps with their cause,
    // blocking syncs, waits, the memory peak)
    if ((frame.marks || []).some(m => m.rank === rank)) { rows.push({kind: "marks", rank, y, h: ROW}); y += ROW + 2; }
    frame.series.forEach((s, k) => {
      if (s.rank !== rank) return;
      const h = isCore(s) ? CORE_ROW : SERIES;
      rows.push({kind: "series", k, s, y, h}); y += h + (isCore(s) ? 1 : 2);
    });
  }
  return {rows, height: y + AXIS};
}

// a mark's colour: its kind's, as the lanes draw that kind (a gap as the idle gaps, a wait as collectives)
const MARK_KIND = {"idle gap": "idle", "blocking sync": "sync", "slow rank wait": "comm"};

function niceStep(span, target) {
  const raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map(m => m * p).find(s => s >= raw) || raw;
}

const number = (v, digits) => v.toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});

function fmt(ms) {
  // as the tables write times: ms with two decimals from 1 ms, else µs with one
  return Math.abs(ms) >= 1 || ms === 0 ? `${number(ms, 2)} ms` : `${number(ms * 1000, Math.abs(ms) >= 1e-4 ? 1 : 3)} µs`;
}

function fmtValue(v, unit) {
  // a counter or memory sample with its unit: shares as whole %, others with two decimals
  if (unit === "%") return `${number(v, 0)}%`;
  return `${number(v, Math.abs(v) >= 100 ? 0 : 2)}${unit ? " " + unit : ""}`;
}

function clipped(g, text, room) {
  // the longest head of text that fits room px with an ellipsis ("" when not even one letter does)
  if (g.measureText(text).width <= room) return text;
  let n = Math.min(text.length - 1, Math.floor(room / Math.max(g.measureText("e").width, 1)));
  while (n > 0 && g.measureText(text.slice(0, n) + "…").width > room) n--;
  return n > 0 ? text.slice(0, n) + "…" : "";
}

export default {
  render({model, el}) {
    const root = document.createElement("div");
    root.className = "npumagic-live";
    root.style.cssText = "position:relative;font:11px sans-serif;user-select:none;max-width:100%";
    const bar = document.createElement("div");
    bar.style.cssText = "color:#555;margin:2px 0 4px 0;white-space:nowrap;overflow:hidden;text-overflow:ellipsis";
    const canvas = document.createElement("canvas");
    canvas.style.cssText = "display:block;width:100%;cursor:grab";
    const tip = document.createElement("div");
    tip.className = "npumagic-tip";
    tip.style.cssText = "position:absolute;display:none;pointer-events:none;background:#fffff4;border:1px solid #999;"
      + "padding:3px 6px;max-width:520px;white-space:pre-wrap;box-shadow:1px 1px 3px #aaa;z-index:10";
    const panel = document.createElement("div");
    panel.className = "npumagic-selection";
    panel.style.cssText = "display:none;white-space:pre-wrap;margin:4px 0;padding:3px 6px;border-left:3px solid #4c72b0;color:#222";
    const tools = toolsOf();
    const collapsed = new Set(), folded = new Set();  // ranks collapsed; "rank:group" regions/modules folded
    let frame = model.get("frame"), layout = rowsOf(frame, collapsed, folded), legend = legendOf(frame);
    let notes = notesOf(model.get("notes") || []);
    root.append(bar, tools.box, legend, notes, canvas, tip, panel);
    root.tabIndex = 0;  // W/S/A/D reach the view once it is clicked
    root.setAttribute("data-lm-suppress-shortcuts", "true");  // not JupyterLab's command-mode keys (A, D, D...)
    el.appendChild(root);
    let kindColor = Object.fromEntries((frame.legend || []).map(l => [l.kind, l.color]));

    let win = {t0: model.get("view").t0, t1: model.get("view").t1};
    let seq = model.get("view").seq || 0, tiles = model.get("tiles"), drawn = 0, refused = "";
    let shown = null;  // the mark of the finding show() opened (outlined in the findings lane)
    let hoverId = null, flow = null, linkSeq = 0, match = null, picked = null, asked = {query: "", regex: false}, findSeq = 0, selectSeq = 0;

    const plotWidth = () => Math.max(Math.floor(canvas.clientWidth || el.clientWidth || 1000) - GUTTER, 50);
    const xOf = t => GUTTER + (t - win.t0) / (win.t1 - win.t0) * plotWidth();
    const tOf = x => win.t0 + (x - GUTTER) / plotWidth() * (win.t1 - win.t0);

    function ask() {
      seq += 1; root.dataset.asked = seq;
      model.set("view", {t0: win.t0, t1: win.t1, width: plotWidth(), seq});
      model.save_changes();
    }

    function draw() {
      const dpr = window.devicePixelRatio || 1, w = Math.floor(canvas.clientWidth || el.clientWidth || 1000);
      canvas.width = w * dpr; canvas.height = layout.height * dpr; canvas.style.height = layout.height + "px";
      const g = canvas.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, w, layout.height);
      drawn = 0;
      // step bands, each rank's within its own group of lanes, labelled at the group's top
      const extent = new Map();
      for (const row of layout.rows) {
        const rank = row.kind === "lane" ? row.lane.rank : row.kind === "series" ? row.s.rank : row.rank;
        const [a, b] = extent.get(rank) || [row.y, row.y + row.h];
        extent.set(rank, [Math.min(a, row.y), Math.max(b, row.y + row.h)]);
      }
      const multi = extent.size > 1;
      frame.steps.forEach((s, i) => {
        const a = Math.max(xOf(s.start), GUTTER), b = Math.min(xOf(s.end), w), [y0, y1] = extent.get(s.rank) || [AXIS, layout.height - AXIS];
        if (b <= a) return;
        g.fillStyle = i % 2 ? "#eeeeee" : "#e2e2e2"; g.fillRect(a, y0, b - a, y1 - y0);
        g.fillStyle = "#444";
        if (b - a > 40) g.fillText(`step ${s.step}`, a + 3, multi ? y0 + 12 : AXIS - 6);
      });
      // time axis
      const step = niceStep(win.t1 - win.t0, 8);
      g.fillStyle = "#333"; g.strokeStyle = "#ccc";
      for (let t = Math.ceil(win.t0 / step) * step; t <= win.t1; t += step) {
        const x = xOf(t);
        g.beginPath(); g.moveTo(x, layout.height - AXIS); g.lineTo(x, layout.height - AXIS + 4); g.stroke();
        g.fillText(+t.toFixed(6) + "", x - 10, layout.height - 6);
      }
      g.fillText("ms from the first step", 4, layout.height - 6);
      const byLane = new Map((tiles.lanes || []).map(p => [p.lane, p]));
      const names = tiles.names || [], kinds = tiles.kinds || [];
      const fill = (code, perName) => {
        const kind = kinds[code];
        return perName && !OWN_KIND.has(kind) ? colorOf(names[code]) : kindColor[kind] || "#999";
      };
      // tiles answer a window that may lag the view: map their times to the current one
      const tx = t => xOf(t);
      for (const row of layout.rows) {
        g.fillStyle = "#222";
        if (row.kind === "rank") { g.font = "bold 11px sans-serif"; g.fillStyle = "#222"; g.fillText(`${collapsed.has(row.rank) ? "▸" : "▾"} rank ${row.rank}`, 4, row.y + 12); g.font = "11px sans-serif"; continue; }
        if (row.kind === "series") { drawSeries(g, row, w); continue; }
        if (row.kind === "marks") { drawMarks(g, row, w); continue; }
        if (row.kind === "group") {
          const lanes = frame.lanes.filter(l => l.rank === row.rank && l.group === row.group).length;
          g.font = "bold 11px sans-serif";
          g.fillText(`${folded.has(row.key) ? "▸" : "▾"} ${GROUP_LABEL[row.group]}${folded.has(row.key) && lanes > 1 ? ` (${lanes} lanes)` : ""}`, 12, row.y + 12);
          g.font = "11px sans-serif"; continue;
        }
        const label = row.lane.name.length > 30 ? row.lane.name.slice(0, 14) + "…" + row.lane.name.slice(-15) : row.lane.name;
        if (!row.summary) g.fillText(label, NESTED.has(row.lane.group) ? 20 : 4, row.y + 13);
        g.fillStyle = GROUP_COLOR[row.lane.group]; g.fillRect(GUTTER - 6, row.y + 2, 3, row.h - 4);
        const part = byLane.get(row.k);
        if (!part) continue;
        g.save(); g.beginPath(); g.rect(GUTTER, row.y, w - GUTTER, row.h); g.clip();
        if (part.mode === "events") {
          const deep = DEEP.has(row.lane.group);
          for (let i = 0; i < part.start.length; i++) {
            const a = tx(part.start[i]), b = Math.max(tx(part.end[i]), a + 1), d = deep ? part.depth[i] : 0;
            // deeper than the lane's rows (or than a folded group's one): in the tooltip of its parent's row only
            if (d > (row.summary ? 0 : row.lane.depth)) continue;
            const y = row.y + d * DEPTH_ROW + 1, left = Math.max(a, GUTTER), right = Math.min(b, w);
            const own = part.own && part.own[i];  // torch's own annotation (a step, the optimizer's): dimmed
            if (own) g.globalAlpha = 0.35;
            g.fillStyle = fill(part.name[i], true);
            g.fillRect(a, y, b - a, deep ? BOX : row.h - 2);
            const label = right - left > 14 ? clipped(g, names[part.name[i]], right - left - 4) : "";
            if (label) { g.fillStyle = own ? "#000" : "#fff"; g.fillText(label, left + 2, y + 11); }
            g.globalAlpha = 1;
            drawn += 1;
          }
        } else {
          const cw = (tx(tiles.t1) - tx(tiles.t0)) / part.busy.length;
          for (let c = 0; c < part.busy.length; c++) {
            if (part.busy[c] <= 0) continue;
            let e = c;
            while (e + 1 < part.busy.length && part.dominant[e + 1] === part.dominant[c] && Math.abs(part.busy[e + 1] - part.busy[c]) < 0.05) e++;
            // a host lane's columns fill its top row (the outermost operators' row), as tall as busy
            const full = DEEP.has(row.lane.group) ? BOX : row.h - 2, h = Math.max(full * part.busy[c], 1);
            g.fillStyle = part.dominant[c] >= 0 ? fill(part.dominant[c], false) : "#999";
            g.fillRect(tx(tiles.t0) + c * cw, row.y + 1 + full - h, (e - c + 1) * cw, h);
            drawn += 1; c = e;
          }
        }
        for (const [a0, b0] of part.gaps || []) {
          const a = tx(a0), b = tx(b0);
          g.globalAlpha = 0.6; g.fillStyle = kindColor.idle || "#ffd92f"; g.fillRect(a, row.y + 1, b - a, row.h - 2); g.globalAlpha = 1;
          g.strokeStyle = "#000"; g.setLineDash([3, 2]); g.strokeRect(a, row.y + 1, b - a, row.h - 2); g.setLineDash([]);
          const text = `idle ${fmt(b0 - a0)}`;
          if (b - a > g.measureText(text).width + 8) { g.fillStyle = "#000"; g.fillText(text, (a + b) / 2 - g.measureText(text).width / 2, row.y + 13); }
          drawn += 1;
        }
        g.restore();
      }
      if (match) {  // the search's match shown: outlined across its lane
        const row = layout.rows.find(r => r.kind === "lane" && r.k === match.lane);
        if (row) { g.strokeStyle = "#e00"; g.lineWidth = 2; g.strokeRect(xOf(match.start) - 2, row.y, Math.max(xOf(match.end) - xOf(match.start), 1) + 4, row.h); g.lineWidth = 1; }
      }
      for (const arrow of (flow && flow.arrows) || []) {  // launch -> device work, from the correlation ids
        const to = layout.rows.find(r => r.kind === "lane" && r.k === arrow.to.lane);
        const from = layout.rows.find(r => r.kind === "lane" && r.k === arrow.from.lane);
        if (!to) continue;
        const x1 = xOf(arrow.from.t), y1 = from ? from.y + DEPTH_ROW / 2 : to.y - 6, x2 = xOf(arrow.to.t), y2 = to.y + to.h / 2;
        g.strokeStyle = "#111"; g.fillStyle = "#111"; g.lineWidth = 1.5;
        g.beginPath(); g.moveTo(x1, y1); g.lineTo(x2, y2); g.stroke();
        const angle = Math.atan2(y2 - y1, x2 - x1);
        g.beginPath(); g.moveTo(x2, y2);
        g.lineTo(x2 - 7 * Math.cos(angle - 0.4), y2 - 7 * Math.sin(angle - 0.4));
        g.lineTo(x2 - 7 * Math.cos(angle + 0.4), y2 - 7 * Math.sin(angle + 0.4)); g.fill();
        g.lineWidth = 1;
      }
      if (picked) {  // the selected range
        const a = Math.max(xOf(picked.t0), GUTTER), b = Math.min(xOf(picked.t1), w);
        if (b > a) { g.fillStyle = "rgba(76,114,176,0.18)"; g.fillRect(a, AXIS, b - a, layout.height - 2 * AXIS); }
      }
      root.dataset.t0 = win.t0; root.dataset.t1 = win.t1; root.dataset.items = drawn; root.dataset.extent = frame.extent.join(",");
      root.dataset.heads = layout.rows.filter(r => r.kind === "rank").map(r => r.y).join(",");
      root.dataset.marks = layout.rows.filter(r => r.kind === "marks").map(r => `${r.rank}:${r.y}`).join(",");  // each findings lane
      // each regions or modules header: rank:group:y:lanes drawn under it (0 folded)
      root.dataset.groups = layout.rows.filter(r => r.kind === "group").map(r => `${r.key}:${r.y}:`
        + layout.rows.filter(l => l.kind === "lane" && !l.summary && l.lane.rank === r.rank && l.lane.group === r.group).length).join(",");
      root.dataset.lanes = frame.lanes.length; root.dataset.answered = tiles.seq ?? -1;
      bar.textContent = `${frame.title ? frame.title + " — " : ""}${fmt(win.t0)} … ${fmt(win.t1)} (${fmt(win.t1 - win.t0)} shown)`
        + ` · ${drawn} items · answer ${tiles.query_ms ?? "?"} ms in the kernel · wheel or W/S: zoom, drag or A/D: pan,`
        + " shift-drag: select, double-click: all"
        + (refused ? ` · ${refused}` : "");
    }

    function drawMarks(g, row, w) {
      g.fillStyle = "#222"; g.fillText("findings", 4, row.y + 13);
      g.save(); g.beginPath(); g.rect(GUTTER, row.y, w - GUTTER, row.h); g.clip();
      for (const m of frame.marks) {
        if (m.rank !== row.rank || m.end < win.t0 || m.start > win.t1) continue;
        const a = xOf(m.start), b = Math.max(xOf(m.end), a + 2);
        g.fillStyle = kindColor[MARK_KIND[m.kind]] || (m.kind === "memory peak" ? "#2a7" : "#999");
        if (m.kind === "memory peak") {  // an instant: a line and a triangle on it
          g.fillRect(a - 1, row.y + 1, 2, row.h - 2);
          g.beginPath(); g.moveTo(a - 5, row.y + 1); g.lineTo(a + 5, row.y + 1); g.lineTo(a, row.y + 7); g.fill();
        } else {
          g.fillRect(a, row.y + 2, b - a, row.h - 4);
        }
        drawn += 1;
      }
      if (shown && shown.rank === row.rank) {  // the finding show() opened
        g.strokeStyle = "#e00"; g.lineWidth = 2;
        g.strokeRect(xOf(shown.start) - 3, row.y, Math.max(xOf(shown.end) - xOf(shown.start), 1) + 6, row.h); g.lineWidth = 1;
      }
      g.restore();
    }

    function drawSeries(g, row, w) {
      const values = (tiles.series || [])[row.k];
      if (isCore(row.s)) {  // busy share as the red's strength, per column
        g.font = "8px sans-serif"; g.fillStyle = "#222"; g.fillText(row.s.label, 4, row.y + 8); g.font = "11px sans-serif";
        if (!values) return;
        const cw = (xOf(tiles.t1) - xOf(tiles.t0)) / values.length;
        values.forEach((v, c) => {
          if (v === null || v <= 0) return;
          g.fillStyle = `rgba(214,39,40,${Math.min(v, 100) / 100})`;
          g.fillRect(xOf(tiles.t0) + c * cw, row.y, cw + 0.5, row.h);
        });
        drawn += 1; return;
      }
      g.fillStyle = "#222"; g.fillText(`${row.s.label} (${row.s.unit || "-"})`.slice(0, 30), 4, row.y + 13);
      if (!values) return;
      const finite = values.filter(v => v !== null);
      if (!finite.length) return;
      const lo = Math.min(0, ...finite), hi = Math.max(...finite) || 1;
      const cw = (xOf(tiles.t1) - xOf(tiles.t0)) / values.length;
      g.strokeStyle = "#2a7"; g.beginPath();
      let on = false;
      values.forEach((v, c) => {
        if (v === null) { on = false; return; }
        const x = xOf(tiles.t0) + (c + 0.5) * cw, y = row.y + row.h - 2 - (v - lo) / (hi - lo) * (row.h - 4);
        on ? g.lineTo(x, y) : g.moveTo(x, y); on = true;
      });
      g.stroke(); drawn += 1;
      g.fillStyle = "#777"; g.fillText(hi.toPrecision(3), GUTTER - 40, row.y + 10);
      const moves = (tiles.memory || [])[row.k];  // zoomed in: each allocation (up, orange) and free (down, blue)
      if (!moves) return;
      moves.t.forEach((t, i) => {
        const c = moves.change[i], v = moves.total[i];
        if (c === null || c === 0 || v === null) return;
        const x = xOf(t), y = row.y + row.h - 2 - (v - lo) / (hi - lo) * (row.h - 4), d = c > 0 ? -4 : 4;
        g.fillStyle = c > 0 ? "#e6550d" : "#3182bd"; g.beginPath();
        g.moveTo(x - 3, y - d / 2); g.lineTo(x + 3, y - d / 2); g.lineTo(x, y + d / 2); g.closePath(); g.fill();
      });
    }

    function memoryMove(row, x) {
      // the allocation or free drawn nearest x (within 4 px), as a tooltip's text
      const moves = (tiles.memory || [])[row.k];
      if (!moves) return null;
      let best = -1;
      moves.t.forEach((t, i) => {
        if (moves.change[i] && Math.abs(xOf(t) - x) <= 4 && (best < 0 || Math.abs(xOf(t) - x) < Math.abs(xOf(moves.t[best]) - x))) best = i;
      });
      if (best < 0) return null;
      const c = moves.change[best], size = Math.abs(c) < 1 ? fmtValue(Math.abs(c) * 1024, "KiB") : fmtValue(Math.abs(c), "MiB");
      return {text: `${row.s.label} ${fmtValue(moves.total[best], row.s.unit)} after ${c > 0 ? "an allocation" : "a free"} of ${size}`};
    }

    function hit(x, y) {
      if (x < GUTTER) return null;
      const t = tOf(x), names = tiles.names || [];
      const inRow = r => y >= r.y && y < r.y + r.h;
      // a folded group's row holds its lanes' outermost spans: the one under the cursor, of the last lane drawn there
      const summary = layout.rows.filter(r => r.summary && inRow(r)).reverse().map(r => laneHit(r, x, y, t, names)).find(f => f);
      if (summary) return summary;
      const row = layout.rows.find(r => !r.summary && inRow(r));
      if (!row) return null;
      if (row.kind === "series") {
        const move = memoryMove(row, x);
        if (move) return move;
        const values = (tiles.series || [])[row.k] || [];
        const c = Math.floor((t - tiles.t0) / (tiles.t1 - tiles.t0) * values.length);
        return values[c] == null ? null : {text: `${row.s.label}: ${fmtValue(values[c], row.s.unit)}`};
      }
      if (row.kind === "marks") {  // the largest mark under the cursor (2 px either side)
        const slack = 2 * (win.t1 - win.t0) / plotWidth();
        const under = frame.marks.filter(m => m.rank === row.rank && m.start - slack <= t && t <= m.end + slack);
        return under.length ? {text: under.sort((a, b) => (b.end - b.start) - (a.end - a.start))[0].label} : null;
      }
      return row.kind === "lane" ? laneHit(row, x, y, t, names) : null;
    }

    function laneHit(row, x, y, t, names) {
      const part = (tiles.lanes || []).find(p => p.lane === row.k);
      if (!part) return null;
      for (const [a, b] of part.gaps || []) if (t >= a && t <= b) return {text: `${row.lane.name}\nidle ${fmt(b - a)}`};
      if (part.mode === "events") {
        let best = -1;
        const deep = DEEP.has(row.lane.group), depth = deep && !row.summary ? Math.floor((y - row.y) / DEPTH_ROW) : 0;
        for (let i = 0; i < part.start.length; i++) {
          const d = deep ? part.depth[i] : 0;
          if (row.summary && d > 0) continue;
          if (part.start[i] <= t && t <= part.end[i] && (best < 0 || Math.abs(d - depth) < Math.abs(part.depth[best] - depth))) best = i;
        }
        if (best < 0) return null;
        return {id: part.id[best], text: `${names[part.name[best]]}\n${fmt(part.end[best] - part.start[best])}`};
      }
      const c = Math.floor((t - tiles.t0) / (tiles.t1 - tiles.t0) * part.busy.length);
      if (!(part.busy[c] > 0)) return null;
      const name = part.dominant[c] >= 0 ? names[part.dominant[c]] : "?";
      const label = (frame.legend || []).find(l => l.kind === (tiles.kinds || [])[part.dominant[c]]);
      return {text: `${name}${label ? ` (${label.label})` : ""}\nmost of this pixel; busy ${(part.busy[c] * 100).toFixed(0)}% of ${fmt((tiles.t1 - tiles.t0) / part.busy.length)}\n(zoom in for the events)`};
    }

    function showTip(found, x, y) {
      if (!found) { tip.style.display = "none"; return; }
      // the event asked about last: its answer again (the kernel is asked once per event hovered)
      const known = found.id !== undefined && found.id === hoverId && model.get("detail").id === hoverId && model.get("detail").lines;
      tip.textContent = known ? model.get("detail").lines.join("\n") : found.text;
      tip.style.display = "block";
      tip.style.left = Math.min(x + 12, (canvas.clientWidth || 800) - 300) + "px";
      tip.style.top = y + 14 + bar.offsetHeight + "px";
      if (found.id !== undefined && found.id !== hoverId) {
        hoverId = found.id;
        model.set("probe", {id: found.id}); model.save_changes();
      }
    }

    let drag = null;
    canvas.addEventListener("wheel", ev => {
      ev.preventDefault();
      const rect = canvas.getBoundingClientRect(), t = tOf(ev.clientX - rect.left);
      const f = Math.pow(1.0015, ev.deltaY);
      const span = Math.max((win.t1 - win.t0) * f, 1e-6);
      const k = (t - win.t0) / (win.t1 - win.t0);
      win = {t0: t - k * span, t1: t - k * span + span};
      draw(); ask();
    }, {passive: false});
    let mouseX = null;
    canvas.addEventListener("mousedown", ev => {
      root.focus({preventScroll: true});
      const x = ev.clientX - canvas.getBoundingClientRect().left;
      if (ev.shiftKey) {  // a range: JupyterLab's shift-click (cell selection) must not take it
        ev.preventDefault(); ev.stopPropagation();
        drag = {select: true, t: tOf(x)}; picked = {t0: tOf(x), t1: tOf(x)}; return;
      }
      drag = {x: ev.clientX, win: {...win}}; canvas.style.cursor = "grabbing";
    });
    window.addEventListener("mouseup", ev => {
      if (drag && drag.select) {  // its end from the release itself: moves may reach another element meanwhile
        const t = tOf(ev.clientX - canvas.getBoundingClientRect().left);
        picked = {t0: Math.max(Math.min(t, drag.t), win.t0), t1: Math.min(Math.max(t, drag.t), win.t1)};
      }
      if (drag && drag.select && picked && xOf(picked.t1) - xOf(picked.t0) > 3) {
        selectSeq += 1; model.set("select", {t0: picked.t0, t1: picked.t1, seq: selectSeq}); model.save_changes();
        panel.style.display = "block"; panel.textContent = "summing up the range in the kernel…";
      } else if (drag && drag.select) { picked = null; draw(); }
      else if (drag && Math.abs(ev.clientX - drag.x) < 3 && ev.target === canvas) {  // a click: the event's flows
        const rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
        const head = x < GUTTER && layout.rows.find(r => (r.kind === "rank" || r.kind === "group") && y >= r.y && y < r.y + r.h);
        if (head && head.kind === "rank") {  // a rank's header: collapse or expand its group
          collapsed.has(head.rank) ? collapsed.delete(head.rank) : collapsed.add(head.rank);
          layout = rowsOf(frame, collapsed, folded); root.dataset.collapsed = [...collapsed].join(","); draw();
        } else if (head) {  // a regions or modules header: fold its lanes into one row, or unfold them
          folded.has(head.key) ? folded.delete(head.key) : folded.add(head.key);
          layout = rowsOf(frame, collapsed, folded); root.dataset.folded = [...folded].join(","); draw();
        }
        const found = head ? null : hit(x, y);
        if (found && found.id !== undefined) { linkSeq += 1; model.set("link", {id: found.id, seq: linkSeq}); model.save_changes(); }
      }
      drag = null; canvas.style.cursor = "grab";
    });
    canvas.addEventListener("mousemove", ev => {
      const rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
      mouseX = x;
      if (drag && drag.select) {
        const t = tOf(x); picked = {t0: Math.min(t, drag.t), t1: Math.max(t, drag.t)}; draw(); return;
      }
      if (drag) {
        const dt = (ev.clientX - drag.x) / plotWidth() * (drag.win.t1 - drag.win.t0);
        win = {t0: drag.win.t0 - dt, t1: drag.win.t1 - dt};
        draw(); ask(); return;
      }
      showTip(hit(x, y), x, y);
    });
    canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; mouseX = null; });

    function zoomBy(f, x) {
      const t = x !== null && x >= GUTTER ? tOf(x) : (win.t0 + win.t1) / 2;
      const span = Math.max((win.t1 - win.t0) * f, 1e-6), k = (t - win.t0) / (win.t1 - win.t0);
      win = {t0: t - k * span, t1: t - k * span + span}; draw(); ask();
    }
    function panBy(share) {
      const dt = (win.t1 - win.t0) * share;
      win = {t0: win.t0 + dt, t1: win.t1 + dt}; draw(); ask();
    }
    root.addEventListener("keydown", ev => {
      if (ev.target !== root || ev.ctrlKey || ev.metaKey || ev.altKey) return;
      const act = {w: () => zoomBy(0.8, mouseX), s: () => zoomBy(1.25, mouseX), a: () => panBy(-0.15), d: () => panBy(0.15),
                   escape: () => { picked = null; flow = null; panel.style.display = "none"; draw(); }}[ev.key.toLowerCase()];
      if (!act) return;
      ev.preventDefault(); ev.stopPropagation(); act();
    });

    function find(move) {
      const query = tools.input.value, regex = tools.regex.checked;
      if (!query) return;
      const same = query === asked.query && regex === asked.regex;
      asked = {query, regex}; findSeq += 1;
      model.set("find", {query, regex, move: same ? move : 0, seq: findSeq}); model.save_changes();
    }
    tools.input.addEventListener("keydown", ev => {
      ev.stopPropagation();  // typing is the box's, not JupyterLab's or the view's
      if (ev.key === "Enter") { ev.preventDefault(); find(ev.shiftKey ? -1 : 1); }
    });
    tools.next.addEventListener("click", () => find(1));
    tools.prev.addEventListener("click", () => find(-1));
    let exportSeq = 0;
    tools.perfetto.addEventListener("click", () => {
      exportSeq += 1; model.set("export", {seq: exportSeq}); model.save_changes();
      panel.style.display = "block"; panel.textContent = "writing the Perfetto file in the kernel…";
    });
    model.on("change:exported", () => {
      const x = model.get("exported");
      panel.style.display = "block"; panel.textContent = x.error || (x.lines || []).join("\n");
      root.dataset.exported = x.error ? "" : x.path || "";
    });
    model.on("change:found", () => {
      const f = model.get("found");
      if (f.error) { tools.count.textContent = f.error; match = null; }
      else {
        tools.count.textContent = f.count ? `${f.at} of ${f.count}: ${f.name}` : "no match";
        tools.count.title = (f.names || []).join("\n");  // the names matched, most matches first
        match = f.count ? {lane: f.lane, start: f.start, end: f.end} : null;
        // the match's window comes with it: a view update from the kernel that crossed one of ours is dropped
        if (f.count && f.t1 > f.t0 && (f.t0 !== win.t0 || f.t1 !== win.t1)) {
          win = {t0: f.t0, t1: f.t1};
          const v = model.get("view");
          if (v.t0 !== win.t0 || v.t1 !== win.t1) ask();
        }
      }
      root.dataset.found = f.count ?? 0; root.dataset.at = f.at ?? 0;
      root.dataset.matchStart = f.start ?? ""; root.dataset.matchEnd = f.end ?? "";
      draw();
    });
    model.on("change:shown", () => {
      const m = model.get("shown");
      shown = m && m.label ? m : null;
      root.dataset.shown = shown ? shown.label : "";
      draw();
    });
    // a click on a finding of %npuadvise moved this view: its findings lane (else its top) into
    // sight, scrolling the one scrolled box around it (scrollIntoView would also shift
    // JupyterLab's own panels, which hide their overflow)
    model.on("change:reveal", () => {
      let box = root.parentElement;
      while (box && !(box.scrollHeight > box.clientHeight && /auto|scroll/.test(getComputedStyle(box).overflowY))) box = box.parentElement;
      if (!box) return;
      const row = shown && layout.rows.find(r => r.kind === "marks" && r.rank === shown.rank);
      const y = (row ? canvas.getBoundingClientRect().top + row.y : root.getBoundingClientRect().top) - box.getBoundingClientRect().top;
      if (y < 40 || y > box.clientHeight - 40) box.scrollTop += y - box.clientHeight / 2;
    });
    model.on("change:flow", () => {
      const f = model.get("flow");
      flow = f.error ? null : f;
      panel.style.display = "block"; panel.textContent = f.error || (f.lines || []).join("\n");
      root.dataset.flows = flow ? flow.arrows.length : 0;
      draw();
    });
    model.on("change:selection", () => {
      const s = model.get("selection");
      panel.style.display = "block";
      panel.textContent = s.error || (s.lines || []).join("\n");
      if (!s.error) { picked = {t0: s.t0, t1: s.t1}; root.dataset.selT0 = s.t0; root.dataset.selT1 = s.t1; }
      root.dataset.selected = s.seq ?? -1;
      draw();
    });
    canvas.addEventListener("dblclick", () => { win = {t0: frame.extent[0], t1: frame.extent[1]}; draw(); ask(); });

    // an error answer (the kernel refused a view) keeps the last drawing and says why in the bar
    model.on("change:tiles", () => { const t = model.get("tiles"); refused = t.error || ""; if (!t.error) tiles = t; draw(); });
    model.on("change:view", () => {
      const v = model.get("view");
      // a view older than the latest one asked is dropped; the kernel's own move at the same seq is taken
      if ((v.seq || 0) < seq || (v.seq === seq && v.t0 === win.t0 && v.t1 === win.t1)) return;
      seq = v.seq || 0; root.dataset.asked = seq; win = {t0: v.t0, t1: v.t1}; draw();
    });
    model.on("change:detail", () => {
      const d = model.get("detail");
      if (d.id !== hoverId || tip.style.display === "none") return;
      if (d.error) { tip.textContent = d.error; return; }
      tip.textContent = (d.lines || [d.name]).join("\n");
    });
    // lanes the kernel added after the first view (the critical path): drawn, and the view asked again for them
    model.on("change:frame", () => {
      frame = model.get("frame"); layout = rowsOf(frame, collapsed, folded);
      const fresh = legendOf(frame); legend.replaceWith(fresh); legend = fresh;
      kindColor = Object.fromEntries((frame.legend || []).map(l => [l.kind, l.color]));
      draw();
      if ((tiles.lanes || []).length < frame.lanes.length) ask();
    });
    model.on("change:notes", () => { const fresh = notesOf(model.get("notes") || []); notes.replaceWith(fresh); notes = fresh; });
    const resize = new ResizeObserver(() => { draw(); if (Math.abs(plotWidth() - (tiles.width || 0)) > 2) ask(); });
    resize.observe(root);
    draw();
    ask();
    return () => resize.disconnect();
  },
};
