// Differential test over random text: 20000 lines of random code points from
// every plane (weighted towards ASCII, Latin/Greek/Cyrillic, combining marks,
// CJK, punctuation, emoji, musical-symbol marks), encoded by HF tokenizers
// 0.23.2 (BERT uncased vocabulary) under five BertNormalizer settings.
// Prints, per setting, the FNV-1a 64 hash of the ids text ("id id ...\n" per
// line); wordpiece_test.c regenerates the same lines with the same generator
// and must reproduce every hash.
//   NODE_PATH=/tmp/hf/node_modules node gen_random.js
const t = require('tokenizers');
let seed = 987654321;
function rnd(n) { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return (seed >>> 8) % n; }
function rcp() {
  const r = rnd(100);
  if (r < 30) return 0x20 + rnd(0x5f);
  if (r < 40) return 0x80 + rnd(0x780);
  if (r < 50) return 0x300 + rnd(0x70);
  if (r < 60) return 0x4e00 + rnd(0x5200);
  if (r < 65) return 0x3000 + rnd(0x400);
  if (r < 72) return 0x2000 + rnd(0x1000);
  if (r < 80) { let c; do { c = 0x800 + rnd(0xf800); } while (c >= 0xd800 && c <= 0xdfff); return c; }
  if (r < 85) return 0x1f300 + rnd(0x700);
  if (r < 88) return 0x1d100 + rnd(0x200);
  if (r < 95) return 0x10000 + rnd(0x10000);
  return 0x20000 + rnd(0xf0000);
}
const lines = [];
for (let i = 0; i < 20000; i++) {
  let s = ''; const n = 1 + rnd(60);
  for (let j = 0; j < n; j++) s += String.fromCodePoint(rcp());
  lines.push(s);
}
function fnv(str) {
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.from(str, 'utf8')) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return '0x' + h.toString(16);
}
(async () => {
  const configs = [['uncased', {}], ['cased', { lowercase: false, stripAccents: false }],
    ['lower_keep_accents', { lowercase: true, stripAccents: false }],
    ['strip_only', { lowercase: false, stripAccents: true }],
    ['raw', { cleanText: false, handleChineseChars: false, lowercase: false, stripAccents: false }]];
  for (const [name, opts] of configs) {
    const model = await t.WordPiece.fromFile(__dirname + '/bert-base-uncased-vocab.txt', { unkToken: '[UNK]' });
    const tok = new t.Tokenizer(model);
    tok.setNormalizer(t.bertNormalizer(opts)); tok.setPreTokenizer(t.bertPreTokenizer());
    let out = '';
    for (const l of lines) { const e = await tok.encode(l, null, { addSpecialTokens: false }); out += e.getIds().join(' ') + '\n'; }
    console.log(name, fnv(out), out.length);
  }
})();
