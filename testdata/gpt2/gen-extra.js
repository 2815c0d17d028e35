// Extra GPT-2 golden cases: each line JSON string \t ids (tiktoken gpt2, no specials).
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
const cases = [
  "Hello world", "He's", "HE'S", "She'S here", "it'll", "IT'LL", "we've'd'm're't", "'s", "'", "''s", "x's's", "'re'", "don't DON'T Don'T",
  "a  b", "a   b", "a \tb", "a\t\tb", "a\n\n\nb", "end   ", "end\n", "end \n \n", "   ", "\t", " ", "\n", "\r\n", "a\r\nb", "  leading", "\u00a0nbsp\u00a0 word", "a\u2003b", "a\u3000b\u3000", "x\u0085y", "x\u2028y\u2029z", "a\u200bb", "x\u180ey", "a\u000bb\u000cc",
  "123", " 123", "1234567890", "3.14159", "1,000,000", "\u0661\u0662\u0663", "\u2160\u2161", "\u00bd and \u00b2", "abc123def", "v2.0-beta", "x1 y22 z333",
  "!!!", " !!!", "...", "?!?", "(a)", "[[x]]", "a+b=c", "#hashtag @user", "http://example.com/a?b=c&d=e", "$100", "\u20ac50", "50%", "a--b", "\"quoted\"", "`code`", "~/path/to/file.c",
  "caf\u00e9", "cafe\u0301", "na\u00efve r\u00e9sum\u00e9", "\u00c5ngstr\u00f6m", "stra\u00dfe", "\u0130stanbul", "\u0131\u0130",
  "\u4f60\u597d\u4e16\u754c", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u0627\u0644\u0633\u0644\u0627\u0645 \u0639\u0644\u064a\u0643\u0645", "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0393\u03b5\u03b9\u03ac",
  "\ud83d\ude00", "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66", "\ud83d\udc4d\ud83c\udffd", "\ud83c\uddeb\ud83c\uddf7", "I \u2764\ufe0f NY", "emoji\ud83d\ude00text", " \ud83d\ude00\ud83d\ude00", "\u2603 snow",
  "mixed English \u4e2d\u6587 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 123 !!", "\ufffd", "a\ufffdb", "\u0000", "a\u0000b", "\u0007bell", "\u007f", "tab\tsep\tvalues",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "Pneumonoultramicroscopicsilicovolcanoconiosis", "supercalifragilisticexpialidocious".repeat(10),
  "=".repeat(300), "-".repeat(77), " ".repeat(50) + "x", "\n".repeat(20), "ab ".repeat(100),
  "<|endoftext|>", "a<|endoftext|>b", "\u0301\u0301x", "x\u0301\u0301", "\u1f00\u1f01", "\u01c5", "\u02b0", "\u00aa\u00ba",
  "The quick brown fox jumps over the lazy dog. It's 5 o'clock; isn't it?",
  "    def foo(x):\n        return x * 2\n",
  "Line one.\nLine two.\n\nParagraph\ttabbed   spaced   \n",
  "a\u001c\u001cb", "a \u001c b", "a\u001c \u001fb", "x\u00a0\u00a0y", "x \u0085 y", "a\u200e\u200eb", "\ufeffhi", "A\u0300\u0300 b", "x\u2028\u2028",
  "\ud800\udc00", "\ud83e\udd16 robots \ud83e\udd16", "\u{1F9D1}\u200d\u{1F4BB}", "\u{10FFFD}", "\u{E0001}",
];
const fs = require("fs");
let out = "";
for (const c of cases) {
  const ids = enc.encode(c, [], []);
  out += JSON.stringify(c) + "\t" + Array.from(ids).join(" ") + "\n";
}
fs.writeFileSync(process.argv[2], out);
console.log(cases.length);
