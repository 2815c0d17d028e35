// HF tokenizers' BERT uncased WordPiece speed on a text file, one sequence
// per line (encodeBatch of 2000 lines; set RAYON_NUM_THREADS=1 and
// TOKENIZERS_PARALLELISM=false for one thread), best of two runs:
//   NODE_PATH=/tmp/hf/node_modules RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
//     node hf_bench.js bert-base-uncased-vocab.txt FILE
// Compare with scripts/bench/wordpiece_bench VOCAB FILE in the same run.
const t = require('tokenizers'); const fs = require('fs');
(async () => {
  const model = await t.WordPiece.fromFile(process.argv[2], { unkToken: '[UNK]' });
  const tok = new t.Tokenizer(model);
  tok.setNormalizer(t.bertNormalizer({})); tok.setPreTokenizer(t.bertPreTokenizer());
  const text = fs.readFileSync(process.argv[3], 'utf8'); const bytes = Buffer.byteLength(text);
  const lines = text.split('\n');
  let best = 1e30, ntok = 0;
  for (let r = 0; r < 2; r++) {
    const t0 = process.hrtime.bigint(); ntok = 0;
    for (let i = 0; i < lines.length; i += 2000) {
      const encs = await tok.encodeBatch(lines.slice(i, i + 2000), { addSpecialTokens: false });
      for (const e of encs) ntok += e.getIds().length;
    }
    const dt = Number(process.hrtime.bigint() - t0) / 1e9; if (dt < best) best = dt;
  }
  console.log(`hf wordpiece bytes=${bytes} tokens=${ntok} best_s=${best.toFixed(3)} MB/s=${(bytes / 1e6 / best).toFixed(2)}`);
})();
