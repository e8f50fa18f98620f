// Manual cross-check of a GGUF file written by WriteLlama against llama.cpp
// and the oracle (not run by go test: it needs Node.js and ~730 MB of npm).
//
//   npm install --ignore-scripts node-llama-cpp@3.21.1   (in a scratch dir)
//   node llamacpp_check.mjs model.gguf ../shared/oracle/stories15M
//
// For every oracle prompt it prints the largest difference between
// llama.cpp's next-token probabilities and the softmax of the oracle's
// logits, over all prompt positions, and how many greedy tokens agree.
// llama.cpp keeps its KV cache in f16, so expect ~1e-4, not 1e-7.
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [path, oracle] = process.argv.slice(2);
const ref = JSON.parse(fs.readFileSync(oracle + "/ref.json"));
const llama = await getLlama({gpu: false, build: "never"});
const model = await llama.loadModel({modelPath: path});
const ctx = await model.createContext({contextSize: Math.min(256, model.trainContextSize), threads: 2});
const seq = ctx.getSequence();
for (const p of ref.prompts) {
  await seq.clearHistory();
  const out = await seq.controlledEvaluate(p.ids.map(t => [t, {generateNext: {probabilities: true}}]));
  const raw = fs.readFileSync(oracle + "/" + p.logits_file);
  const logits = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length));
  const vocab = logits.length / p.ids.length;
  let worst = 0;
  for (let i = 0; i < p.ids.length; i++) {
    const row = logits.subarray(i * vocab, (i + 1) * vocab);
    let m = -Infinity;
    for (const x of row) m = Math.max(m, x);
    let s = 0;
    for (const x of row) s += Math.exp(x - m);
    for (const [tok, pr] of out[i].next.probabilities ?? []) worst = Math.max(worst, Math.abs(pr - Math.exp(row[tok] - m) / s));
  }
  await seq.clearHistory();
  const got = [];
  for await (const tok of seq.evaluate(p.ids, {temperature: 0})) {
    got.push(tok);
    if (got.length >= p.greedy.length || got.length + p.ids.length >= ctx.contextSize) break;
  }
  let same = 0;
  while (same < got.length && got[same] === p.greedy[same]) same++;
  console.log(`${p.name}: max |Δp| ${worst.toExponential(2)}, greedy ${same}/${got.length} equal to the oracle`);
}
await ctx.dispose();
await model.dispose();
