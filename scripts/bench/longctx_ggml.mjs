// llama.cpp baseline for scripts/bench/longctx: one forward over N token
// ids of a GGUF file (written by generate_ggml.py from the same weights),
// with flash attention, through node-llama-cpp's prebuilt CPU binaries.
//
//   node longctx_ggml.mjs MODEL.gguf --ids FILE --threads T [--runs R]
//                         [--flash on|off] [--batch B]
//
// FILE holds the ids, whitespace-separated.  The context is their count;
// they are evaluated without generating (llama.cpp computes the LM head on
// the last position only: less work than tfm-eval's scoring of every
// token), in batches of B (default 512, llama.cpp's; the key/value cache
// f16, llama.cpp's default).  Milliseconds per token of the evaluation,
// median of R runs (default 1), each from an empty cache; the process's
// peak resident memory (VmHWM: the model, the cache, the scratch).
//
// Prints "ggml ms_per_token=...", "ggml peak_mib=..." after the lines of
// ggml_lib.mjs's describe.
import fs from "node:fs";
import {describe, loadLlama, median, oneThreadPool} from "./ggml_lib.mjs";

oneThreadPool();

function usage(msg) {
    if (msg) console.error("longctx_ggml.mjs: " + msg);
    console.error("usage: node longctx_ggml.mjs MODEL.gguf --ids FILE --threads T [--runs R] [--flash on|off] [--batch B]");
    process.exit(2);
}
const a = {model: null, ids: null, threads: 2, runs: 1, flash: "on", batch: 512};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const val = () => { if (i + 1 >= argv.length) usage(k + " wants a value"); return argv[++i]; };
    if (k === "--ids") a.ids = val();
    else if (k === "--threads") a.threads = parseInt(val(), 10);
    else if (k === "--runs") a.runs = parseInt(val(), 10);
    else if (k === "--flash") a.flash = val();
    else if (k === "--batch") a.batch = parseInt(val(), 10);
    else if (k.startsWith("--")) usage("unknown option " + k);
    else if (a.model === null) a.model = k;
    else usage("one model file");
}
if (!a.model || !a.ids) usage();
if (!(a.threads > 0 && a.runs > 0 && a.batch > 0)) usage("--threads, --runs and --batch want counts >= 1");
if (a.flash !== "on" && a.flash !== "off") usage("--flash on or off");
const ids = fs.readFileSync(a.ids, "utf8").trim().split(/\s+/).map(Number);
if (!ids.length || ids.some((x) => !Number.isInteger(x) || x < 0)) usage(a.ids + ": token ids wanted");

const {llama, logs} = await loadLlama(a.threads);
const model = await llama.loadModel({modelPath: a.model, gpuLayers: 0});
const context = await model.createContext({
    contextSize: ids.length, sequences: 1, batchSize: Math.min(a.batch, ids.length),
    threads: {ideal: a.threads, min: a.threads}, flashAttention: a.flash === "on",
});
const seq = context.getSequence();
const ms = [];
for (let r = 0; r < a.runs; r++) {
    await seq.clearHistory();
    const t0 = process.hrtime.bigint();
    await seq.evaluateWithoutGeneratingNewTokens(ids);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6 / ids.length);
}
const hwm = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync("/proc/self/status", "utf8"));
describe(llama, logs, `threads=${context.currentThreads} context=${context.contextSize} flash=${a.flash} batch=${a.batch}`);
console.log(`ggml ms_per_token=${median(ms).toFixed(4)}`);
console.log(`ggml peak_mib=${hwm ? (Number(hwm[1]) / 1024).toFixed(0) : "?"}`);
await context.dispose();
await model.dispose();
await llama.dispose();
