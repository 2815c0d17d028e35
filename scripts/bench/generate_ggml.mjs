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
// libuv's thread pool is limited to one thread (UV_THREADPOOL_SIZE=1, unless
// set): node-llama-cpp runs each evaluation as pool work, and with the
// default four pool threads decoding ran 25-40% slower on a 2-core machine
// (measured, 2 threads, quiet machine); with one, every evaluation is
// submitted from the same thread, as in a C program.  (libuv reads the
// variable before this module runs: without it the script runs itself again.)
//
// Prints "ggml cpu_backend=..." (the libggml-cpu variant llama.cpp chose for
// this CPU), "ggml system_info=...", "ggml tok_per_s=...", "ggml ids=...".
// node-llama-cpp is found through NODE_PATH (scripts/bench/generate installs
// it into ~/.cache/tfm-bench/llama).
import {spawnSync} from "node:child_process";
import {createRequire} from "node:module";
import {pathToFileURL, fileURLToPath} from "node:url";
import fs from "node:fs";
import path from "node:path";

if (process.env.UV_THREADPOOL_SIZE === undefined) {
    const r = spawnSync(process.execPath, process.argv.slice(1),
                        {stdio: "inherit", env: {...process.env, UV_THREADPOOL_SIZE: "1"}});
    process.exit(r.status ?? 1);
}

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

// ES modules ignore NODE_PATH: resolve the package through it by hand
let nlcUrl = null;
async function importFromNodePath(name) {
    const dirs = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean);
    for (const d of [...dirs, process.cwd()]) {
        try {
            const req = createRequire(path.join(d, "noop.js"));
            nlcUrl = pathToFileURL(req.resolve(name)).href;
            return await import(nlcUrl);
        } catch (e) {
            if (e.code !== "MODULE_NOT_FOUND" && e.code !== "ERR_MODULE_NOT_FOUND" &&
                e.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw e;
        }
    }
    nlcUrl = import.meta.resolve(name);
    return import(name);
}
const {getLlama, LlamaLogLevel} = await importFromNodePath("node-llama-cpp");

const logs = [];
const llama = await getLlama({
    gpu: false, build: "never", maxThreads: a.threads,
    logLevel: LlamaLogLevel.debug, logger: (level, msg) => logs.push(`${level}: ${msg}`),
});
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
rates.sort((x, y) => x - y);
const m = rates.length;
const median = m % 2 ? rates[(m - 1) / 2] : (rates[m / 2 - 1] + rates[m / 2]) / 2;

const backend = logs.map((l) => /loaded CPU backend from (\S+)/.exec(l)).find(Boolean);
const variant = backend ? path.basename(backend[1]).replace(/^libggml-cpu-?|\.so.*$/g, "") || "default" : "unknown (static build?)";
const ver = (() => {
    try { // the package.json above the resolved entry point
        let d = path.dirname(fileURLToPath(nlcUrl));
        for (; d !== path.dirname(d); d = path.dirname(d)) {
            const f = path.join(d, "package.json");
            if (fs.existsSync(f)) { const j = JSON.parse(fs.readFileSync(f, "utf8")); if (j.name === "node-llama-cpp") return j.version; }
        }
    } catch { /* unknown */ }
    return "?";
})();
console.log(`ggml node-llama-cpp=${ver} threads=${context.currentThreads} kv_cache=${a.kv} context=${context.contextSize}`);
console.log(`ggml cpu_backend=${variant}${backend ? " (" + path.basename(backend[1]) + ")" : ""}`);
console.log(`ggml system_info=${llama.systemInfo.replace(/\s*\|\s*$/, "").replace(/\s+/g, " ")}`);
console.log(`ggml runs_tok_per_s=${rates.map((x) => x.toFixed(1)).join(",")}`);
console.log(`ggml tok_per_s=${median.toFixed(1)}`);
console.log(`ggml ids=${ids.join(" ")}`);
await context.dispose();
await model.dispose();
await llama.dispose();
