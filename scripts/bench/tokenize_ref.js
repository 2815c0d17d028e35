// The reference side of scripts/bench/tokenize: OpenAI's tiktoken and
// HuggingFace tokenizers (npm), timed on the same corpus as tfm.
//
//   node tokenize_ref.js tiktoken-gpt2 CORPUS
//   node tokenize_ref.js hf-gpt2 VOCAB_JSON MERGES_TXT CORPUS
//   node tokenize_ref.js hf-bert VOCAB_TXT CORPUS
//   node tokenize_ref.js hf-train CORPUS OUT_JSON
//
// The corpus is encoded as one document (no special tokens), as
// `tfm-tokenize encode --document` does: in pieces of about 1 MB cut where
// tfm cuts too (after an ASCII graphic character, before ASCII whitespace),
// where GPT-2's and BERT's pre-tokenizers cannot join across the cut, so the
// token counts must agree exactly with tfm's.  Prints "seconds S" (the
// encode or train calls only: loading and reading are not counted) and
// "tokens N".  HF's threads follow RAYON_NUM_THREADS.
"use strict";
const fs = require("fs");

function pieces(path) {
    const text = fs.readFileSync(path, "utf8");
    const out = [];
    const isGraphic = (c) => c > 0x20 && c < 0x7f;
    const isSpace = (c) => c === 0x20 || (c >= 0x09 && c <= 0x0d);
    let start = 0;
    while (start < text.length) {
        let end = Math.min(start + (1 << 20), text.length);
        if (end < text.length) {
            let p = end;
            while (p > start + 1 && !(isGraphic(text.charCodeAt(p - 1)) && isSpace(text.charCodeAt(p)))) p--;
            if (p > start + 1) end = p;
        }
        out.push(text.slice(start, end));
        start = end;
    }
    return [out, Buffer.byteLength(text)];
}

function report(t0, tokens, bytes) {
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log("seconds " + s.toFixed(4));
    console.log("tokens " + tokens);
    if (bytes) console.log("mb_per_s " + (bytes / 1e6 / s).toFixed(3));
}

async function hfEncode(tok, sentences, bytes) {
    const batch = 4; // pieces of 1 MB: enough to keep the threads busy
    let tokens = 0;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < sentences.length; i += batch) {
        const enc = await tok.encodeBatch(sentences.slice(i, i + batch), { addSpecialTokens: false });
        for (const e of enc) tokens += e.getLength();
    }
    report(t0, tokens, bytes);
}

async function main() {
    const [mode, ...args] = process.argv.slice(2);
    if (mode === "tiktoken-gpt2") {
        const { get_encoding } = require("tiktoken");
        const enc = get_encoding("gpt2");
        const [l, bytes] = pieces(args[0]);
        let tokens = 0;
        const t0 = process.hrtime.bigint();
        for (const s of l) tokens += enc.encode(s, [], []).length; // specials are text
        report(t0, tokens, bytes);
        enc.free();
    } else if (mode === "hf-gpt2") {
        const hf = require("tokenizers");
        const model = await hf.BPE.fromFile(args[0], args[1]);
        const tok = new hf.Tokenizer(model);
        tok.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
        const [l, bytes] = pieces(args[2]);
        await hfEncode(tok, l, bytes);
    } else if (mode === "hf-bert") {
        const hf = require("tokenizers");
        const model = await hf.WordPiece.fromFile(args[0], { unkToken: "[UNK]" });
        const tok = new hf.Tokenizer(model);
        tok.setNormalizer(hf.bertNormalizer({ cleanText: true, handleChineseChars: true,
                                              stripAccents: true, lowercase: true }));
        tok.setPreTokenizer(hf.bertPreTokenizer());
        const [l, bytes] = pieces(args[1]);
        await hfEncode(tok, l, bytes);
    } else if (mode === "hf-train") {
        // Byte-level BPE with the default trainer: vocabulary 30000.
        const hf = require("tokenizers");
        const tok = new hf.Tokenizer(hf.BPE.empty());
        tok.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
        const t0 = process.hrtime.bigint();
        tok.train([args[0]]);
        report(t0, tok.getVocabSize(true), 0);
        tok.save(args[1]);
    } else {
        console.error("usage: tokenize_ref.js tiktoken-gpt2|hf-gpt2|hf-bert|hf-train ARGS");
        process.exit(2);
    }
}

main().catch((e) => {
    console.error("tokenize_ref.js: " + (e && e.stack ? e.stack : e));
    process.exit(1);
});
