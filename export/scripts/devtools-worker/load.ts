// Loads a .heapsnapshot with the code of Chrome DevTools' heap snapshot worker, as the Memory
// panel does: HeapSnapshotLoader parses the file in chunks, then the snapshot initialises with
// the second worker (a worker thread here too) computing retainers, dominators and retained
// sizes. Prints {"seconds", "nodes", "root_retained"} as JSON. Bundled by
// install-devtools-worker.sh; run as `node load.mjs FILE`.
import './polyfill.js';
import {isMainThread, MessageChannel, Worker, workerData} from 'node:worker_threads';
import * as fs from 'node:fs';
import {HeapSnapshotLoader} from '../package/front_end/entrypoints/heap_snapshot_worker/HeapSnapshotLoader.js';
import {SecondaryInitManager} from '../package/front_end/entrypoints/heap_snapshot_worker/HeapSnapshot.js';

if (!isMainThread) {
  new SecondaryInitManager(workerData.port);
} else {
  const file = process.argv[2];
  const t0 = performance.now();
  const channel = new MessageChannel();
  const second = new Worker(new URL(import.meta.url), {workerData: {port: channel.port2}, transferList: [channel.port2] as any});
  const loader = new HeapSnapshotLoader(undefined as any);
  const fd = fs.openSync(file, 'r');
  const buf = Buffer.alloc(1 << 20);
  const decoder = new TextDecoder();
  for (;;) {
    const n = fs.readSync(fd, buf, 0, buf.length, null);
    if (n === 0) break;
    loader.write(decoder.decode(buf.subarray(0, n), {stream: true}));
  }
  loader.close();
  const snapshot: any = await loader.buildSnapshot(channel.port1 as any);
  const seconds = (performance.now() - t0) / 1000;
  const rootRetained = snapshot.retainedSizes[snapshot.rootNodeIndex / snapshot.nodeFieldCount];
  process.stdout.write(JSON.stringify({seconds, nodes: snapshot.nodeCount, root_retained: rootRetained}) + '\n');
  await second.terminate();
  process.exit(0);
}
