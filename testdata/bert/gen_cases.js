// Produces cases-*.tsv and decode.tsv in this directory from HuggingFace
// tokenizers (npm tokenizers@0.23.2).  Run from a scratch directory where
// `npm install tokenizers@0.23.2` was done:
//     node /path/to/testdata/bert/gen_cases.js /path/to/testdata/bert
// Each case line: JSON string input, tab, ids (space-separated), as in
// /work/shared/golden/bert-uncased.tsv.  invalid.tsv: input as hex bytes
// (decoded by Node with U+FFFD for invalid sequences, as any JS caller of
// the binding would), tab, ids.
const t = require('tokenizers');
const fs = require('fs');
const dir = process.argv[2];
const vocabPath = dir + '/bert-base-uncased-vocab.txt';

const cases = [
  // accents and case
  'Café crème brûlée', 'ÀÁÂÃÄÅàáâãäå', 'Ça va? Œuvre, Straße, ĳssel', 'İstanbul ılık',
  'ΣΊΣΥΦΟΣ ΌΣΟΣ', 'Ǆǅǆ ǲ', 'Crème BRÛLÉE', 'e\u0301 e\u0300 o\u0308', 'a\u0323\u0302',
  'Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３', '！＂＃＄％＆＇（）', 'ｶﾀｶﾅ', 'ß ẞ ǰ ŉ',
  // CJK and neighbours
  '中文字符', '我爱北京天安门。', '漢字かな交じり文', 'ひらがな カタカナ', '한국어 텍스트입니다',
  '㐀㐁 𠀀𠀁 𪜀 𫝀 𫠠 𬺰 豈 丽', '⺀⺁ ⼀ 〇 ㆐', 'ｱｲｳ ﾞﾟ', '中a文b字', '你好,世界!',
  'ไทย ภาษา', 'ພາສາລາວ', 'မြန်မာ', 'ᠮᠣᠩᠭᠣᠯ', 'देवनागरी हिन्दी', 'தமிழ்', 'ქართული',
  'አማርኛ', 'ᏣᎳᎩ', 'ꦗꦮ', 'Ελληνικά', 'Русский текст', 'Українська мова',
  // punctuation
  '...!!!???', '«quoted» „German“ ‚single‘', '—–-‒', '¡Hola! ¿Qué?', '…', '§¶†‡•',
  '‰‱′″‴', '©®™', '¢£¥€₹', '+-*/=<>^|~`', '@#$%&_', '(a)[b]{c}', 'a.b,c;d:e',
  '“smart quotes”', '〈〉《》「」『』【】', '、。・', '٪٫٬', '؟،؛', '।॥', '๏๚',
  '\\u0000', 'snake_case and kebab-case', 'e.g., i.e., etc.', 'U.S.A.', '#hashtag @mention',
  // whitespace and controls
  'a\u000bb\u000cc', 'a\u001cb\u001dc\u001ed\u001ff', 'a\u0085b', 'a\u00a0b', 'a\u1680b',
  'a\u2000b\u200ac', 'a\u2028b\u2029c', 'a\u202fb\u205fc', 'a\u3000b', 'a\u200bb\u200cc\u200dd',
  'a\u2060b\ufeffc', 'a\u00adb', 'a\u0007b\u001bc\u007fd', 'a\u0080b\u009fc', 'a\u061cb',
  'a\u180eb', 'a\ue000b\uf8ffc', '\udb80\udc00x', 'x\ufffd\ufffdy', '\r\n\r\n', 'line1\r\nline2',
  '   leading', 'trailing   ', '\t\ttabs\t\t', 'a\u0000\u0000b',
  // emoji and symbols
  '👍🏽', '🏳️‍🌈', '👩‍💻', '🇫🇷🇩🇪', '⌚⌛', '★☆', '♠♣♥♦', '→←↑↓', '∑∏∫√∞', '≤≥≠≈',
  '°C °F', '½ ¼ ¾', '²³¹', 'x₁ x₂', 'Ⅰ Ⅱ Ⅲ Ⅳ', '🥰', '🫠', '\ud83e\udd23',
  // long words
  'a'.repeat(100), 'a'.repeat(101), 'é'.repeat(100), 'é'.repeat(101), 'ab'.repeat(50) + ' ok',
  '中'.repeat(150), 'x'.repeat(99) + 'é', 'supercalifragilisticexpialidocious',
  'antidisestablishmentarianism', 'Donaudampfschifffahrtsgesellschaftskapitän',
  'hyper-long-hyphenated-compound-word-chain', '#'.repeat(120), 'word'.repeat(30),
  // words that fall apart
  'unbelievably', 'reconstructing', 'misunderstandings', 'ungeneralizable', 'qwertyuiop',
  'zzzzzzzz', 'xqxqxqxq', 'hello123world', 'COVID-19', 'GPT-2', 'iPhone', 'McDonald\'s',
  'O\'Neill', 'rock\'n\'roll', 'y\'all', 'ma\'am', 'I\'m', 'can\'t', 'won\'t', 'shan\'t',
  // mixed
  'Mixing English, Français, Deutsch, 中文, 日本語, 한국어 and العربية.',
  'The price is $1,234.56 (≈€1.100).', 'E = mc² is famous.', 'https://example.com/a?b=c&d=e#f',
  'path/to/file.txt', '~/.bashrc', 'C++ and C# and F#', '<html><body>x</body></html>',
  '[CLS] a [SEP] b [SEP]', '[PAD][UNK][MASK]', '##', '##ing', 'ing##', '# # #',
];

// Seeded random strings over a pool covering the classes the normalizer and
// pre-tokenizer distinguish.
let seed = 12345;
function rnd(n) { seed = (seed * 1103515245 + 12345) >>> 0; return (seed >>> 8) % n; }
const pool = ['a', 'b', 'e', 'Z', 'Q', ' ', ' ', ' ', '\t', '\n', ',', '.', '!', '\'', '-', '#',
  'é', 'Ö', 'ñ', 'ß', 'İ', '中', '文', 'か', 'カ', '한', 'ع', 'ש', 'я', 'Ж', 'Σ', 'ς',
  '\u0301', '\u0308', '\u200b', '\u200d', '\u00a0', '\u3000', '\u0000', '\u0007', '\ufffd',
  '😀', '🏽', '€', '²', '½', '。', '「', '―', '…', '\u00ad', 'ﬁ', 'Ａ', 'ｶ', '\ue000',
  'th', 'ing', 'tion', 'un', 'the ', 'and ', 'qu', 'zz'];
for (let i = 0; i < 300; i++) {
  let s = '';
  const n = 1 + rnd(25);
  for (let j = 0; j < n; j++) s += pool[rnd(pool.length)];
  cases.push(s);
}

const invalid = ['ff', '61ff62', '61c062', '61e0806162', '61ed a080 62', 'f4908080', 'f08f8080',
  'c3', 'e282', 'f09f98', '61f09f9862', 'c328', 'a0a1', 'e282a1', 'f09f9880', 'c0af',
  'eda080edb080', 'fe fe ff ff', '616263ff646566', 'c3a9ffc3a9', '80 61 bf', 'e0a0 41',
  'f1808080', 'f4 8f bf bf', 'ef bf bd', '61 00 62', 'e4b8ad ff e69687'].map(s => s.replace(/ /g, ''));

async function main() {
  const mk = async (opts) => {
    const model = await t.WordPiece.fromFile(vocabPath, { unkToken: '[UNK]' });
    const tok = new t.Tokenizer(model);
    tok.setNormalizer(t.bertNormalizer(opts));
    tok.setPreTokenizer(t.bertPreTokenizer());
    tok.setDecoder(t.wordPieceDecoder('##', true));
    return tok;
  };
  const configs = {
    uncased: {},
    cased: { lowercase: false, stripAccents: false },
    lower_keep_accents: { lowercase: true, stripAccents: false },
    raw: { cleanText: false, handleChineseChars: false, lowercase: false, stripAccents: false },
  };
  for (const [name, opts] of Object.entries(configs)) {
    const tok = await mk(opts);
    const lines = [];
    for (const c of cases) {
      const e = await tok.encode(c, null, { addSpecialTokens: false });
      lines.push(JSON.stringify(c) + '\t' + e.getIds().join(' '));
    }
    fs.writeFileSync(`${dir}/cases-${name}.tsv`, lines.join('\n') + '\n');
    if (name === 'uncased') {
      const inv = [];
      for (const h of invalid) {
        const s = Buffer.from(h, 'hex').toString('utf8');
        const e = await tok.encode(s, null, { addSpecialTokens: false });
        inv.push(h + '\t' + e.getIds().join(' '));
      }
      fs.writeFileSync(`${dir}/invalid.tsv`, inv.join('\n') + '\n');
      // decode: ids of each case (and of the golden file) back to text
      const dec = [];
      const gold = fs.readFileSync(`${dir}/bert-uncased.tsv`, 'utf8').split('\n').filter(x => x);
      const all = cases.concat(gold.map(l => JSON.parse(l.split('\t')[0])));
      for (const c of all) {
        const e = await tok.encode(c, null, { addSpecialTokens: false });
        const ids = e.getIds();
        dec.push(ids.join(' ') + '\t' + JSON.stringify(await tok.decode(ids, false)));
      }
      // and the decoder's cleanup on hand-picked piece sequences
      const d = t.wordPieceDecoder('##', true);
      const seqs = [['hello', '.', 'world', '?'], ['it', '\'', 's'], ['don', '\'', 't'],
        ['a', '\'', 'b'], ['##ab', 'c'], ['do', 'not'], ['i', 'do not'], ['x', 'n\'t'],
        ['x', '\'m'], ['x', '\'s'], ['x', '\'ve'], ['x', '\'re'], ['a', ' ,'], ['a', ' .b'],
        ['a', '!', '!', '?'], ['a', '##', '##b'], ['a', '\' \''], ['a', 'b ,c .d']];
      const dl = seqs.map(s => JSON.stringify(s) + '\t' + JSON.stringify(d.decode(s)));
      fs.writeFileSync(`${dir}/decoder.tsv`, dl.join('\n') + '\n');
      fs.writeFileSync(`${dir}/decode.tsv`, dec.join('\n') + '\n');
    }
  }
}
main().catch(e => { console.error(e); process.exit(1); });
