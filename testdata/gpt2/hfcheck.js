// Encodes each line of a file with HuggingFace tokenizers (npm "tokenizers")
// and prints the ids, one line per line; "decode" as a third argument also
// checks that HF decodes the ids back to the line (for tokenizers whose
// vocabulary covers the text).  Used by lib/text/hf_compat_test.sh.
// usage: node hfcheck.js tokenizer.json lines.txt [decode]
const { Tokenizer } = require("tokenizers");
const fs = require("fs");
const tok = Tokenizer.fromFile(process.argv[2]);
const lines = fs.readFileSync(process.argv[3], "utf8").split("\n");
if (lines[lines.length - 1] === "") lines.pop();
(async () => {
  const out = [];
  let bad = 0;
  for (const l of lines) {
    const e = await tok.encode(l, null, { addSpecialTokens: false });
    const ids = e.getIds();
    if (process.argv[4] === "decode") {
      const d = await tok.decode(ids, false);
      if (d !== l) {
        console.error("HF decode differs: " + JSON.stringify(l) + " -> " + JSON.stringify(d));
        bad = 1;
      }
    }
    out.push(ids.join(" "));
  }
  fs.writeSync(1, out.join("\n") + "\n");
  process.exitCode = bad;
})();
