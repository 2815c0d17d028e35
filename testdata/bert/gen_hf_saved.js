// hf-saved.json: a WordPiece tokenizer.json trained by tfm (tfm-tokenize
// train -m wordpiece -v 400 on the KJV Bible), loaded and saved again by HF
// tokenizers 0.23.2, so tests read what HF writes.  hf-saved.tsv: the
// cases-uncased.tsv inputs encoded by HF with that file, added tokens
// removed (tfm's wordpiece layer treats special-token text as text; the
// facade splits specials).
//   NODE_PATH=/tmp/hf/node_modules node gen_hf_saved.js tfm-400.json DIR
const t = require('tokenizers'); const fs = require('fs');
(async () => {
  const dir = process.argv[3];
  t.Tokenizer.fromFile(process.argv[2]).save(dir + '/hf-saved.json', true);
  const j = JSON.parse(fs.readFileSync(dir + '/hf-saved.json', 'utf8'));
  j.added_tokens = [];
  const tok = t.Tokenizer.fromString(JSON.stringify(j));
  const out = [];
  for (const l of fs.readFileSync(dir + '/cases-uncased.tsv', 'utf8').split('\n')) {
    if (!l) continue;
    const s = JSON.parse(l.split('\t')[0]);
    const e = await tok.encode(s, null, { addSpecialTokens: false });
    out.push(JSON.stringify(s) + '\t' + e.getIds().join(' '));
  }
  fs.writeFileSync(dir + '/hf-saved.tsv', out.join('\n') + '\n');
})().catch(e => { console.error(e); process.exit(1); });
