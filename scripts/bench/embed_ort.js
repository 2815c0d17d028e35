// ONNX Runtime baseline of scripts/bench/embed: the PyTorch export of the
// same BERT (embed_ref.py export, or its 8-bit graph: embed_ref.py
// quantize), the same ids ("w<i>" -> 5 + i, [CLS] 2, [SEP] 3), the batch
// padded to its longest line with an attention mask.
//   node embed_ort.js MODEL.onnx LINES REPEATS THREADS [VECS]   -> one JSON line
// VECS: the last run's pooled vectors written there as raw float32
// [lines, width], for the bench's cosines.
const ort = require("onnxruntime-node"); // found through NODE_PATH
const fs = require("fs");

(async () => {

const [model, path, repeatsS, threadsS, vecs] = process.argv.slice(2);
const repeats = Number(repeatsS), threads = Number(threadsS);
const seqs = fs.readFileSync(path, "utf8").split("\n").filter((l, i, a) => i < a.length - 1)
    .map((l) => [2, ...l.split(" ").filter((w) => w).map((w) => 5 + Number(w.slice(1))), 3]);
const B = seqs.length, T = Math.max(...seqs.map((s) => s.length));
const ids = new BigInt64Array(B * T), mask = new BigInt64Array(B * T), seg = new BigInt64Array(B * T);
seqs.forEach((s, b) => s.forEach((id, t) => { ids[b * T + t] = BigInt(id); mask[b * T + t] = 1n; }));
const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential",
    graphOptimizationLevel: "all",
});
const feeds = {
    input_ids: new ort.Tensor("int64", ids, [B, T]),
    attention_mask: new ort.Tensor("int64", mask, [B, T]),
    token_type_ids: new ort.Tensor("int64", seg, [B, T]),
};
const ms = [];
let check = 0, last = null;
for (let r = 0; r <= repeats; r++) {
    const t0 = process.hrtime.bigint();
    const out = (await session.run(feeds)).last_hidden_state.data;
    // mean pooling over the real tokens, as tfm-embed's default
    const C = out.length / (B * T), v = new Float32Array(B * C);
    for (let b = 0; b < B; b++) {
        const n = seqs[b].length;
        for (let t = 0; t < n; t++)
            for (let c = 0; c < C; c++) v[b * C + c] += out[(b * T + t) * C + c] / n;
    }
    check = v[0];
    last = v;
    if (r) ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
ms.sort((a, b) => a - b);
if (vecs) fs.writeFileSync(vecs, Buffer.from(last.buffer));
const rss = process.resourceUsage().maxRSS / 1024;
console.log(JSON.stringify({ ms: ms[Math.floor(ms.length / 2)], padded_tokens: B * T,
    peak_rss_mb: Math.round(rss * 10) / 10, check }));
})();
