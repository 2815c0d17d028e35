// ggml baseline for scripts/bench/generate: greedy decoding of a GGUF file
// (written by generate_ggml.py from a tfm model) with llama.cpp, through
// node-llama-cpp's prebuilt CPU binaries (no GPU).
//
//   node generate_ggml.mjs MODEL.gguf --prompt "1 2 3" --new N --threads T
//                          [--runs R] [--ctx N] [--kv f32|f16]
//
// Token ids in, token ids out: the prompt ids are evaluated as one batch,
// then each greedy token (temperature 0, no penalties, end-of-text ignored)
// is fed back, as tfm-generate --ids --greedy --ignore-eos does.  Tokens per
// second = new tokens / (prompt pass + decoding): the clock starts before
// the prompt is evaluated and stops when the N-th token has been chosen (N - 1
// single-token passes after the prompt pass).  The median over R runs, after
// a short warm-up, each run from an empty cache.
//
// (libuv's thread pool: one thread, see ggml_lib.mjs.)
//
// Prints "ggml cpu_backend=..." (the libggml-cpu variant llama.cpp chose for
// this CPU), "ggml system_info=...", "ggml tok_per_s=...", "ggml ids=...".
// node-llama-cpp is found through NODE_PATH (scripts/bench/generate installs
// it into ~/.cache/tfm-bench/llama).
import {describe, loadLlama, median, oneThreadPool} from "./ggml_lib.mjs";

oneThreadPool();

function usage(msg) {
    if (msg) console.error("generate_ggml.mjs: " + msg);
    console.error("usage: node generate_ggml.mjs MODEL.gguf --prompt \"1 2 3\" --new N --threads T [--runs R] [--ctx N] [--kv f32|f16]");
    process.exit(2);
}

const a = {model: null, prompt: null, new: 256, threads: 2, runs: 2, ctx: 1024, kv: "f16", flash: "auto"};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const val = () => { if (i + 1 >= argv.length) usage(k + " wants a value"); return argv[++i]; };
    if (k === "--prompt") a.prompt = val();
    else if (k === "--new") a.new = parseInt(val(), 10);
    else if (k === "--threads") a.threads = parseInt(val(), 10);
    else if (k === "--runs") a.runs = parseInt(val(), 10);
    else if (k === "--ctx") a.ctx = parseInt(val(), 10);
    else if (k === "--kv") a.kv = val();
    else if (k === "--flash") a.flash = val();
    else if (k.startsWith("--")) usage("unknown option " + k);
    else if (a.model === null) a.model = k;
    else usage("one model file");
}
if (!a.model || a.prompt === null) usage();
if (!(a.new > 0 && a.threads > 0 && a.runs > 0)) usage("--new, --threads and --runs want counts >= 1");
if (a.kv !== "f32" && a.kv !== "f16") usage("--kv f32 or f16");
if (!["on", "off", "auto"].includes(a.flash)) usage("--flash on, off or auto");
const prompt = a.prompt.trim().split(/\s+/).map(Number);
if (prompt.some((x) => !Number.isInteger(x) || x < 0)) usage("--prompt wants token ids");

const {llama, logs} = await loadLlama(a.threads);
const model = await llama.loadModel({modelPath: a.model, gpuLayers: 0});
const kvType = a.kv.toUpperCase();
const context = await model.createContext({
    contextSize: a.ctx, sequences: 1, threads: {ideal: a.threads, min: a.threads},
    experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType,
    flashAttention: a.flash === "auto" ? "auto" : a.flash === "on",
});
const seq = context.getSequence();
if (prompt.length + a.new > context.contextSize)
    usage(`prompt + new tokens (${prompt.length + a.new}) exceed the context (${context.contextSize})`);

async function greedy(n) {
    await seq.clearHistory();
    const ids = [];
    const t0 = process.hrtime.bigint();
    const trace = process.env.GGML_BENCH_TRACE ? [] : null;
    for await (const tok of seq.evaluate(prompt, {temperature: 0, yieldEogToken: true})) {
        ids.push(tok);
        if (trace) trace.push(Number(process.hrtime.bigint() - t0) / 1e6);
        if (ids.length >= n) break;
    }
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (trace) console.error("ggml trace ms: " + trace.map((x) => x.toFixed(0)).join(" "));
    return {ids, s};
}

await greedy(Math.min(a.new, 4)); // warm-up: pages the weights in
const rates = [];
let ids = null;
for (let r = 0; r < a.runs; r++) {
    const res = await greedy(a.new);
    if (res.ids.length !== a.new) throw new Error(`generated ${res.ids.length} tokens, wanted ${a.new}`);
    rates.push(a.new / res.s);
    if (ids === null) ids = res.ids;
    else if (res.ids.join(" ") !== ids.join(" ")) console.log("ggml note: runs produced different tokens");
}
describe(llama, logs, `threads=${context.currentThreads} kv_cache=${a.kv} context=${context.contextSize}`);
console.log(`ggml runs_tok_per_s=${rates.map((x) => x.toFixed(1)).join(",")}`);
console.log(`ggml tok_per_s=${median(rates).toFixed(1)}`);
console.log(`ggml ids=${ids.join(" ")}`);
await context.dispose();
await model.dispose();
await llama.dispose();
