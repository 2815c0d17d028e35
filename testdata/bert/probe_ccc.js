// Canonical reordering in HF's BertNormalizer (NFD when stripping accents):
// for every code point c with a nonzero combining class (utf8proc's list,
// from utf8proc_dump.c's 7th column), "x" c U+1D165 and "x" U+1D16D c
// (U+1D165/U+1D16D: spacing marks of classes 216/226 that survive accent
// stripping) through the default normalizer.  Writes ccc.tsv lines:
// input hex UTF-8, tab, output hex UTF-8.
//   NODE_PATH=... node probe_ccc.js dump.tsv > ccc.tsv
const t = require('tokenizers'); const fs = require('fs');
const n = t.bertNormalizer({});
const hx = (s) => Buffer.from(s, 'utf8').toString('hex');
const out = [];
for (const l of fs.readFileSync(process.argv[2], 'utf8').trim().split('\n')) {
  const f = l.split('\t');
  if (f.length < 7 || f[6] === '0') continue;
  const c = String.fromCodePoint(parseInt(f[0], 16));
  for (const s of ['x' + c + '\u{1D165}', 'x\u{1D16D}' + c]) out.push(hx(s) + '\t' + hx(n.normalizeString(s)));
}
process.stdout.write(out.join('\n') + '\n');
