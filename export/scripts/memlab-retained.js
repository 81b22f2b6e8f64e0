// Loads a .heapsnapshot with memlab (getFullHeapFromFile: memlab's parser, then its own
// dominators and retained sizes) and prints JSON on stdout: node and edge counts, seconds, the
// `top` non-synthetic nodes with the largest retained sizes, and the nodes of the ids given.
// usage: node memlab-retained.js FILE [TOP] [ID...]   (NODE_PATH: the memlab install's node_modules)
'use strict';
const {getFullHeapFromFile} = require('@memlab/heap-analysis');
const {config} = require('@memlab/core');

async function main() {
  const [file, topArg, ...ids] = process.argv.slice(2);
  const top = Number(topArg || 20);
  config.muteConsole = true;
  const start = process.hrtime.bigint();
  const heap = await getFullHeapFromFile(file);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const describe = n => ({id: n.id, name: n.name, type: n.type, self_size: n.self_size, retained: n.retainedSize});
  const largest = [];
  heap.nodes.forEach(n => {
    if (n.type === 'synthetic') return;
    largest.push([n.retainedSize, n.id]);
  });
  largest.sort((x, y) => y[0] - x[0] || x[1] - y[1]);
  const wanted = largest.slice(0, top).map(([, id]) => Number(id)).concat(ids.map(Number));
  const nodes = wanted.map(id => {
    const n = heap.getNodeById(id);
    return n ? describe(n) : {id, missing: true};
  });
  let edges = 0;
  heap.nodes.forEach(n => { edges += n.edge_count; });
  process.stdout.write(JSON.stringify({
    nodes: heap.nodes.length,
    edges,
    seconds,
    root_retained: heap.nodes.get(0).retainedSize,
    largest: nodes.slice(0, Math.min(top, largest.length)),
    asked: nodes.slice(Math.min(top, largest.length)),
  }) + '\n');
}
main().catch(e => { console.error(e && e.stack || String(e)); process.exit(1); });
