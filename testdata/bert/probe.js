// Runs every code point (surrogates excepted) through HF tokenizers'
// BertNormalizer and BertPreTokenizer and writes probe.tsv: code point (hex),
// then as hex UTF-8: the default (uncased) normalization of the character;
// the normalization with strip_accents off; "a" c "b" through clean_text
// alone; and "a" c "b" through the pre-tokenizer alone, words joined by "|".
// NODE_PATH=<dir with tokenizers@0.23.2>/node_modules node probe.js > probe.tsv
const t = require('tokenizers');
const nd = t.bertNormalizer({});
const nl = t.bertNormalizer({ stripAccents: false });
const nc = t.bertNormalizer({ cleanText: true, handleChineseChars: false, stripAccents: false, lowercase: false });
const pt = t.bertPreTokenizer();
const hx = (s) => Buffer.from(s, 'utf8').toString('hex');
const out = [];
for (let cp = 0; cp <= 0x10ffff; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const c = String.fromCodePoint(cp);
  const p = pt.preTokenizeString('a' + c + 'b').map((x) => x[0]).join('|');
  out.push([cp.toString(16), hx(nd.normalizeString(c)), hx(nl.normalizeString(c)),
    hx(nc.normalizeString('a' + c + 'b')), hx(p)].join('\t'));
}
process.stdout.write(out.join('\n') + '\n');
