// Shared by the llama.cpp baselines (generate_ggml.mjs, longctx_ggml.mjs):
// node-llama-cpp found through NODE_PATH, its prebuilt CPU binaries loaded
// with every log line kept, and what it ran on.  Not a program.
//
// libuv's thread pool is limited to one thread (UV_THREADPOOL_SIZE=1, unless
// set): node-llama-cpp runs each evaluation as pool work, and with the
// default four pool threads decoding ran 25-40% slower on a 2-core machine
// (measured, 2 threads, quiet machine); with one, every evaluation is
// submitted from the same thread, as in a C program.  libuv reads the
// variable before any module runs: oneThreadPool() runs the script again
// with it set (call it first).
import {spawnSync} from "node:child_process";
import {createRequire} from "node:module";
import {pathToFileURL, fileURLToPath} from "node:url";
import fs from "node:fs";
import path from "node:path";

export function oneThreadPool() {
    if (process.env.UV_THREADPOOL_SIZE !== undefined)
        return;
    const r = spawnSync(process.execPath, process.argv.slice(1),
                        {stdio: "inherit", env: {...process.env, UV_THREADPOOL_SIZE: "1"}});
    process.exit(r.status ?? 1);
}

// ES modules ignore NODE_PATH: the package resolved through it by hand
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

// {llama, logs}: llama.cpp on the CPU with `threads` threads
export async function loadLlama(threads) {
    const {getLlama, LlamaLogLevel} = await importFromNodePath("node-llama-cpp");
    const logs = [];
    const llama = await getLlama({
        gpu: false, build: "never", maxThreads: threads,
        logLevel: LlamaLogLevel.debug, logger: (level, msg) => logs.push(`${level}: ${msg}`),
    });
    return {llama, logs};
}

// "ggml node-llama-cpp=...", "ggml cpu_backend=..." (the libggml-cpu
// variant llama.cpp chose for this CPU), "ggml system_info=..." lines
export function describe(llama, logs, extra) {
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
    console.log(`ggml node-llama-cpp=${ver} ${extra}`);
    console.log(`ggml cpu_backend=${variant}${backend ? " (" + path.basename(backend[1]) + ")" : ""}`);
    console.log(`ggml system_info=${llama.systemInfo.replace(/\s*\|\s*$/, "").replace(/\s+/g, " ")}`);
}

export function median(xs) {
    const s = [...xs].sort((x, y) => x - y), m = s.length;
    return m % 2 ? s[(m - 1) / 2] : (s[m / 2 - 1] + s[m / 2]) / 2;
}
