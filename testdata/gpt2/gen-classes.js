// The character classes of GPT-2's pre-tokenizer for every code point, as
// tiktoken 1.0.22 applies them: S = \s (White_Space), L = \p{L}, N = \p{N},
// O = anything else; written as ranges "first<TAB>last<TAB>class" (hex).
// Categories come from Node's ICU (Unicode 17 here); a letter or number
// that tiktoken (Unicode 16) does not know yet, i.e. one that joins a
// following apostrophe like a symbol does ("X's" -> "X'" + "s"), is O.
// Surrogates are skipped.  Run from a directory where tiktoken is installed:
//   npm install tiktoken@1.0.22 && node gen-classes.js > classes.tsv
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
let out = "", start = 0, cur = null;
function flush(end) {
  if (cur !== null) out += start.toString(16) + "\t" + end.toString(16) + "\t" + cur + "\n";
}
for (let cp = 0; cp < 0x110000; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) { flush(cp - 1); cur = null; continue; }
  const c = String.fromCodePoint(cp);
  let k = /\p{White_Space}/u.test(c) ? "S" : /\p{L}/u.test(c) ? "L" : /\p{N}/u.test(c) ? "N" : "O";
  if (k === "L" || k === "N") {
    const ids = enc.encode(c + "'s", [], []);
    if (ids[ids.length - 1] !== 338) k = "O";
  }
  if (k !== cur) { flush(cp - 1); start = cp; cur = k; }
}
flush(0x10ffff);
process.stdout.write(out);
