#!/bin/sh
# tokenizer.json files written by tfm load in HuggingFace tokenizers (npm
# "tokenizers") and give the same ids as tfm on the same lines: byte-level
# BPE, BPE with --lowercase, the char model (BPE without merges + Fuse) and
# WordPiece (uncased and cased), Unigram models trained by tfm (plain, and
# T5-like with byte fallback, sentinels and user symbols), and SentencePiece
# Unigram models written by spm_train and converted by tfm-tokenize convert
# (with and without byte fallback, and the settings that change
# normalization: see spm_hf), their decoding and add_special_tokens.  HF
# always splits special-token text, so tfm encodes with --split-special.
# Skipped (77) unless node can load "tokenizers": set TFM_NODE_PATH to the
# node_modules directory holding it (e.g. after `npm install tokenizers`);
# by default the one scripts/bench/tokenize installs is used if present.
set -u
src=${TFM_SRCDIR:-.}
command -v node >/dev/null 2>&1 || { echo "node not found: skipped"; exit 77; }
bench_modules=${HOME:-/root}/.cache/tfm-bench/node/node_modules
[ -d "$bench_modules" ] || bench_modules=
NODE_PATH=${TFM_NODE_PATH:-${NODE_PATH:-$bench_modules}}
export NODE_PATH
node -e 'require("tokenizers")' >/dev/null 2>&1 ||
    { echo "npm tokenizers not found (set TFM_NODE_PATH): skipped"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The lines: the corpus and the golden strings without newlines.
cp "$src/testdata/gpt2/corpus.txt" "$tmp/lines.txt"
sed 's/\t.*//' "$src/testdata/gpt2/extra.tsv" "$src/testdata/gpt2/gpt2.tsv" |
    node -e '
      const ls = require("fs").readFileSync(0, "utf8").split("\n").filter(Boolean)
        .map(JSON.parse).filter(s => s && !/[\n\r]/.test(s));
      process.stdout.write(ls.join("\n") + "\n");' >> "$tmp/lines.txt" || exit 1
fail=0
check() { # name, train options...
    name=$1; shift
    tfm-tokenize train -q "$@" -o "$tmp/$name.json" "$src/testdata/gpt2/corpus.txt" || { fail=1; return; }
    tfm-tokenize encode -q --split-special -t "$tmp/$name.json" --format ids < "$tmp/lines.txt" > "$tmp/$name.tfm" || { fail=1; return; }
    node "$src/testdata/gpt2/hfcheck.js" "$tmp/$name.json" "$tmp/lines.txt" > "$tmp/$name.hf" || { fail=1; return; }
    if cmp -s "$tmp/$name.tfm" "$tmp/$name.hf"; then
        echo "$name: HF gives the same ids on $(wc -l < "$tmp/lines.txt") lines"
    else
        echo "$name: ids differ from HF:"; diff "$tmp/$name.hf" "$tmp/$name.tfm" | head -5; fail=1
    fi
}
check bpe --model bpe --vocab-size 600
check bpe_lower --model bpe --vocab-size 600 --lowercase
check char --model char
check wordpiece --model wordpiece --vocab-size 600
check wordpiece_cased --model wordpiece --vocab-size 600 --no-lowercase
# Unigram models trained by tfm (nmt_nfkc written as Replace + NFKC)
check unigram_trained --model unigram --vocab-size 600
check unigram_trained_t5 --model unigram --vocab-size 700 --byte-fallback --extra-ids 10 \
    --user-symbols '<sep>,quick' --special '<pad>' --special '</s>' --special '<unk>'
# SentencePiece Unigram: models spm_train writes, converted by tfm (when
# Debian's sentencepiece is installed)
uni() { # name, spm_train options...
    name=$1; shift
    spm_train --input="$src/testdata/gpt2/corpus.txt" --model_prefix="$tmp/$name" \
        --num_threads=1 --minloglevel=2 --hard_vocab_limit=false "$@" >/dev/null 2>&1 ||
        { echo "$name: spm_train failed"; fail=1; return; }
    tfm-tokenize convert -t "$tmp/$name.model" -o "$tmp/$name.json" || { fail=1; return; }
    tfm-tokenize encode -q --split-special -t "$tmp/$name.json" < "$tmp/lines.txt" > "$tmp/$name.tfm" || { fail=1; return; }
    tfm-tokenize encode -q -t "$tmp/$name.model" < "$tmp/lines.txt" > "$tmp/$name.model.tfm" || { fail=1; return; }
    node "$src/testdata/gpt2/hfcheck.js" "$tmp/$name.json" "$tmp/lines.txt" > "$tmp/$name.hf" || { fail=1; return; }
    # HF's Precompiled normalizer works on grapheme clusters and so departs
    # from sentencepiece on a few (e.g. two combining marks on one letter):
    # tfm follows sentencepiece, so a line where HF differs from tfm counts
    # only if tfm differs from spm_encode too
    spm_encode --model="$tmp/$name.model" --output_format=id < "$tmp/lines.txt" > "$tmp/$name.spm"
    bad=$(paste -d '|' "$tmp/$name.hf" "$tmp/$name.tfm" "$tmp/$name.spm" |
          awk -F'|' '$1 != $2 && $2 != $3 { n++ } END { print n + 0 }')
    hfdev=$(paste -d '|' "$tmp/$name.hf" "$tmp/$name.tfm" | awk -F'|' '$1 != $2 { n++ } END { print n + 0 }')
    if [ "$bad" -eq 0 ] && cmp -s "$tmp/$name.tfm" "$tmp/$name.model.tfm"; then
        echo "$name: HF gives the same ids on $(wc -l < "$tmp/lines.txt") lines" \
             "(except $hfdev where HF departs from spm_encode and tfm does not)"
    else
        echo "$name: ids differ from HF:"; diff "$tmp/$name.hf" "$tmp/$name.tfm" | head -5; fail=1
    fi
}
# Encoding with add_special_tokens, or decoding ids (a line each, special
# tokens skipped), by HF.
cat > "$tmp/hfmore.js" <<'JS'
const { Tokenizer } = require("tokenizers");
const fs = require("fs");
const tok = Tokenizer.fromFile(process.argv[2]);
const lines = fs.readFileSync(process.argv[3], "utf8").split("\n");
if (lines[lines.length - 1] === "") lines.pop();
(async () => {
  const out = [];
  for (const l of lines) {
    if (process.argv[4] === "special")
      out.push((await tok.encode(l, null, { addSpecialTokens: true })).getIds().join(" "));
    else
      out.push(await tok.decode(l === "" ? [] : l.split(" ").map(Number), true));
  }
  fs.writeSync(1, out.join("\n") + "\n");
})();
JS
# spm_train's settings that change normalization (the dummy prefix, extra
# spaces, pieces across spaces, identity with its tabs, user symbols): the
# tokenizer.json that convert writes gives HF spm_encode's ids, on every
# line but those with a combining mark (HF's Precompiled works on grapheme
# clusters); HF decodes spm_encode's ids to spm_decode's text (on lines
# without <unk>, which HF's skip_special_tokens drops); HF's
# add_special_tokens adds what --add-special does (</s>).
nomark='$3 !~ /\xcc[\x80-\xbf]|\xcd[\x80-\xaf]/'
spm_hf() { # name, spm_train options...
    name=$1; shift
    spm_train --input="$src/testdata/gpt2/corpus.txt" --model_prefix="$tmp/$name" \
        --num_threads=1 --minloglevel=2 --hard_vocab_limit=false "$@" >/dev/null 2>&1 ||
        { echo "$name: spm_train failed"; fail=1; return; }
    tfm-tokenize convert -t "$tmp/$name.model" -o "$tmp/$name.json" 2> "$tmp/$name.err" ||
        { cat "$tmp/$name.err"; fail=1; return; }
    [ -s "$tmp/$name.err" ] && { echo "$name: convert warns: $(cat "$tmp/$name.err")"; fail=1; }
    spm_encode --model="$tmp/$name.model" --output_format=id < "$tmp/lines.txt" > "$tmp/$name.spm"
    node "$src/testdata/gpt2/hfcheck.js" "$tmp/$name.json" "$tmp/lines.txt" > "$tmp/$name.hf" ||
        { fail=1; return; }
    bad=$(paste -d '|' "$tmp/$name.hf" "$tmp/$name.spm" "$tmp/lines.txt" |
          awk -F'|' "\$1 != \$2 && $nomark { n++ } END { print n + 0 }")
    unk=$(tfm-tokenize vocab -t "$tmp/$name.model" | awk -F'\t' '$2 == "<unk>" { print $1 }')
    awk -v u="$unk" 'index(" " $0 " ", " " u " ") == 0' "$tmp/$name.spm" > "$tmp/$name.known"
    spm_decode --model="$tmp/$name.model" --input_format=id < "$tmp/$name.known" > "$tmp/$name.spmdec"
    node "$tmp/hfmore.js" "$tmp/$name.json" "$tmp/$name.known" decode > "$tmp/$name.hfdec" ||
        { fail=1; return; }
    baddec=$(diff "$tmp/$name.hfdec" "$tmp/$name.spmdec" | grep -c '^<')
    tfm-tokenize encode -q --add-special -t "$tmp/$name.model" < "$tmp/lines.txt" > "$tmp/$name.tfmsp"
    node "$tmp/hfmore.js" "$tmp/$name.json" "$tmp/lines.txt" special > "$tmp/$name.hfsp" ||
        { fail=1; return; }
    badsp=$(paste -d '|' "$tmp/$name.hfsp" "$tmp/$name.tfmsp" "$tmp/lines.txt" |
            awk -F'|' "\$1 != \$2 && $nomark { n++ } END { print n + 0 }")
    if [ "$bad" -eq 0 ] && [ "$baddec" -eq 0 ] && [ "$badsp" -eq 0 ]; then
        echo "$name: HF gives spm's ids and text, and --add-special's ids"
    else
        echo "$name: HF differs from spm on $bad lines' ids, $baddec decoded lines," \
             "$badsp lines with special tokens:"
        paste -d '|' "$tmp/$name.hf" "$tmp/$name.spm" "$tmp/lines.txt" | awk -F'|' '$1 != $2' | head -3
        diff "$tmp/$name.hfdec" "$tmp/$name.spmdec" | head -4
        fail=1
    fi
}
if command -v spm_train >/dev/null 2>&1; then
    uni unigram --model_type=unigram --vocab_size=500
    uni unigram_bytes --model_type=unigram --vocab_size=700 --byte_fallback=true
    spm_hf spm_bytes --model_type=unigram --vocab_size=700 --byte_fallback=true
    spm_hf spm_user --model_type=unigram --vocab_size=500 --user_defined_symbols='<sep>,the,ing'
    spm_hf spm_no_dummy --model_type=unigram --vocab_size=500 --add_dummy_prefix=false
    spm_hf spm_keep_spaces --model_type=unigram --vocab_size=500 --remove_extra_whitespaces=false \
        --byte_fallback=true
    spm_hf spm_keep_user --model_type=unigram --vocab_size=500 --remove_extra_whitespaces=false \
        --user_defined_symbols='<sep>,the,ing' --allow_whitespace_only_pieces=true
    spm_hf spm_no_split --model_type=unigram --vocab_size=500 --split_by_whitespace=false
    spm_hf spm_identity --model_type=unigram --vocab_size=500 --normalization_rule_name=identity
    spm_hf spm_bpe --model_type=bpe --vocab_size=500 --remove_extra_whitespaces=false \
        --byte_fallback=true
    # sentencepiece BPE's user symbols are HF added tokens: convert says
    # where HF then departs
    spm_train --input="$src/testdata/gpt2/corpus.txt" --model_prefix="$tmp/bpe_user" \
        --num_threads=1 --minloglevel=2 --hard_vocab_limit=false --model_type=bpe \
        --vocab_size=500 --user_defined_symbols='<sep>,the' >/dev/null 2>&1
    tfm-tokenize convert -t "$tmp/bpe_user.model" -o "$tmp/bpe_user.json" 2> "$tmp/bpe_user.err"
    grep -q "warning: HF tokenizers cut user-defined symbols" "$tmp/bpe_user.err" ||
        { echo "bpe_user: convert does not warn: $(cat "$tmp/bpe_user.err")"; fail=1; }
else

    echo "spm_train not found: the Unigram checks skipped"
fi
exit $fail
