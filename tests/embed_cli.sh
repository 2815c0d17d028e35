#!/bin/sh
# tfm-embed end to end: options and their errors, output formats, input
# order across chunks and batches, padding that never counts, pairs,
# similarity, attention maps, sentence-transformers folder defaults,
# HuggingFace GPT-2 folders in tfm-embed, tfm-generate and tfm-eval, and bad
# input (line numbers, exit codes, no partial output).
set -eu
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
expect_msg() { grep -qF -- "$1" err || { cat err >&2; fail "expected message: $1"; }; }
# max |a - b| over two TSV files of numbers
maxdiff() {
    paste "$1" "$2" | awk -F'\t' '{ n = NF / 2; for (i = 1; i <= n; i++) {
        d = $i - $(i + n); if (d < 0) d = -d; if (d > m) m = d } } END { printf "%.3g\n", m + 0 }'
}
E="tfm-embed -q --threads 1"
MK="$TFM_BUILDDIR/tests/mkmodel"

cat >corpus.txt <<'TXT'
the cat sat on the mat
the dog ate the bone
a bird sang in the tree
TXT
# a BERT-shaped encoder (WordPiece, segments) and a GPT-shaped decoder
# (repeated, so that WordPiece learns the whole words)
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do cat corpus.txt; done >c20.txt
tfm-tokenize train -q --model wordpiece --vocab-size 200 -o wp.json c20.txt
"$MK" bert.st --tokenizer wp.json --layers 4 --heads 2 --embd 16 --context 24 --scale 2 \
    --set model.kind=encoder --set model.segments=2 --set model.norm=post \
    --set model.emb_norm=true
"$MK" gpt.st --text corpus.txt --layers 2 --heads 2 --embd 16 --context 40 --scale 2

# --help, --version, usage errors (2)
expect_exit 0 tfm-embed --help
grep -q -- "--layer-weights" out || fail "--help does not list --layer-weights"
# --help names the offsets file the code writes (v.npy: v.offsets.npy)
grep -q "v.npy gives v.offsets.npy" out || fail "--help: the offsets file's name"
expect_exit 0 tfm-embed --version
expect_exit 2 tfm-embed </dev/null
expect_msg "tfm-embed: no model given"
expect_exit 2 $E -m bert.st --pool median </dev/null
expect_msg "--pool 'median': expected cls, mean, max, mean-sqrt-len, last or none, or a comma list"
expect_exit 2 $E -m bert.st --pool mean,none </dev/null
expect_msg "--pool 'mean,none': none (every token's vector) cannot be in a list"
expect_exit 2 $E -m bert.st --pool max,max </dev/null
expect_msg "--pool 'max,max': max twice"
expect_exit 2 $E -m bert.st --format csv </dev/null
# a --layers that is no layer spec is a usage error, as a bad --layer-weights is
expect_exit 2 $E -m bert.st --layers foo </dev/null
expect_msg "tfm-embed: --layers 'foo': expected a layer number or first, last"
expect_exit 2 $E -m bert.st --layer-weights 1,a </dev/null
expect_exit 2 $E -m bert.st --layers 1 --layer-weights 1,2 </dev/null
expect_msg "exclude each other"
expect_exit 2 $E -m bert.st --gamma 2 </dev/null
expect_exit 2 $E -m bert.st --similarity --matrix </dev/null
expect_exit 2 $E -m bert.st --attention-head 0 </dev/null
expect_exit 2 $E -m bert.st --truncate tail </dev/null
expect_exit 2 $E -m bert.st --attention 'a%s.npy' </dev/null
expect_exit 2 $E -m bert.st --pool none </dev/null
expect_msg "give -o FILE.npy"
# options the model cannot honour (1)
expect_exit 1 $E -m bert.st --layers 5 </dev/null
expect_msg "tfm-embed: bert.st: --layers 5 is out of range: the model has layers 0 to 4 (-1 to -5 from the top)"
expect_exit 1 $E -m bert.st --layers -6 </dev/null
expect_exit 1 $E -m gpt.st --layers sum-last-4 </dev/null
expect_msg "the model has only 2 blocks"
expect_exit 1 $E -m bert.st --layer-weights 1,2,3 </dev/null
expect_msg "tfm-embed: bert.st: --layer-weights: 3 given, the model has 5 layers"
expect_exit 1 $E -m bert.st --attention a.npy --attention-layer 7 </dev/null
expect_exit 1 $E -m bert.st --max-len 25 </dev/null
expect_msg "longer than the model's context (24 learned positions)"
expect_exit 1 $E -m missing.st </dev/null

# formats agree: npy header and shape, tsv, jsonl, raw
printf 'the cat sat\nthe dog\na bird sang in the tree\n' >in.txt
$E -m bert.st -o v.npy <in.txt
head -c 128 v.npy | grep -q "'shape': (3, 16)" || fail "npy shape"
$E -m bert.st -f tsv <in.txt >v.tsv
[ "$(wc -l <v.tsv)" -eq 3 ] && [ "$(head -1 v.tsv | awk -F'\t' '{print NF}')" -eq 16 ] ||
    fail "tsv is not 3 x 16"
$E -m bert.st -f raw <in.txt >v.raw
[ "$(wc -c <v.raw)" -eq $((3 * 16 * 4)) ] || fail "raw size"
tail -c $((3 * 16 * 4)) v.npy | cmp -s - v.raw || fail "npy data differs from raw"
$E -m bert.st -o v.jsonl <in.txt
[ "$(grep -c '^{"embedding":\[' v.jsonl)" -eq 3 ] || fail "jsonl"
$E -m bert.st --layers concat-last-4 -f tsv <in.txt | head -1 | awk -F'\t' '{exit NF != 64}' ||
    fail "concat-last-4 is not 4 x 16 wide"
# per-token vectors: [T_total, D] plus offsets [N + 1]
$E -m bert.st --pool none -o tok.npy <in.txt
head -c 128 tok.npy | grep -q "'shape': (17, 16)" || fail "per-token npy shape"
head -c 128 tok.offsets.npy | grep -q "'descr': '<i8'.*'shape': (4,)" ||
    fail "offsets npy"
$E -m bert.st --pool none -f jsonl <in.txt >tok.jsonl
grep -q '"token":"\[CLS\]","id":[0-9]*,"start":-1,"end":-1' tok.jsonl || fail "jsonl [CLS]"
grep -q '"token":"dog","id":[0-9]*,"start":4,"end":7' tok.jsonl || fail "jsonl byte offsets"
# offsets through accent stripping and lowercasing: "Th\303\251" gives "the"
# over its 4 bytes (the pieces used to be searched for in the raw text)
printf 'Th\303\251 dog\n' | $E -m bert.st --pool none -f jsonl >acc.jsonl
grep -q '"token":"the","id":[0-9]*,"start":0,"end":4' acc.jsonl ||
    fail "offsets after accent stripping: $(cut -c 1-300 acc.jsonl)"
grep -q '"token":"dog","id":[0-9]*,"start":5,"end":8' acc.jsonl || fail "offsets after the accent"

# --normalize: unit vectors
$E -m bert.st --normalize -f tsv <in.txt | awk -F'\t' '{ s = 0; for (i = 1; i <= NF; i++)
    s += $i * $i; if (s < 0.9999 || s > 1.0001) exit 1 }' || fail "--normalize"

# order: tiny chunks and batches (sorted by length inside) give the input order
awk 'BEGIN { for (i = 1; i <= 23; i++) { s = ""; for (j = 0; j < (i * 7) % 11 + 1; j++)
    s = s (j ? " " : "") (j % 2 ? "cat" : "the"); print s } }' >many.txt
$E -m bert.st -f tsv <many.txt >all.tsv
$E -m bert.st -f tsv --chunk 3 --max-tokens 9 <many.txt >small.tsv
cmp -s all.tsv small.tsv ||
    fail "chunking or batching changed the vectors ($(maxdiff all.tsv small.tsv))"
# padding never counts: each line alone gives its vector in the batch, to
# the bit (the weights are packed once: a row's product never depends on
# the rows with it)
i=0
while IFS= read -r line; do
    i=$((i + 1))
    printf '%s\n' "$line" | $E -m bert.st -f tsv >alone.tsv
    sed -n "${i}p" all.tsv >inbatch.tsv
    cmp -s alone.tsv inbatch.tsv ||
        fail "line $i alone differs by $(maxdiff alone.tsv inbatch.tsv) from the batch"
done <many.txt
# the same for a decoder (causal), with last-token and mean pooling
for pool in last mean; do
    $E -m gpt.st --pool $pool -f tsv <many.txt >g.tsv
    sed -n 5p many.txt | $E -m gpt.st --pool $pool -f tsv >g1.tsv
    sed -n 5p g.tsv >g5.tsv
    cmp -s g1.tsv g5.tsv || fail "decoder --pool $pool: $(maxdiff g1.tsv g5.tsv)"
done
# threads do not change the vectors beyond rounding
tfm-embed -q --threads 2 -m bert.st -f tsv <many.txt >t2.tsv
awk "BEGIN { exit !($(maxdiff all.tsv t2.tsv) < 1e-5) }" || fail "2 threads differ"

# pairs: segment B changes the vector; --similarity
printf 'the cat\tthe dog\n' | $E -m bert.st -f tsv >pair.tsv
printf 'the cat\n' | $E -m bert.st -f tsv >single.tsv
awk "BEGIN { exit !($(maxdiff pair.tsv single.tsv) > 1e-3) }" || fail "pair = single"
printf 'the cat\tthe cat\nthe cat\tthe dog\n' | $E -m bert.st --similarity >sim
[ "$(sed -n 1p sim)" = 1 ] || [ "$(awk 'NR == 1 { print ($1 > 0.99999) }' sim)" = 1 ] ||
    fail "cosine of a line with itself: $(sed -n 1p sim)"
awk 'NR == 2 { exit !($1 < 0.99999 && $1 > -1) }' sim || fail "second cosine: $(cat sim)"
expect_exit 1 sh -c "printf 'no tab\n' | $E -m bert.st --similarity"
expect_msg "tfm-embed: <stdin>:1: --similarity compares"
$E -m bert.st --matrix <in.txt >mat
awk -F'\t' '{ if ($NR < 0.99999) exit 1; a[NR] = $0 } END { if (NR != 3) exit 1 }' mat ||
    fail "--matrix diagonal"
$E -m bert.st --matrix -o mat.npy <in.txt
head -c 128 mat.npy | grep -q "'shape': (3, 3)" || fail "--matrix npy"

# empty lines: [CLS] [SEP] for BERT; an error for a model without special
# tokens; --skip-empty skips them
printf 'the cat\n\nthe dog\n' | $E -m bert.st -f tsv >e.tsv
[ "$(wc -l <e.tsv)" -eq 3 ] || fail "BERT empty line"
expect_exit 1 sh -c "printf 'the cat\n\nthe dog\n' | $E -m gpt.st -o e.npy"
expect_msg "tfm-embed: <stdin>:2: an empty input gives no tokens"
[ ! -e e.npy ] || fail "partial output after an error"
printf 'the cat\n\nthe dog\n' | tfm-embed --threads 1 -m gpt.st --skip-empty -f tsv >e.tsv 2>err
[ "$(wc -l <e.tsv)" -eq 2 ] || fail "--skip-empty"
expect_msg "1 empty line skipped"

# bad input: line numbers, exit 1, no output file
printf 'fine\nalso fine\nbad \377 byte\n' >bad.txt
expect_exit 1 $E -m bert.st -o bad.npy bad.txt
expect_msg "tfm-embed: bad.txt:3: invalid UTF-8"
[ ! -e bad.npy ] || fail "output file left after invalid UTF-8"
ls | grep -q 'bad.npy.tmp' && fail "temporary file left"
# a model with NaN weights (a diverged run): an error naming the input
# line, no output file, no NaN printed, no cosine of 0 for NaN vectors
"$MK" nan.st --tokenizer wp.json --layers 1 --heads 2 --embd 16 --context 24 \
    --set model.kind=encoder --nan
for f in nan.npy nan.tsv nan.jsonl; do
    expect_exit 1 $E -m nan.st -o $f corpus.txt
    expect_msg "tfm-embed: corpus.txt:1: the model produced NaN"
    [ ! -e $f ] || fail "output file $f left by a NaN model"
done
ls | grep -q 'nan\..*tmp' && fail "temporary file left by a NaN model"
printf 'the cat\tthe dog\n' | { expect_exit 1 $E -m nan.st --similarity; }
expect_msg "tfm-embed: <stdin>:1: the model produced NaN"
[ -s out ] && fail "--similarity printed $(cat out) for NaN vectors"
printf 'the cat\nthe dog\n' | { expect_exit 1 $E -m nan.st --matrix; }
[ -s out ] && fail "--matrix printed $(cat out) for NaN vectors"
# --q8-gemm on or off is about q8_0 files: on a float32 one it says so
printf 'the cat\n' | { expect_exit 0 tfm-embed --threads 1 -m bert.st --q8-gemm on -f tsv; }
expect_msg "tfm-embed: warning: --q8-gemm on does nothing: bert.st has no 8-bit (q8_0) matrices"
tfm-train -q --convert q8_0 bert.st -o bert-q8.st
printf 'the cat\n' | { expect_exit 0 tfm-embed --threads 1 -m bert-q8.st --q8-gemm on -f tsv; }
grep -q "q8-gemm" err && fail "--q8-gemm on warned on a q8_0 file: $(cat err)"
long=$(awk 'BEGIN { for (i = 0; i < 40; i++) printf "the cat "; print "" }')
printf 'the cat\n%s\n' "$long" >long.txt
expect_exit 1 $E -m bert.st --truncate error -o long.npy long.txt
expect_msg "tfm-embed: long.txt:2: 82 tokens, more than the 24 allowed"
[ ! -e long.npy ] || fail "output file left after --truncate error"
tfm-embed --threads 1 -m bert.st -f tsv long.txt >long.tsv 2>err
expect_msg "1 input cut to 24 tokens"
$E -m bert.st --max-len 6 -f tsv long.txt >l6.tsv
printf 'the cat the cat\n' | $E -m bert.st -f tsv >l4.tsv
sed -n 2p l6.tsv >l6b.tsv
awk "BEGIN { exit !($(maxdiff l6b.tsv l4.tsv) < 1e-5) }" ||
    fail "--max-len 6 is not [CLS] + the first 4 tokens + [SEP]"
# a pair is cut longest-first: the long A gives up its tail, B stays whole
printf '%s\tthe dog\n' "$long" | $E -m bert.st --max-len 8 -f tsv >p8.tsv
printf 'the cat the\tthe dog\n' | $E -m bert.st -f tsv >p8want.tsv
awk "BEGIN { exit !($(maxdiff p8.tsv p8want.tsv) < 1e-5) }" ||
    fail "--max-len 8 on a pair is not [CLS] + 3 of A + [SEP] + B + [SEP]"

# attention: [layers, heads, T, T] rows summing to 1; one file per line with %d
printf 'the cat sat\n' | $E -m bert.st --attention att.npy -o /dev/null
head -c 128 att.npy | grep -q "'shape': (4, 2, 5, 5)" || fail "attention shape"
printf 'the cat sat\n' | $E -m bert.st --attention att1.npy --attention-layer -1 \
    --attention-head 1 -o /dev/null
head -c 128 att1.npy | grep -q "'shape': (1, 1, 5, 5)" || fail "one layer and head"
tail -c $((5 * 5 * 4)) att.npy >a.last; tail -c $((5 * 5 * 4)) att1.npy >a1.last
cmp -s a.last a1.last || fail "--attention-layer -1 --attention-head 1 is not the last map"
printf 'the cat\nthe dog sat\n' | $E -m bert.st --attention 'att-%d.npy' -o /dev/null
head -c 128 att-2.npy | grep -q "'shape': (4, 2, 5, 5)" || fail "per-line attention files"
expect_exit 1 sh -c "printf 'the cat\nthe dog\n' | $E -m bert.st --attention one.npy -o /dev/null"
expect_msg "<stdin>:2: a second input"
printf 'the cat sat on the mat\n' | $E -m bert.st --attention-svg att.svg -o /dev/null
grep -q '^<svg ' att.svg && grep -q '</svg>' att.svg || fail "svg"
grep -q 'layer 4, head 0' att.svg || fail "svg title"
[ "$(grep -c '>\[CLS\]</text>' att.svg)" -eq 2 ] || fail "svg token labels on both axes"

# sentence-transformers folder: its pooling and Normalize are the defaults
mkdir st && cp bert.st st/model.safetensors && mkdir st/1_Pooling
cat >st/modules.json <<'JSON'
[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
 {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
JSON
echo '{"word_embedding_dimension": 16, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}' \
    >st/1_Pooling/config.json
$E -m st -f tsv <in.txt >st.tsv
$E -m bert.st --pool cls --normalize -f tsv <in.txt >cls.tsv
cmp -s st.tsv cls.tsv || fail "sentence-transformers defaults (cls, normalize)"
$E -m st --pool max -f tsv <in.txt >stmax.tsv
$E -m bert.st --pool max --normalize -f tsv <in.txt >max.tsv
cmp -s stmax.tsv max.tsv || fail "--pool overrides the folder's pooling"
# several modes: side by side in sentence-transformers' order (max before
# mean, whatever the order given), each half the single mode's vector
$E -m bert.st --pool max -f tsv <in.txt >max1.tsv
$E -m bert.st --pool mean -f tsv <in.txt >mean1.tsv
$E -m bert.st --pool mean,max -f tsv <in.txt >mm.tsv
head -1 mm.tsv | awk -F'\t' '{exit NF != 32}' || fail "--pool mean,max is not 2 x 16 wide"
cut -f 1-16 mm.tsv | cmp -s - max1.tsv || fail "--pool mean,max: the first half is not max"
cut -f 17-32 mm.tsv | cmp -s - mean1.tsv || fail "--pool mean,max: the second half is not mean"
tfm-embed --threads 1 -m bert.st --pool max,mean -o mm.npy <in.txt 2>err
head -c 128 mm.npy | grep -q "'shape': (3, 32)" || fail "--pool max,mean npy shape"
expect_msg "32-wide vectors (layers last, pool max,mean)"
# mean-sqrt-len: mean x sqrt(T) (T = 5: [CLS] the cat sat [SEP])
printf 'the cat sat\n' | $E -m bert.st --pool mean-sqrt-len -f tsv >msl.tsv
head -1 mean1.tsv >mean1a.tsv
awk -F'\t' 'NR == FNR { for (i = 1; i <= NF; i++) m[i] = $i; next }
    { for (i = 1; i <= NF; i++) { d = $i - m[i] * sqrt(5); if (d < 0) d = -d
      if (d > 1e-5 * (1 + (m[i] < 0 ? -m[i] : m[i]) * 3)) exit 1 } }' mean1a.tsv msl.tsv ||
    fail "--pool mean-sqrt-len is not mean x sqrt(5)"
# a folder whose Pooling sets mean and max: 2 x 16, max then mean; with its
# Normalize module, unit length over the whole (normalized after the
# concatenation, as sentence-transformers does)
mkdir st2 && cp bert.st st2/model.safetensors && mkdir st2/1_Pooling
cat >st2/modules.json <<'JSON'
[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
JSON
echo '{"word_embedding_dimension": 16, "pooling_mode_cls_token": false,
 "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true,
 "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
 "pooling_mode_lasttoken": false, "include_prompt": true}' >st2/1_Pooling/config.json
$E -m st2 -f tsv <in.txt >st2.tsv
head -1 st2.tsv | awk -F'\t' '{exit NF != 32}' || fail "folder with mean and max: not 2 x 16 wide"
cut -f 1-16 st2.tsv | cmp -s - max1.tsv || fail "folder with mean and max: the first half is not max"
cut -f 17-32 st2.tsv | cmp -s - mean1.tsv || fail "folder with mean and max: the second half is not mean"
cp st2/1_Pooling/config.json st/1_Pooling/config.json
$E -m st -f tsv <in.txt >st2n.tsv
$E -m bert.st --pool mean,max --normalize -f tsv <in.txt >mmn.tsv
cmp -s st2n.tsv mmn.tsv || fail "folder with mean, max and Normalize"
awk -F'\t' '{ s = 0; for (i = 1; i <= NF; i++) s += $i * $i; if (s < 0.9999 || s > 1.0001) exit 1 }' \
    st2n.tsv || fail "Normalize after the concatenation"
# a mode tfm does not have is an error naming its key, never ignored
sed 's/"pooling_mode_weightedmean_tokens": false/"pooling_mode_weightedmean_tokens": true/' \
    st2/1_Pooling/config.json >wm.json && mv wm.json st2/1_Pooling/config.json
expect_exit 1 $E -m st2 -o wm.npy <in.txt
expect_msg "st2/1_Pooling/config.json:3:"
expect_msg "pooling_mode_weightedmean_tokens is set: tfm has no such pooling"
[ ! -e wm.npy ] || fail "output after an unsupported pooling mode"
echo '{"pooling_mode_mean_sqrt_len_tokens": true}' >st2/1_Pooling/config.json
$E -m st2 -f tsv <in.txt >st2msl.tsv
$E -m bert.st --pool mean-sqrt-len -f tsv <in.txt >msl3.tsv
cmp -s st2msl.tsv msl3.tsv || fail "folder with pooling_mode_mean_sqrt_len_tokens"

# a HuggingFace GPT-2 folder (config.json, model.safetensors, vocab.json +
# merges.txt): tfm-embed, tfm-generate and tfm-eval read it with its tokenizer
mkdir gpt2
"$MK" gpt2/model.safetensors --hf --layers 2 --heads 2 --embd 16 --context 32 --vocab 50257 --scale 3
cp "$TFM_SRCDIR/testdata/gpt2/encoder.json" gpt2/vocab.json
cp "$TFM_SRCDIR/testdata/gpt2/vocab.bpe" gpt2/merges.txt
echo '{"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2, "n_positions": 32,
 "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "vocab_size": 50257}' >gpt2/config.json
printf 'Hello, world!\n' | $E -m gpt2 --pool none -f jsonl >g2.jsonl
# HuggingFace's own files say "format": "pt" and carry no checksum: no warning
/usr/bin/python3 - gpt2/model.safetensors <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"] = {"format": "pt"}
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
printf 'Hello\n' | tfm-embed --threads 1 -m gpt2/model.safetensors -f tsv >/dev/null 2>hf.err
! grep -q checksum hf.err || fail "an HF checkpoint is warned about: $(cat hf.err)"
grep -q '"token":"Hello","id":15496,"start":0,"end":5' g2.jsonl || fail "GPT-2 folder tokens"
grep -q '"token":" world","id":995,"start":6,"end":12' g2.jsonl || fail "GPT-2 byte offsets"
tfm-generate -q --threads 1 -m gpt2 --greedy -n 3 "Hello" >gen.txt || fail "tfm-generate on a GPT-2 folder"
[ -s gen.txt ] || fail "tfm-generate printed nothing"
printf 'Hello, world! Hello again.\n' | tfm-eval perplexity -q --threads 1 -m gpt2 --context 8 >ppl.tsv ||
    fail "tfm-eval on a GPT-2 folder"
# config.json's dropout rates (GPT2Config's resid_pdrop, attn_pdrop,
# embd_pdrop) and forced_eos_token_id are read; the forced end-of-text is
# the last token a generation may have (the -n 3rd), after greedy's first two
tfm-generate -q --threads 1 -m gpt2 --greedy --json -n 3 "Hello" >free.json ||
    fail "tfm-generate --json on a GPT-2 folder"
sed -i 's/"vocab_size": 50257}/"vocab_size": 50257, "resid_pdrop": 0.11, "attn_pdrop": 0.05, "embd_pdrop": 0.09, "forced_eos_token_id": 50256}/' gpt2/config.json
tfm-eval info -m gpt2 >g2info.tsv || fail "tfm-eval info on a GPT-2 folder"
for kv in "dropout	0.11" "attn_dropout	0.05" "emb_dropout	0.09" "ffn_dropout	0" \
          "final_dropout	0" "forced_eos	50256"; do
    grep -qx "$kv" g2info.tsv || { cat g2info.tsv >&2; fail "GPT-2 folder: no '$kv' in tfm-eval info"; }
done
tfm-generate -q --threads 1 -m gpt2 --greedy --json -n 3 "Hello" >forced.json ||
    fail "tfm-generate with forced_eos_token_id"
/usr/bin/python3 - free.json forced.json <<'PY' || fail "GPT-2 folder: forced_eos_token_id"
import json, sys
free, forced = (json.load(open(p)) for p in sys.argv[1:])
assert free["finish_reason"] == "length" and 50256 not in free["ids"], free
assert forced["ids"] == free["ids"][:2] + [50256], (free, forced)
assert forced["finish_reason"] == "eos", forced
PY
echo ok
