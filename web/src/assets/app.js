// heapsnap serve: the page. Every view fetches JSON from /api/ (with the token) and renders it.
"use strict";
const token = document.body.dataset.token;
const main = document.getElementById("main");
let snapshot = 0;
let info = null;

function api(route, params = {}) {
  const q = new URLSearchParams({ ...params, s: snapshot, token });
  return fetch(`api/${route}?${q}`).then(r => r.ok ? r.json() : r.text().then(t => { throw new Error(t); }));
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "onclick") e.onclick = v; else if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children.flat()) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function bytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let x = Math.abs(b), u = 0;
  while (x >= 1024 && u < units.length - 1) { x /= 1024; u++; }
  return (b < 0 ? "-" : "") + (u === 0 ? `${x} B` : `${x.toFixed(1)} ${units[u]}`);
}
const signed = b => (b > 0 ? "+" : "") + bytes(b);
const pct = (part, whole) => whole ? (part * 100 / whole).toFixed(1) + "%" : "";

function objectLink(node, text) {
  return el("a", { class: "obj", href: `#object/${node}`, "data-node": node }, text);
}

function sortable(table, rows, columns) {
  // columns: [{title, num, key(row), cell(row)}]; click a header to sort by it.
  let by = null, desc = true;
  const body = el("tbody");
  const draw = () => {
    const sorted = by === null ? rows : [...rows].sort((a, b) => {
      const x = columns[by].key(a), y = columns[by].key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * (desc ? -1 : 1);
    });
    body.replaceChildren(...sorted.map(r => el("tr", {}, columns.map(c => el("td", { class: c.num ? "num" : "" }, c.cell(r))))));
  };
  const head = el("tr", {}, columns.map((c, i) => el("th", {
    class: c.num ? "num" : "", onclick: () => { desc = by === i ? !desc : true; by = i; draw(); },
  }, c.title)));
  table.append(el("thead", {}, head), body);
  draw();
  return table;
}

async function showSummary() {
  const s = await api("summary");
  const total = s.reachable_bytes;
  main.replaceChildren(
    el("h2", {}, `Snapshot ${info.snapshots[snapshot].name}`),
    suspectsPanel(s.suspects),
    el("table", { class: "kv" }, el("tbody", {},
      el("tr", {}, el("td", {}, "OCaml"), el("td", {}, s.ocaml_version)),
      el("tr", {}, el("td", {}, "objects"), el("td", {}, `${s.objects} (${bytes(s.bytes)})`)),
      el("tr", {}, el("td", {}, "reachable"), el("td", {}, `${s.reachable_objects} (${bytes(s.reachable_bytes)})`)),
      el("tr", {}, el("td", {}, "unreachable"), el("td", {}, `${s.unreachable_objects} (${bytes(s.unreachable_bytes)})`)),
      el("tr", {}, el("td", {}, "garbage"), el("td", {}, `${s.garbage_objects} (${bytes(s.garbage_bytes)})`)),
      el("tr", {}, el("td", {}, "edges"), el("td", {}, s.edges)))),
    el("h2", {}, "Roots"),
    sortable(el("table"), s.roots, [
      { title: "root kind", key: r => r.kind, cell: r => r.kind },
      { title: "roots", num: true, key: r => r.roots, cell: r => r.roots },
      { title: "retained", num: true, key: r => r.retained, cell: r => bytes(r.retained) },
      { title: "%", num: true, key: r => r.retained, cell: r => pct(r.retained, total) },
    ]),
    el("h2", {}, `Largest groups by ${s.top_groups_by || "kind"}`),
    groupTable(s.top_groups, total));
}

// The leak suspects of this snapshot (`heapsnap suspects`): where retained memory accumulates,
// with each one's count of elements and path from a root; then what only stack frames hold.
function suspectsPanel(r) {
  const parts = [el("h2", {}, "Leak suspects ", el("span", { class: "muted" }, `(objects retaining ${r.min_percent}% of the reachable bytes or more, where the memory accumulates)`))];
  if (!r.suspects.length) parts.push(el("p", { class: "muted" }, "None."));
  for (const s of r.suspects) {
    const inside = s.top_address !== s.address ? `inside ${s.top_description} (${bytes(s.top_retained)}), ` : "";
    parts.push(el("div", { class: "suspect" },
      el("div", {}, el("b", {}, `${bytes(s.retained)} (${s.percent.toFixed(1)}%) `), objectLink(s.node, s.description)),
      s.elements ? el("div", {}, `${s.elements.exact ? "" : "at least "}${s.elements.count} ${s.elements.of}`) : "",
      el("div", { class: "muted" }, `${inside}held by ${s.held_by}`),
      s.path ? pathView(`${s.path.root_kind} root ${s.path.root}`, s.path.count, s.path.steps.map(st => ({ text: (st.field ? `.${st.field} → ` : "") + st.label, address: st.example }))) : ""));
  }
  const st = r.stack_only;
  if (st) {
    const frames = st.frames.slice(0, 5).map(f => `${f.function}${f.location ? " " + f.location : ""} (${bytes(f.bytes)})`).join(", ");
    parts.push(el("p", { id: "stack-only" }, el("b", {}, "Held only by stack frames: "), `${bytes(st.bytes)} (${st.percent.toFixed(1)}%)`,
      frames ? `: ${frames}` : "", st.percent >= 1 ? el("span", { class: "muted" }, " (stack frames name no variables: no OCaml type reaches these bytes through them)") : ""));
  }
  return el("section", { id: "suspects" }, parts);
}

function groupTable(groups, total) {
  return sortable(el("table"), groups, [
    { title: "group", key: g => g.name, cell: g => g.name },
    { title: "count", num: true, key: g => g.count, cell: g => g.count },
    { title: "shallow", num: true, key: g => g.shallow, cell: g => bytes(g.shallow) },
    { title: "retained", num: true, key: g => g.retained, cell: g => bytes(g.retained) },
    { title: "%", num: true, key: g => g.retained, cell: g => pct(g.retained, total) },
  ]);
}

async function showGroups(by) {
  // With OCaml names the summary's groups are by type: the groupings offer it, and start there.
  const named = (await api("summary")).top_groups_by === "type";
  by = by || (named ? "type" : "kind");
  const r = await api("groups", { by });
  const choices = (named ? ["type"] : []).concat(["kind", "closure", "root", "reserved"]);
  const select = el("select", { id: "group-by" }, choices.map(b => {
    const o = el("option", { value: b }, `by ${b}`); if (b === by) o.selected = true; return o;
  }));
  select.onchange = () => showGroups(select.value);
  main.replaceChildren(el("h2", {}, "Groups ", select), groupTable(r.groups, r.reachable_bytes));
}

function treeRow(n, depth, total, body) {
  const open = el("span", { class: "toggle" }, n.children_count > 0 ? "▸" : "");
  const desc = n.address ? objectLink(n.node, `${n.address} ${n.description}`) : el("span", {}, n.description);
  const row = el("tr", { class: "tree-row", "data-node": n.node },
    el("td", {}, el("span", { style: `padding-left:${depth * 18}px` }), open, desc, n.root ? el("span", { class: "root", title: n.root }, `  ← ${n.root}`) : ""),
    el("td", { class: "num" }, bytes(n.retained)),
    el("td", { class: "num" }, el("span", { class: "bar", style: `width:${Math.max(1, Math.round(n.percent * 0.6))}px` }), n.percent.toFixed(1) + "%"),
    el("td", { class: "num" }, bytes(n.shallow)),
    el("td", { class: "num" }, n.children_count));
  let shown = [];
  const collapse = () => { shown.forEach(r => r.collapse ? r.collapse() : null); shown.forEach(r => r.remove()); shown = []; open.textContent = "▸"; };
  row.collapse = collapse;
  open.onclick = async () => {
    if (shown.length) { collapse(); return; }
    const t = await api("tree", { node: n.node, limit: 50 });
    let after = row;
    for (const c of t.children) {
      const r = treeRow(c, depth + 1, total, body);
      after.after(r); after = r; shown.push(r);
    }
    if (t.total > t.children.length) {
      const more = el("tr", {}, el("td", { colspan: 5, class: "muted" }, el("span", { style: `padding-left:${(depth + 1) * 18 + 16}px` }), `… ${t.total - t.children.length} smaller children`));
      after.after(more); shown.push(more);
    }
    open.textContent = "▾";
  };
  return row;
}

async function showDominators() {
  const t = await api("tree", { node: 0, limit: 50 });
  const body = el("tbody");
  const table = el("table", { id: "dominator-tree" },
    el("thead", {}, el("tr", {}, el("th", {}, "object"), el("th", { class: "num" }, "retained"), el("th", { class: "num" }, "%"), el("th", { class: "num" }, "shallow"), el("th", { class: "num" }, "children"))),
    body);
  main.replaceChildren(el("h2", {}, "Dominator tree ", el("span", { class: "muted" }, "(click ▸ to expand; largest first)")), table);
  const root = treeRow(t.node, 0, t.node.retained, body);
  body.append(root);
  // Open the roots and the largest objects right away: what a person looks at first.
  await root.querySelector(".toggle").onclick();
  const kinds = [...body.querySelectorAll("tr.tree-row")].slice(1, 3);
  for (const k of kinds) { const tg = k.querySelector(".toggle"); if (tg.textContent === "▸") await tg.onclick(); }
}

async function showObject(node) {
  if (node === undefined) {
    main.replaceChildren(el("h2", {}, "Object"), el("p", { class: "muted" }, "Pick an object in the dominator tree, a group's path or the diff."));
    return;
  }
  const o = await api("object", { node });
  const parts = [el("h2", {}, o.node.address ? `${o.node.address} ${o.node.description}` : o.node.description)];
  const chain = el("ol", { class: "mono" }, o.chain.map(c => el("li", {}, objectLink(c.node, c.description), el("span", { class: "muted" }, `  retains ${bytes(c.retained)} (${c.percent.toFixed(1)}%)`))));
  if (o.inspection) {
    const i = o.inspection;
    const links = new Map(o.links.map(l => [l.index, l.node]));
    parts.push(el("table", { class: "kv" }, el("tbody", {},
      ...(i.ocaml_type ? [el("tr", {}, el("td", {}, "type"), el("td", { class: "mono" }, i.ocaml_type))] : []),
      el("tr", {}, el("td", {}, "region"), el("td", {}, i.region_kind + (i.domain !== null ? ` (domain ${i.domain})` : ""))),
      el("tr", {}, el("td", {}, "header"), el("td", { class: "mono" }, `${i.header} tag ${i.tag} wosize ${i.wosize} ${i.colour}`)),
      el("tr", {}, el("td", {}, "shallow"), el("td", {}, bytes(i.shallow))),
      el("tr", {}, el("td", {}, "retained"), el("td", {}, bytes(i.retained) + (i.reachable ? "" : " (unreachable)"))),
      el("tr", {}, el("td", {}, "roots"), el("td", {}, i.roots.join(", ") || "—")))));
    parts.push(el("h2", {}, `Fields (${i.fields.length}${i.more_fields ? ` of ${i.fields.length + i.more_fields}` : ""})`));
    parts.push(el("table", { id: "fields" }, el("tbody", {}, i.fields.map(f => el("tr", {},
      el("td", { class: "num" }, f.index), el("td", { class: "mono" }, f.name ? `.${f.name}` : ""), el("td", { class: "mono" }, f.raw), el("td", {}, f.kind),
      el("td", {}, links.has(f.index) ? objectLink(links.get(f.index), f.value || "") : (f.value || "")))))));
    parts.push(el("h2", {}, "Dominator chain"), chain);
    parts.push(el("h2", {}, "Retainer paths (shortest, merged)"));
    for (const p of o.paths.paths) parts.push(pathView(p.root_kind + " root " + p.root, p.count, p.steps.map(s => ({ text: (s.field ? `.${s.field} → ` : "") + s.label, address: s.example }))));
    if (o.paths.unreachable) parts.push(el("p", { class: "muted" }, "Not reachable through strong references."));
    parts.push(el("h2", {}, "Referrers"), el("ul", { class: "mono" }, o.referrers.map(r => el("li", {}, objectLink(r.node, r.description)))));
  } else {
    parts.push(el("h2", {}, "Dominator chain"), chain);
  }
  main.replaceChildren(...parts);
}

function pathView(title, count, steps) {
  return el("div", { class: "path" }, el("div", {}, `${count} × from ${title}`), steps.map(s => el("div", {}, "    ",
    s.address ? el("a", { class: "obj", href: `#object/@${s.address}` }, s.text) : s.text)));
}

async function showDiff() {
  const d = await api("diff");
  const last = d.snapshots.length - 1;
  const parts = [el("h2", {}, `Diff of ${d.snapshots.length} snapshots: ${d.snapshots.map(s => s.name).join(" → ")}`)];
  parts.push(el("h2", {}, "Leak suspects"));
  if (!d.suspects.length) parts.push(el("p", { class: "muted" }, d.snapshots.length < 3 ? "Suspects need three snapshots or more." : "None: nothing grew at every step."));
  for (const s of d.suspects) {
    parts.push(el("div", { class: "suspect" },
      el("div", {}, el("b", {}, s.name), el("span", { class: "grow" }, `  ${signed(s.delta_retained)} retained, ${s.delta_count > 0 ? "+" : ""}${s.delta_count} objects`),
        el("span", { class: "muted" }, `  (${s.retained.map(bytes).join(" → ")})`)),
      s.paths.map(p => pathView(p.description, `+${p.new}`, p.steps.map(st => ({
        text: `${st.edge === "root" ? "" : st.edge} ${st.label}${st.label !== st.shape ? ` (${st.shape})` : ""}${st.folded ? " …" : ""}`.trim(),
      })))) ));
  }
  parts.push(el("h2", {}, "Where it grew in the dominator tree"));
  parts.push(sortable(el("table"), d.growth, [
    { title: "place", key: p => p.description, cell: p => p.description },
    { title: "growth", num: true, key: p => p.delta_retained, cell: p => signed(p.delta_retained) },
    { title: "retained", num: true, key: p => p.retained[last], cell: p => p.retained.map(bytes).join(" → ") },
    { title: "objects", num: true, key: p => p.delta_count, cell: p => p.count.join(" → ") },
  ]));
  parts.push(el("h2", {}, `Growth by group (by ${d.by})`));
  parts.push(sortable(el("table"), d.groups, [
    { title: "group", key: g => g.name, cell: g => g.name },
    { title: "Δ retained", num: true, key: g => g.delta_retained, cell: g => signed(g.delta_retained) },
    { title: "Δ count", num: true, key: g => g.delta_count, cell: g => g.delta_count },
    { title: "retained", num: true, key: g => g.retained[last], cell: g => g.retained.map(bytes).join(" → ") },
    { title: "every step", key: g => g.grew_every_step, cell: g => g.grew_every_step ? "yes" : "" },
  ]));
  main.replaceChildren(...parts);
}

// Allocation sites: the sampled blocks grouped by where they were allocated (the innermost
// frame outside the standard library, and `depth` - 1 callers), with what they retain.
async function showSites(depth = 1) {
  const r = await api("sites", { depth });
  const select = el("select", { id: "site-depth" }, [1, 2, 3, 4].map(d => {
    const o = el("option", { value: d }, `${d} frame${d > 1 ? "s" : ""}`); if (d === depth) o.selected = true; return o;
  }));
  select.onchange = () => showSites(Number(select.value));
  const j = r.join;
  main.replaceChildren(
    el("h2", {}, "Allocation sites ", select),
    el("p", { class: "muted" }, `${j.tracked} sampled blocks: ${j.from_callstack} with the call stack their tracker stored, ` +
      `${j.from_memtrace} from memtrace, ${j.not_in_heap} no longer in the heap; sampling rate ${j.sampling_rates.join(", ")}. ` +
      "Estimated bytes scale the samples by the rate: an estimate."),
    sortable(el("table", { id: "sites" }), r.groups, [
      { title: "site", key: g => g.site, cell: g => g.site },
      { title: "blocks", num: true, key: g => g.count, cell: g => g.count },
      { title: "sampled", num: true, key: g => g.sampled_bytes, cell: g => bytes(g.sampled_bytes) },
      { title: "estimated", num: true, key: g => g.estimated_bytes, cell: g => "≈ " + bytes(g.estimated_bytes) },
      { title: "retained", num: true, key: g => g.retained, cell: g => bytes(g.retained) },
      { title: "%", num: true, key: g => g.retained, cell: g => pct(g.retained, r.reachable_bytes) },
    ]));
}

// The flame graph: inferno's SVG in an <object>, so its own script (zoom on click, search) runs.
function showFlame(by = "root") {
  const select = el("select", { id: "flame-by" }, ["root", "kind", "reserved", "closure"].map(b => el("option", { value: b }, b)));
  select.value = by;
  select.onchange = () => showFlame(select.value);
  const graph = el("object", { id: "flame-graph", type: "image/svg+xml", data: `flame.svg?token=${token}&snapshot=${snapshot}&by=${by}` });
  main.replaceChildren(
    el("h2", {}, "Retained bytes ", el("span", { class: "muted" }, "(the dominator tree by path signature: a leak is one wide tower; click a frame to zoom)")),
    el("p", {}, "frames by ", select),
    graph);
}

async function route() {
  const [view, arg] = (location.hash.slice(1) || "summary").split("/");
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.dataset.view === view));
  main.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  try {
    if (view === "groups") await showGroups();
    else if (view === "dominators") await showDominators();
    else if (view === "object") {
      if (arg && arg.startsWith("@")) {
        const o = await api("object", { address: arg.slice(1) });
        history.replaceState(null, "", `#object/${o.node.node}`);
        await showObject(o.node.node);
      } else await showObject(arg);
    }
    else if (view === "diff") await showDiff();
    else if (view === "flame") showFlame();
    else if (view === "sites") await showSites();
    else await showSummary();
  } catch (e) {
    main.replaceChildren(el("p", { class: "grow" }, `Error: ${e.message}`));
  }
}

(async () => {
  info = await api("snapshots");
  const select = document.getElementById("snapshot");
  info.snapshots.forEach(s => select.append(el("option", { value: s.index }, `${s.index + 1}. ${s.name}`)));
  select.value = info.snapshots.length - 1;
  snapshot = info.snapshots.length - 1;
  select.onchange = () => { snapshot = Number(select.value); route(); };
  document.getElementById("diff-tab").hidden = !info.diff;
  window.onhashchange = route;
  route();
})();
