// Random mixes of fragments from every class the GPT-2 pre-tokenizer
// distinguishes (contractions in both cases, Unicode spaces, marks, emoji
// sequences, digits of other scripts, Unicode 16 letters), with tiktoken
// 1.0.22 ids: NODE_PATH=/tmp/tk/node_modules node gen-random.js > random.tsv
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
const fs = require("fs");
let seed = 12345;
function rnd(n) { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; }
const frags = [" ", "  ", "   ", "\t", "\u00a0", "\u3000", "\u2003", "\u0085", "\u000b", "\u000c", "'", "'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'d", "'LL", "'x",
  "a", "Z", "the", " the", "é", "ß", "İ", "ǅ", "ʰ", "中", "文", "日本", "한", "ا", "ل", "ש", "क", "ा", "\u0301", "\u200d", "\u200b", "\ufeff",
  "0", "7", "42", "٣", "²", "½", "Ⅻ", "!", "?", ".", ",", "-", "_", "(", ")", "\"", "$", "€", "©", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\ufffd", "\u001c", "\u0000", "\r", "\u2028", "ꟍ", "𐵊"];
const lines = [];
for (let i = 0; i < 1000; i++) {
  let s = "";
  const n = 1 + rnd(25);
  for (let j = 0; j < n; j++) s += frags[rnd(frags.length)];
  lines.push(s);
}

process.stdout.write(lines.map(l => JSON.stringify(l) + "\t" + Array.from(enc.encode(l, [], [])).join(" ")).join("\n") + "\n");
