// Four worker threads each build an array of 100,000 strings and post its
// length back; the main thread prints the total (400000).
// Run: node workers.js
const { Worker, isMainThread, parentPort } = require('worker_threads');
if (isMainThread) {
  let done = 0, total = 0;
  for (let i = 0; i < 4; i++) {
    new Worker(__filename).on('message', m => { total += m; if (++done == 4) console.log(total); });
  }
} else {
  const a = [];
  for (let i = 0; i < 100000; i++) a.push('x' + i);
  parentPort.postMessage(a.length);
}
