// tinycore VIZ page: reads /api/realizes, /api/kernel/<n> and /api/timeline; dagre (vendored) lays out the graphs.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
// node colours by op; a COPY has the STORE colour, since a copy is an anonymous store; a COLLECTIVE (a copy across
// processes) a darker one
const OP_COLOURS = {
  STORE: "#ffb74d", COPY: "#ffb74d", COLLECTIVE: "#ff8a65", LOAD: "#aed581", CONST: "#e0e0e0", VCONST: "#e0e0e0",
  RANGE: "#ce93d8", END: "#ce93d8", REDUCE: "#f48fb1", REDUCE_AXIS: "#f48fb1", SINK: "#90caf9",
  PARAM: "#80deea", BUFFER: "#80deea", BUFFER_VIEW: "#80deea", DEFINE_VAR: "#80deea", BIND: "#80deea",
  CALL: "#64b5f6",
};
const DEFAULT_COLOUR = "#fff59d";
const CALL_OPS = { copy: "COPY", collective: "COLLECTIVE", kernel: "CALL" };
const CHAR_WIDTH = 7, NODE_HEIGHT = 34;

const state = { kernel: null, step: 0, selectedItem: null };

function element(tag, attributes = {}, text = null, namespace = null) {
  const node = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

async function getJSON(path) {
  const response = await fetch(path);
  if (!response.ok) throw new Error(`${path}: ${response.status} ${response.statusText}`);
  return response.json();
}

// ------------------------------------------------------------------------------------------ the list on the left
function renderRealizes(data) {
  const nav = document.getElementById("realizes");
  nav.textContent = "";
  const kernels = new Set();
  for (const realize of data.realizes) {
    const block = element("div", { class: "realize" });
    const times = realize.count > 1 ? ` (realized ${realize.count}x)` : "";
    const title = element("div", { class: "realize-title" }, `schedule ${realize.id}${times}`);
    title.addEventListener("click", () => { select(title); showSchedule(realize); });
    block.appendChild(title);
    const list = element("ul");
    for (const item of realize.items) {
      const entry = element("li", { class: `item ${item.kind}`, "data-kind": item.kind }, item.name);
      entry.appendChild(element("span", { class: "device" }, item.device));
      if (item.kind === "kernel") {
        kernels.add(item.kernel);
        entry.setAttribute("data-kernel", item.kernel);
        entry.addEventListener("click", () => { select(entry); showKernel(item.kernel); });
      } else {
        entry.title = item.bytes !== null ? `${item.bytes} bytes` : "";
        entry.addEventListener("click", () => { select(entry); showSchedule(realize, item.index); });
      }
      list.appendChild(entry);
    }
    block.appendChild(list);
    nav.appendChild(block);
  }
  let summary = `${data.realizes.length} schedules, ${kernels.size} kernels`;
  if (data.dropped_realizes || data.dropped_steps || data.dropped_kernels)
    summary += ` (over the caps, not kept: ${data.dropped_realizes} schedules, ${data.dropped_steps} steps, ` +
      `${data.dropped_kernels} kernel sources)`;
  document.getElementById("summary").textContent = summary;
}

function select(entry) {
  if (state.selectedItem) state.selectedItem.classList.remove("selected-item");
  state.selectedItem = entry;
  entry.classList.add("selected-item");
}

// ------------------------------------------------------------------------------------------ schedules and kernels
function showSchedule(realize, highlight = null) {
  state.kernel = null;
  document.getElementById("step-controls").hidden = true;
  document.getElementById("steps").textContent = "";
  document.getElementById("rules").textContent = "";
  document.getElementById("graph-title").textContent =
    `schedule ${realize.id}: LINEAR of ${realize.items.length} calls (buffers in cyan, copies in the store colour, ` +
    "collectives in orange)";
  const nodes = [], edges = [];
  realize.buffers.forEach((label, i) => nodes.push({ id: `b${i}`, op: "BUFFER", dtype: "", arg: label }));
  for (const item of realize.items) {
    const op = CALL_OPS[item.kind] || "CALL";
    nodes.push({ id: `c${item.index}`, op, dtype: item.device, arg: item.name, isNew: item.index === highlight,
      kernel: item.kernel });
    for (const read of item.reads) edges.push([`b${read}`, `c${item.index}`]);
    edges.push([`c${item.index}`, `b${item.writes}`]);
  }
  drawGraph({ nodes, edges, truncated: 0 }, null);
  document.getElementById("source-title").textContent = "schedule";
  document.getElementById("source").textContent = realize.items.map(item =>
    `${item.index}: ${CALL_OPS[item.kind] || "CALL"} ${item.name} on ${item.device}` +
    (item.bytes ? ` (${item.bytes} bytes)` : "")).join("\n");
}

async function showKernel(number) {
  const kernel = await getJSON(`/api/kernel/${number}`);
  state.kernel = kernel;
  document.getElementById("graph-title").textContent =
    `kernel ${kernel.name}${kernel.device ? " on " + kernel.device : ""}: ${kernel.steps.length} graphs`;
  document.getElementById("source-title").textContent = "rendered source";
  document.getElementById("source").textContent = kernel.source ?? "(not compiled in this run)";
  const steps = document.getElementById("steps");
  steps.textContent = "";
  kernel.steps.forEach((step, i) => {
    const entry = element("li", { "data-step": i }, step.name);
    entry.addEventListener("click", () => showStep(i));
    steps.appendChild(entry);
  });
  const slider = document.getElementById("step-slider");
  slider.max = kernel.steps.length - 1;
  document.getElementById("step-controls").hidden = false;
  showStep(0);
}

function showStep(index) {
  const kernel = state.kernel;
  if (!kernel) return;
  index = Math.max(0, Math.min(kernel.steps.length - 1, index));
  state.step = index;
  const step = kernel.steps[index];
  document.getElementById("step-slider").value = index;
  document.getElementById("step-name").textContent = `step ${index}: ${step.name}`;
  for (const entry of document.querySelectorAll("#steps li"))
    entry.classList.toggle("selected", Number(entry.dataset.step) === index);
  const rules = document.getElementById("rules");
  rules.textContent = step.rules.length ? "rules that fired: " : (index ? "no pattern rules (a pass)" : "");
  rules.textContent += step.rules.map(([name, count]) => `${name} (x${count})`).join("; ");
  const previous = index > 0 ? new Set(kernel.steps[index - 1].graph.nodes.map(n => n.id)) : null;
  drawGraph(step.graph, previous);
}

// ------------------------------------------------------------------------------------------ drawing a graph
function nodeLines(node) {
  const lines = [node.op + (node.dtype ? " " + node.dtype : "")];
  if (node.arg) lines.push(node.arg);
  return lines;
}

function drawGraph(graph, previousIds) {
  const layout = new dagre.graphlib.Graph();
  layout.setGraph({ rankdir: "TB", nodesep: 16, ranksep: 28, marginx: 10, marginy: 10 });
  layout.setDefaultEdgeLabel(() => ({}));
  for (const node of graph.nodes) {
    const lines = nodeLines(node);
    const width = Math.max(...lines.map(line => line.length)) * CHAR_WIDTH + 14;
    layout.setNode(String(node.id), { width, height: lines.length > 1 ? NODE_HEIGHT : 20, node, lines });
  }
  for (const [source, user] of graph.edges) layout.setEdge(String(source), String(user));
  dagre.layout(layout);
  const svg = document.getElementById("graph");
  svg.textContent = "";
  const scene = element("g", { class: "scene" }, null, SVG_NS);
  for (const edge of layout.edges()) {
    const points = layout.edge(edge).points;
    const path = points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ");
    scene.appendChild(element("path", { class: "edge", d: path, "marker-end": "url(#arrow)" }, null, SVG_NS));
  }
  for (const id of layout.nodes()) {
    const { x, y, width, height, node, lines } = layout.node(id);
    const isNew = node.isNew || (previousIds !== null && !previousIds.has(node.id));
    const group = element("g", { class: isNew ? "node new" : "node", "data-op": node.op,
      transform: `translate(${x - width / 2},${y - height / 2})` }, null, SVG_NS);
    group.appendChild(element("title", {}, lines.join("\n"), SVG_NS));
    if (node.kernel !== undefined) {  // a kernel's CALL in a schedule opens the kernel
      group.classList.add("link");
      group.addEventListener("click", () => showKernel(node.kernel));
    }
    group.appendChild(element("rect", { width, height, rx: 4, fill: OP_COLOURS[node.op] || DEFAULT_COLOUR },
      null, SVG_NS));
    lines.forEach((line, i) => group.appendChild(element("text", { x: 7, y: 14 + i * 14 }, line, SVG_NS)));
    scene.appendChild(group);
  }
  svg.appendChild(arrowMarker());
  svg.appendChild(scene);
  const size = layout.graph();
  fitView(svg, size.width || 100, size.height || 100);
  if (graph.truncated) document.getElementById("graph-title").textContent +=
    ` (${graph.truncated} nodes farthest from the root not drawn)`;
}

function arrowMarker() {
  const defs = element("defs", {}, null, SVG_NS);
  const marker = element("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6,
    markerHeight: 6, orient: "auto" }, null, SVG_NS);
  marker.appendChild(element("path", { d: "M0,0 L10,5 L0,10 z", fill: "#90a4ae" }, null, SVG_NS));
  defs.appendChild(marker);
  return defs;
}

// pan with the mouse, zoom with the wheel: both move the SVG's viewBox
function fitView(svg, width, height) {
  svg.viewBox.baseVal.x = 0; svg.viewBox.baseVal.y = 0;
  svg.viewBox.baseVal.width = width; svg.viewBox.baseVal.height = height;
}

function installPanZoom(svg) {
  let drag = null;
  svg.addEventListener("mousedown", e => { drag = { x: e.clientX, y: e.clientY }; });
  window.addEventListener("mouseup", () => { drag = null; });
  svg.addEventListener("mousemove", e => {
    if (!drag) return;
    const box = svg.viewBox.baseVal, scale = box.width / svg.clientWidth;
    box.x -= (e.clientX - drag.x) * scale; box.y -= (e.clientY - drag.y) * scale;
    drag = { x: e.clientX, y: e.clientY };
  });
  svg.addEventListener("wheel", e => {
    e.preventDefault();
    const box = svg.viewBox.baseVal, factor = e.deltaY > 0 ? 1.15 : 1 / 1.15;
    const rect = svg.getBoundingClientRect();
    const px = box.x + (e.clientX - rect.left) / rect.width * box.width;
    const py = box.y + (e.clientY - rect.top) / rect.height * box.height;
    box.x = px - (px - box.x) * factor; box.y = py - (py - box.y) * factor;
    box.width *= factor; box.height *= factor;
  }, { passive: false });
}

// ------------------------------------------------------------------------------------------ the timeline
// a row per track (process / thread of the Chrome trace), nested slices one sub-row deeper; the wheel zooms in time
const TRACK_HEIGHT = 16, LABEL_WIDTH = 150;
const timeline = { boxes: [], tracks: [], labels: {}, start: 0, end: 1, view: null };

function loadTimeline(trace) {
  const events = trace.traceEvents || [];
  const processNames = {}, trackNames = {};
  for (const e of events) {
    if (e.ph !== "M") continue;
    if (e.name === "process_name") processNames[e.pid] = e.args.name;
    if (e.name === "thread_name") trackNames[`${e.pid}:${e.tid}`] = e.args.name;
  }
  timeline.boxes = events.filter(e => e.ph === "X").sort((a, b) => a.ts - b.ts || b.dur - a.dur);
  const keys = [...new Set(timeline.boxes.map(e => `${e.pid}:${e.tid}`))].sort((a, b) => {
    const [pa, ta] = a.split(":").map(Number), [pb, tb] = b.split(":").map(Number);
    return pa - pb || ta - tb;
  });
  const depths = {};
  for (const key of keys) depths[key] = nestDepths(timeline.boxes.filter(e => `${e.pid}:${e.tid}` === key));
  let row = 0;
  timeline.tracks = keys.map(key => {
    const [pid, tid] = key.split(":");
    const track = { key, row, label: `${processNames[pid] ?? pid} / ${trackNames[key] ?? tid}` };
    row += Math.max(...depths[key].values()) + 1;
    return track;
  });
  timeline.rows = row;
  timeline.depth = new Map(Object.values(depths).flatMap(m => [...m]));
  if (timeline.boxes.length) {
    timeline.start = Math.min(...timeline.boxes.map(e => e.ts));
    timeline.end = Math.max(...timeline.boxes.map(e => e.ts + e.dur));
  }
  timeline.view = [timeline.start, Math.max(timeline.end, timeline.start + 1e-3)];
}

// how deep each slice of one track is nested (0: not inside another slice)
function nestDepths(slices) {
  const depth = new Map(), open = [];
  for (const e of slices) {
    while (open.length && open[open.length - 1] <= e.ts) open.pop();
    depth.set(e, open.length);
    open.push(e.ts + e.dur);
  }
  return depth;
}

function drawTimeline() {
  const svg = document.getElementById("timeline");
  svg.textContent = "";
  const note = document.getElementById("timeline-note");
  if (!timeline.boxes.length) { note.textContent = "(no events: nothing was profiled)"; return; }
  const [from, to] = timeline.view, span = to - from;
  const width = Math.max(600, svg.parentElement.clientWidth - 20), scale = (width - LABEL_WIDTH - 10) / span;
  note.textContent = `(${timeline.boxes.length} events; showing ${(span / 1000).toFixed(3)} ms of ` +
    `${((timeline.end - timeline.start) / 1000).toFixed(3)} ms: scroll to zoom, double-click to reset)`;
  svg.setAttribute("width", width);
  svg.setAttribute("height", timeline.rows * TRACK_HEIGHT + 6);
  const trackRow = Object.fromEntries(timeline.tracks.map(t => [t.key, t.row]));
  for (const track of timeline.tracks)
    svg.appendChild(element("text", { class: "track-label", x: 4, y: track.row * TRACK_HEIGHT + 12 }, track.label,
      SVG_NS));
  for (const e of timeline.boxes) {
    if (e.ts + e.dur < from || e.ts > to) continue;
    const row = trackRow[`${e.pid}:${e.tid}`] + timeline.depth.get(e);
    const kind = ["copy", "kernel", "collective"].includes(e.cat) ? e.cat : "other";
    const x = LABEL_WIDTH + Math.max(0, (e.ts - from) * scale);
    const right = LABEL_WIDTH + Math.min(span, e.ts + e.dur - from) * scale;
    const box = element("rect", { class: `box ${kind}`, x, y: row * TRACK_HEIGHT + 2, width: Math.max(1, right - x),
      height: TRACK_HEIGHT - 3 }, null, SVG_NS);
    const details = Object.entries(e.args || {}).map(([k, v]) => `${k}: ${v}`).join("\n");
    box.appendChild(element("title", {}, `${e.name} (${e.dur.toFixed(1)} us)\n${details}`, SVG_NS));
    svg.appendChild(box);
  }
}

function installTimelineZoom(svg) {
  svg.addEventListener("wheel", e => {
    if (!timeline.boxes.length) return;
    e.preventDefault();
    const [from, to] = timeline.view, rect = svg.getBoundingClientRect();
    const fraction = Math.min(1, Math.max(0, (e.clientX - rect.left - LABEL_WIDTH) / (rect.width - LABEL_WIDTH - 10)));
    const at = from + fraction * (to - from), factor = e.deltaY > 0 ? 1.25 : 0.8;
    timeline.view = [at - (at - from) * factor, at + (to - at) * factor];
    drawTimeline();
  }, { passive: false });
  svg.addEventListener("dblclick", () => {
    timeline.view = [timeline.start, Math.max(timeline.end, timeline.start + 1e-3)];
    drawTimeline();
  });
}

// ------------------------------------------------------------------------------------------ start
async function main() {
  installPanZoom(document.getElementById("graph"));
  installTimelineZoom(document.getElementById("timeline"));
  document.getElementById("step-prev").addEventListener("click", () => showStep(state.step - 1));
  document.getElementById("step-next").addEventListener("click", () => showStep(state.step + 1));
  document.getElementById("step-slider").addEventListener("input", e => showStep(Number(e.target.value)));
  window.addEventListener("keydown", e => {
    if (e.key === "ArrowLeft") showStep(state.step - 1);
    if (e.key === "ArrowRight") showStep(state.step + 1);
  });
  renderRealizes(await getJSON("/api/realizes"));
  loadTimeline(await getJSON("/api/timeline"));
  drawTimeline();
  document.body.dataset.loaded = "true";
}

main().catch(error => {
  document.getElementById("summary").textContent = `error: ${error.message}`;
  document.body.dataset.loaded = "error";
});
