#!/bin/sh
# tfm-eval end to end on a random model with a character tokenizer:
# counts that can be checked by hand (tokens, bytes, windows for a stride,
# bits per byte from the summed NLL), results independent of batch and
# threads, tied choices, and clear errors for bad input.
set -eu
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
E="tfm-eval -q --threads 1"
printf 'In the beginning the shell was small, and every program did one thing well.\n' >text.txt
"$TFM_BUILDDIR/tests/mkmodel" m.st --text text.txt --layers 2 --heads 2 --embd 32 \
    --context 16 --scale 3 --seed 4
N=$(wc -c <text.txt)   # 77 characters, one token each

field() { tr ',' '\n' <"$1" | sed -n "s/^\"$2\"://p" | tr -d '}'; }

# End-of-text first: every character is scored; N + 1 tokens in windows of
# 16 with stride 4: 1 + ceil((N + 1 - 16) / 4).
$E perplexity -m m.st --context 16 --stride 4 --json text.txt >p.json
[ "$(field p.json tokens)" -eq "$N" ] || fail "tokens $(field p.json tokens), want $N"
[ "$(field p.json bytes)" -eq "$N" ] || fail "bytes"
[ "$(field p.json chars)" -eq "$N" ] || fail "chars"
[ "$(field p.json windows)" -eq $(( 1 + (N + 1 - 16 + 3) / 4 )) ] || fail "windows $(field p.json windows)"
[ "$(field p.json bos)" = true ] || fail "bos"
# bits per byte = sum of NLL / ln 2 / bytes; perplexity = exp(mean NLL)
awk -v s="$(field p.json nll_sum)" -v b="$(field p.json bits_per_byte)" \
    -v ce="$(field p.json cross_entropy)" -v p="$(field p.json perplexity)" -v n="$N" 'BEGIN {
    d1 = s / log(2) / n - b; d2 = s / n - ce; d3 = exp(ce) / p - 1
    if (d1 * d1 > 1e-12 || d2 * d2 > 1e-12 || d3 * d3 > 1e-12) exit 1 }' ||
    fail "bits per byte or perplexity do not follow from the NLL: $(cat p.json)"
# stride 1: one window per token after the first 16
$E perplexity -m m.st --context 16 --stride 1 --json <text.txt >p1.json
[ "$(field p1.json windows)" -eq $(( 1 + N + 1 - 16 )) ] || fail "stride 1 windows"
# stride = context: windows overlap by one token (each scores 15)
$E perplexity -m m.st --json <text.txt >p16.json
[ "$(field p16.json windows)" -eq $(( 1 + (N + 1 - 16 + 14) / 15 )) ] || fail "stride 16 windows"
[ "$(field p16.json stride)" -eq 16 ] && [ "$(field p16.json context)" -eq 16 ] || fail "defaults"
# without end-of-text: the first character is context only
$E perplexity -m m.st --no-bos --json <text.txt >nb.json
[ "$(field nb.json tokens)" -eq $((N - 1)) ] && [ "$(field nb.json bytes)" -eq $((N - 1)) ] ||
    fail "--no-bos counts: $(cat nb.json)"

# batch size and threads change nothing
$E perplexity -m m.st --stride 3 --batch 1 --json <text.txt >b1.json
tfm-eval -q --threads 2 perplexity -m m.st --stride 3 --batch 7 --json <text.txt >b7.json
[ "$(field b1.json cross_entropy)" = "$(field b7.json cross_entropy)" ] ||
    fail "batch/threads changed the result: $(field b1.json cross_entropy) $(field b7.json cross_entropy)"

# TSV: a header and a line of values
$E perplexity -m m.st text.txt >p.tsv
[ "$(wc -l <p.tsv)" -eq 2 ] && head -n 1 p.tsv | grep -q '^tokens	bytes	chars	cross_entropy	perplexity	bits_per_byte' ||
    fail "TSV: $(cat p.tsv)"
# the human summary and the speed go to stderr
tfm-eval --threads 1 perplexity -m m.st text.txt 2>sum >/dev/null
grep -q 'perplexity [0-9.]*, cross-entropy' sum && grep -q 'tokens/s' sum || fail "summary: $(cat sum)"

# choice: identical endings tie, the first wins: right for label 0, wrong
# for label 1 -> 0.5 +- sqrt(.25 / 1)
cat >items.jsonl <<'JL'
{"context": "In the", "endings": [" shell", " shell"], "label": 0}

{"context": "In the", "endings": [" shell", " shell"], "label": 1}
JL
$E choice -m m.st --json <items.jsonl >c.json
[ "$(field c.json items)" -eq 2 ] && [ "$(field c.json acc)" = 0.5 ] &&
    [ "$(field c.json acc_stderr)" = 0.5 ] && [ "$(field c.json acc_per_byte)" = 0.5 ] ||
    fail "choice ties: $(cat c.json)"
$E choice -m m.st <items.jsonl | head -n 1 | grep -q '^items	acc	acc_stderr	acc_per_token' ||
    fail "choice TSV"

# lastword: counts
printf 'the shell was small\nevery program did one thing well\n' >pass.txt
$E lastword -m m.st --json pass.txt >l.json
[ "$(field l.json passages)" -eq 2 ] || fail "lastword: $(cat l.json)"
# " small" and " well" with the space: 6 + 5 target tokens
[ "$(field l.json target_tokens)" -eq 11 ] || fail "lastword targets: $(cat l.json)"

# A model trained for a second on one repeated sentence knows it: its
# final words, the right endings, and a perplexity near 1 on it.
for i in $(seq 60); do echo "the cat sat on the mat and the dog ate the bone"; done >c.txt
tfm-tokenize train -q --model char -o tok.json c.txt
printf 'model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}\ndata: {text: c.txt, tokenizer: tok.json}\n' >r.yaml
printf 'optim: {lr: 1e-2}\ntrain: {batch_size: 8, max_steps: 300, eval_interval: 300, seed: 1}\n' >>r.yaml
tfm-train -q --threads 1 -c r.yaml -o run
T=run/model.safetensors
printf 'the cat sat on the mat\nthe dog ate the bone\nand the dog ate the\n' |
    $E lastword -m $T --json >lw.json
[ "$(field lw.json correct)" -eq 3 ] || fail "trained lastword: $(cat lw.json)"
printf 'the cat sat on the dog\n\nthe dog ate the bone\n' | $E lastword -m $T --json --items lwi.jsonl >lw0.json
grep -q '^{"line":1,"correct":false,' lwi.jsonl && grep -q '^{"line":3,"correct":true,.*"tokens":5}$' lwi.jsonl ||
    fail "lastword --items: $(cat lwi.jsonl)"
[ "$(field lw0.json correct)" -eq 1 ] || fail "a wrong final word counted right: $(cat lw0.json)"
cat >tc.jsonl <<'JL'
{"context": "the cat sat", "endings": [" on the mat", " xq zzv"], "label": 0}
{"context": "the dog", "endings": [" bone the ate", " ate the bone"], "label": 1}
{"context": "and the", "endings": [" cat", " dog", " mat"], "label": 1}
JL
$E choice -m $T --json --items tci.jsonl tc.jsonl >tc.json
[ "$(wc -l <tci.jsonl)" -eq 3 ] && grep -q '^{"line":2,"label":1,"pred":1,' tci.jsonl &&
    grep -q '"tokens":\[4,4,4\]}$' tci.jsonl || fail "choice --items: $(cat tci.jsonl)"
[ "$(field tc.json acc)" = 1 ] && [ "$(field tc.json acc_per_token)" = 1 ] ||
    fail "trained choice: $(cat tc.json)"
# few-shot (--shots): 0 is no --shots to the byte; the same seed the same
# demonstrations (--items lists them, never the item itself), another seed
# others and other scores; too many, or negative, is an error.
$E choice -m $T tc.jsonl --items s0.items >s0.tsv
$E choice -m $T tc.jsonl --items s0b.items --shots 0 >s0b.tsv
cmp s0.tsv s0b.tsv && cmp s0.items s0b.items || fail "--shots 0 differs from no --shots"
sed 's/"the /"and the /' tc.jsonl >tc6.jsonl; cat tc.jsonl >>tc6.jsonl
$E choice -m $T tc6.jsonl --shots 2 --seed 5 --items s5.items >/dev/null
$E choice -m $T tc6.jsonl --shots 2 --seed 5 --items s5b.items >/dev/null
$E choice -m $T tc6.jsonl --shots 2 --seed 6 --items s6.items >/dev/null
cmp s5.items s5b.items || fail "--shots 2 --seed 5 twice differs"
python3 - s5.items s6.items s0.items <<'PY' || fail "--shots: demonstrations"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == 6 and all(len(x["shots"]) == 2 and len(set(x["shots"])) == 2 and
                           i not in x["shots"] and all(0 <= s < 6 for s in x["shots"])
                           for i, x in enumerate(a)), a
diff = [i for i in range(6) if a[i]["shots"] != b[i]["shots"]]
assert diff, "seeds 5 and 6 chose the same demonstrations"
assert any(a[i]["logprobs"] != b[i]["logprobs"] for i in diff), "the prompt did not change"
assert "shots" not in json.loads(open(sys.argv[3]).readline())
PY
# every other item as a demonstration (2 of them), from a file (all 3);
# the prompts outgrow the context of 32: cut from the left, and said so
tfm-eval --threads 1 choice -m $T tc.jsonl --shots 2 >/dev/null 2>s2.err
grep -q "^tfm-eval: [0-9]* of 3 items with 2 demonstrations cut from the left to the model's context of 32 tokens$" s2.err ||
    fail "no count of cut prompts: $(cat s2.err)"
$E choice -m $T tc.jsonl --shots 3 --shots-from tc6.jsonl >/dev/null
expect_exit 1 $E choice -m $T tc.jsonl --shots 3
grep -qF "tc.jsonl: --shots 3, but only 2 demonstrations are available to each item" err ||
    fail "--shots too large: $(cat err)"
expect_exit 1 $E choice -m $T tc.jsonl --shots 7 --shots-from tc6.jsonl
grep -qF "tc6.jsonl: --shots 7, but only 6 demonstrations are available" err || fail "$(cat err)"
expect_exit 2 $E choice -m $T tc.jsonl --shots -1
expect_exit 2 $E perplexity -m $T c.txt --shots 1
printf 'the cat sat on the mat\nthe dog ate the bone\nand the dog ate the\n' >lw3.txt
$E lastword -m $T lw3.txt --shots 1 --seed 3 --items lws.items >/dev/null
grep -q '"shots":\[[02]\]}$' lws.items || fail "lastword --shots --items: $(cat lws.items)"
expect_exit 1 $E lastword -m $T lw3.txt --shots 3
head -n 3 c.txt | $E perplexity -m $T --json >tp.json
awk -v p="$(field tp.json perplexity)" 'BEGIN { exit !(p >= 1 && p < 1.5) }' ||
    fail "trained perplexity: $(cat tp.json)"

# -t: the tokenizer it was trained with, given separately, changes nothing
$E perplexity -m $T -t tok.json --json <c.txt >tt.json
head -n 60 c.txt | $E perplexity -m $T --json >te.json
[ "$(field tt.json nll_sum)" = "$(field te.json nll_sum)" ] &&
    [ "$(field tt.json tokens)" = "$(field te.json tokens)" ] ||
    fail "-t tok.json differs: $(cat tt.json te.json)"

# A HuggingFace GPT-2 layout file (prefixed names, no metadata) scores as
# the tfm file with the same weights; without a tokenizer it wants one.
MK="$TFM_BUILDDIR/tests/mkmodel"
"$MK" hf.st --hf --layers 1 --heads 1 --embd 64 --context 32 --vocab 50 --scale 6
"$MK" tf.st --layers 1 --heads 1 --embd 64 --context 32 --vocab 50 --scale 6
d="{'descr': '<u2', 'fortran_order': False, 'shape': (40,), }"
# header length 118 = 128 - 10: the dict, spaces, a newline
printf '\223NUMPY\001\000v\000%s%*s\n' "$d" $((118 - ${#d} - 1)) '' >ids.npy
awk 'BEGIN { for (i = 0; i < 40; i++) printf "%c%c", (i * 7) % 50, 0 }' >>ids.npy
$E perplexity -m hf.st --tokens ids.npy --stride 5 --json >hf.json
$E perplexity -m tf.st --tokens ids.npy --stride 5 --json >tf.json
[ "$(field hf.json cross_entropy)" = "$(field tf.json cross_entropy)" ] &&
    [ "$(field hf.json tokens)" -eq 39 ] || fail "HF layout: $(cat hf.json tf.json)"
[ "$(field hf.json bytes)" = null ] || fail "bytes without a tokenizer: $(cat hf.json)"
expect_exit 1 $E perplexity -m hf.st <text.txt
grep -q 'hf.st: the model file has no tokenizer (give one with -t' err || fail "no tokenizer: $(cat err)"
# Two heads of 32: the shapes say nothing of it (64-wide heads are assumed),
# HuggingFace's config.json beside the file does.
mkdir -p hf2
"$MK" hf2/model.safetensors --hf --layers 1 --heads 2 --embd 64 --context 32 --vocab 50 --scale 6
"$MK" tf2.st --layers 1 --heads 2 --embd 64 --context 32 --vocab 50 --scale 6
$E perplexity -m tf2.st --tokens ids.npy --json >tf2.json
$E perplexity -m hf2/model.safetensors --tokens ids.npy --json >hf2.json
[ "$(field hf2.json cross_entropy)" != "$(field tf2.json cross_entropy)" ] ||
    fail "two heads guessed without config.json?"
printf '{"model_type": "gpt2", "n_head": 2, "n_embd": 64, "layer_norm_epsilon": 1e-05}\n' >hf2/config.json
$E perplexity -m hf2/model.safetensors --tokens ids.npy --json >hf2.json
[ "$(field hf2.json cross_entropy)" = "$(field tf2.json cross_entropy)" ] ||
    fail "config.json's n_head not used: $(cat hf2.json tf2.json)"
# the folder stands for its model.safetensors (config.json beside it); the
# "format": "pt" that HuggingFace's save_pretrained writes is no tfm format
/usr/bin/python3 - hf2/model.safetensors <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
h["__metadata__"] = {"format": "pt"}
b = json.dumps(h).encode()
b += b" " * (-len(b) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(b)) + b + raw[8 + n:])
PY
$E perplexity -m hf2/ --tokens ids.npy --json >hf2d.json
[ "$(field hf2d.json cross_entropy)" = "$(field tf2.json cross_entropy)" ] ||
    fail "GPT-2 folder with format pt: $(cat hf2d.json tf2.json)"
$E info -m hf2 >hf2.info
grep -qx "kind	gpt2-huggingface" hf2.info || fail "info of a GPT-2 folder: $(cat hf2.info)"
printf '{"n_head": "two"}\n' >hf2/config.json
expect_exit 1 $E perplexity -m hf2/model.safetensors --tokens ids.npy
grep -q 'config.json:1:12: n_head' err || fail "bad config.json: $(cat err)"
"$MK" v8.st --layers 1 --heads 1 --embd 16 --context 16 --vocab 8
expect_exit 1 $E perplexity -m v8.st -t tok.json <text.txt
grep -q 'tok.json: the tokenizer has .* tokens but the model only 8' err || fail "-t too big: $(cat err)"

# errors
expect_exit 1 $E perplexity -m m.st </dev/null
grep -q 'stdin: empty input' err || fail "empty input: $(cat err)"
printf '{"context": "a", "endings": ["b", "c"], "label": 0}\n\n{"context": "a", "endings": ["b", \n' >bad.jsonl
expect_exit 1 $E choice -m m.st bad.jsonl
grep -q '^tfm-eval: bad.jsonl:3:' err || fail "malformed JSONL: $(cat err)"
printf '{"context": "a", "endings": ["b", "c"], "label": 2}\n' >lab.jsonl
expect_exit 1 $E choice -m m.st <lab.jsonl
grep -q 'stdin:1:.*"label" must be the index' err || fail "bad label: $(cat err)"
printf '{"context": "a", "endings": ["b"], "label": 0}\n' >one.jsonl
expect_exit 1 $E choice -m m.st <one.jsonl
grep -q 'stdin:1:.*at least two' err || fail "one ending: $(cat err)"
printf 'two words\nnospace\n' >ns.txt
expect_exit 1 $E lastword -m m.st ns.txt
grep -q 'ns.txt:2: no space' err || fail "passage without a space: $(cat err)"
expect_exit 1 $E lastword -m m.st </dev/null
# longer than the context of 16 (15 scored at most)
printf '{"context": "a", "endings": ["b", " the shell was small"], "label": 0}\n' >long.jsonl
expect_exit 1 $E choice -m m.st long.jsonl
grep -q 'long.jsonl:1:.*ending 1 has 20 tokens: too long' err || fail "long ending: $(cat err)"
printf 'the shell wassmallandeverything\n' | { expect_exit 1 $E lastword -m m.st; }
grep -q 'stdin:1: the final word has .* too long' err || fail "long word: $(cat err)"
printf 'not a model' >bad.st
expect_exit 1 $E perplexity -m bad.st <text.txt
grep -q 'bad.st' err || fail "bad model file: $(cat err)"
expect_exit 1 $E perplexity -m missing.st <text.txt
grep -q 'missing.st' err || fail "missing model: $(cat err)"
expect_exit 2 $E perplexity <text.txt
expect_exit 2 $E perplexity -m m.st --context 17 <text.txt
grep -q 'longer than the model' err || fail "--context: $(cat err)"
expect_exit 2 $E perplexity -m m.st --context 8 --stride 9 <text.txt
expect_exit 2 $E frobnicate -m m.st
expect_exit 2 $E choice -m m.st --stride 2 <items.jsonl
expect_exit 2 $E perplexity -m m.st --items x.jsonl <text.txt
expect_exit 0 tfm-eval --help
grep -q perplexity out || fail "--help"

# --items is written atomically: an error in the input leaves no file
printf '{"context": "In", "endings": [" a", " b"], "label": 0}\n{"context": 1}\n' >baditems.jsonl
expect_exit 1 $E choice -m m.st --items bad.out.jsonl baditems.jsonl
[ ! -e bad.out.jsonl ] || fail "--items left a file behind on error"
ls | grep -q 'bad.out.jsonl' && fail "--items left a temporary file behind"
$E choice -m m.st --items ok.items.jsonl items.jsonl >/dev/null
[ "$(wc -l <ok.items.jsonl)" -eq 2 ] || fail "--items: $(cat ok.items.jsonl)"

# A write error is a message and exit 1.
set +e; $E perplexity -m m.st text.txt >/dev/full 2>err; rc=$?; set -e
[ "$rc" -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q 'write error' err ||
    fail "write error: exit $rc, $(cat err)"

# One token with --no-bos: nothing to score, and the message says why (the
# model has an end-of-text token; --no-bos left it out)
printf 'I' >one.txt
expect_exit 1 $E perplexity -m m.st --no-bos one.txt
grep -q "^tfm-eval: one.txt: a single token and --no-bos puts no end-of-text token before it" err ||
    fail "--no-bos on one token: $(cat err)"
expect_exit 0 $E perplexity -m m.st one.txt

# A model with NaN weights (a diverged run) gives no results: every mode
# that scores with it fails (exit 1) naming the file, and writes nothing
# (choice reported accuracy 0.667: every comparison with NaN is false)
"$TFM_BUILDDIR/tests/mkmodel" nan.st --text text.txt --layers 1 --heads 2 --embd 16 \
    --context 16 --nan
for mode in "perplexity --token-logprobs nan.lp text.txt" "lastword --items nan.items pass.txt" \
            "choice --items nan.items items.jsonl"; do
    expect_exit 1 $E $mode -m nan.st --json
    grep -q "^tfm-eval: nan.st: the model's scores are not finite (NaN)" err ||
        fail "NaN model ($mode): $(cat err)"
    [ -s out ] && fail "NaN model ($mode): output $(cat out)"
    [ -e nan.items ] || [ -e nan.lp ] && fail "NaN model ($mode): output file"
    ls nan.*.tmp.* 2>/dev/null && fail "NaN model ($mode): temporary file left"
done
# fill: an MLM encoder with NaN weights fails on the first line (exit 1,
# its file and line), and prints none of the lines' results
for i in 1 2 3 4 5 6 7 8 9 10; do echo "the cat sat on the mat and the dog ate"; done >wp.txt
tfm-tokenize train -q --model wordpiece --vocab-size 60 -o wp.tok.json wp.txt 2>/dev/null
for w in ok nan; do
    "$TFM_BUILDDIR/tests/mkmodel" mlm-$w.st --tokenizer wp.tok.json --layers 1 --heads 2 --embd 16 \
        --context 16 --set model.kind=encoder --set model.mlm_head=true $([ $w = nan ] && echo --nan)
done
printf 'the [MASK] sat\nthe dog [MASK]\n' >fill.txt
expect_exit 0 $E fill -m mlm-ok.st fill.txt
[ "$(wc -l <out)" -eq 2 ] || fail "fill on a finite model: $(cat out)"
for json in "" --json; do
    expect_exit 1 $E fill -m mlm-nan.st $json fill.txt
    grep -q "^tfm-eval: fill.txt:1: the model produced NaN" err || fail "fill, NaN model: $(cat err)"
    [ -s out ] && fail "fill, NaN model: output $(cat out)"
done
# a line without a mask fails the run before any line's result is printed
printf 'the [MASK] sat\nthe dog\n' >fill2.txt
expect_exit 1 $E fill -m mlm-ok.st fill2.txt
grep -q "^tfm-eval: fill2.txt:2: no mask token \[MASK\]" err || fail "fill, no mask: $(cat err)"
[ -s out ] && fail "fill printed results before the line without a mask: $(cat out)"

# .npy token ids: one rule for every reader (1-D, integers of any width and
# sign that fit): int8 is read, a 2-D array is refused with the same words
# as tfm-tokenize decode uses
/usr/bin/python3 - <<'PY'
import struct
def npy(path, descr, shape, data):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * (-(10 + len(h) + 1) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data)
npy("i1.npy", "|i1", "(5,)", bytes([1, 2, 3, 4, 5]))
npy("i8x2.npy", "<i8", "(1, 5)", struct.pack("<5q", 1, 2, 3, 4, 5))
npy("neg.npy", "<i8", "(3,)", struct.pack("<3q", 1, -1, 2))
PY
$E perplexity -m m.st --tokens i1.npy >/dev/null || fail "int8 token ids refused"
expect_exit 1 $E perplexity -m m.st --tokens i8x2.npy
grep -q "i8x2.npy: token ids are a 1-D array, not 2-D" err || fail "2-D ids: $(cat err)"
expect_exit 1 tfm-tokenize decode -t tok.json i8x2.npy
grep -q "i8x2.npy: token ids are a 1-D array, not 2-D" err || fail "decode 2-D ids: $(cat err)"
expect_exit 1 $E perplexity -m m.st --tokens neg.npy
grep -q "neg.npy: element 1: token id -1 is outside the vocabulary" err || fail "negative id: $(cat err)"

# --token-logprobs: every scored token once, in order, summing to the NLL
$E perplexity -m m.st --context 16 --stride 4 --json --token-logprobs lp.tsv text.txt >lp.json
[ "$(head -n 1 lp.tsv)" = "$(printf 'index\tid\tlogprob')" ] || fail "--token-logprobs header"
[ "$(($(wc -l <lp.tsv) - 1))" -eq "$N" ] || fail "--token-logprobs: $(wc -l <lp.tsv) lines for $N tokens"
awk -F '\t' -v s="$(field lp.json nll_sum)" 'NR > 1 { if ($1 != NR - 2) bad = 1; t -= $3 }
    END { d = t - s; if (bad || d * d > 1e-8) exit 1 }' lp.tsv ||
    fail "--token-logprobs do not add up to the NLL $(field lp.json nll_sum)"
expect_exit 2 $E choice -m m.st --token-logprobs x.tsv items.jsonl

# info: what a model file is, for a tfm file and a HuggingFace layout
$E info -m m.st >info.tsv
for kv in "kind	tfm" "n_layer	2" "n_enc_layer	0" "n_head	2" "n_embd	32" "d_ff	128" \
          "block_size	16" "step	0" "tokenizer	char" "checksum	verified"; do
    grep -qx "$kv" info.tsv || fail "info: no '$kv' in $(cat info.tsv)"
done
"$TFM_BUILDDIR/tests/mkmodel" hf.st --hf --layers 1 --heads 1 --embd 64 --context 32 --vocab 50
$E info -m hf.st --json >info.json
grep -q '"kind":"gpt2-huggingface",.*"parameters":55360,.*"step":null,"tokenizer":null' info.json &&
    grep -q '"checksum":"none"' info.json || fail "info of a GPT-2 layout: $(cat info.json)"
# the tokenizer's bos and eos, as perplexity uses them
grep -Eq "^bos	[0-9]+$" info.tsv && grep -Eq "^eos	[0-9]+$" info.tsv || fail "info: no bos/eos: $(cat info.tsv)"
expect_exit 2 $E info -m m.st text.txt
# a tfm file without its checksum: loads, with a warning
/usr/bin/python3 - m.st nosum.st <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
del h["__metadata__"]["checksum"]
b = json.dumps(h).encode()
b += b" " * (-len(b) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(b)) + b + raw[8 + n:])
PY
expect_exit 0 $E perplexity -m nosum.st text.txt
grep -q "^tfm-eval: warning: nosum.st has no checksum" err || fail "no checksum warning: $(cat err)"
$E info -m nosum.st >nosum.info
grep -qx "checksum	none" nosum.info || fail "info: checksum none"
expect_exit 0 $E perplexity -m m.st text.txt
[ ! -s err ] || fail "a warning for a checked file: $(cat err)"
# --help says what the man page says about --stride
tfm-eval --help | tr -s ' \n' ' ' | grep -q 'last min(S, N - 1) tokens' || fail "--help on --stride"

# Past the training context: refused for learned positions (their table
# ends), scored for rotary ones; within it both agree with their own
# forward at the default context.
$E perplexity -m m.st --context 32 text.txt 2>err.txt && fail "context 32 on a 16-position table"
grep -q "learned positions" err.txt || fail "no reason for the refused context: $(cat err.txt)"
"$TFM_BUILDDIR/tests/mkmodel" rope.st --text text.txt --layers 2 --heads 2 --embd 32 \
    --context 16 --scale 3 --seed 4 --set model.positions=rope
$E perplexity -m rope.st --context 64 --json text.txt >rope64.json
[ "$(field rope64.json tokens)" -eq "$N" ] || fail "rope at context 64: $(cat rope64.json)"
[ "$(field rope64.json context)" -eq 64 ] || fail "rope context: $(cat rope64.json)"
$E perplexity -m rope.st --json text.txt >rope16.json
[ "$(field rope16.json context)" -eq 16 ] || fail "rope default context: $(cat rope16.json)"

# Every decoder configuration scores and generates (the tensors of each
# scheme and option reach both inference paths); other kinds are refused
# with the reason.
for set in model.positions=sinusoidal model.positions=alibi model.positions=t5 \
    model.emb_norm=true; do
    "$TFM_BUILDDIR/tests/mkmodel" v.st --text text.txt --layers 2 --heads 2 --embd 32 \
        --context 16 --scale 3 --seed 4 --set $set
    $E perplexity -m v.st --json text.txt >v.json || fail "$set: perplexity: $(cat err)"
    [ "$(field v.json tokens)" -eq "$N" ] || fail "$set: $(cat v.json)"
    tfm-generate -q -m v.st --greedy -n 20 --ignore-eos "In the" >v.out 2>err ||
        fail "$set: generate: $(cat err)"
    [ -s v.out ] || fail "$set: nothing generated"
done
for kind in encoder encoder-decoder; do
    "$TFM_BUILDDIR/tests/mkmodel" k.st --text text.txt --layers 1 --heads 2 --embd 16 \
        --context 16 --seed 4 --set model.kind=$kind
    expect_exit 1 $E perplexity -m k.st text.txt
    grep -q "^tfm-eval: k.st: model.kind is $kind: .*need a decoder" err ||
        fail "perplexity on an $kind: $(cat err)"
    if [ "$kind" = encoder ]; then
        tfm-generate -m k.st "In the" 2>err && fail "generate on an $kind"
        grep -q "^tfm-generate: .*$kind" err || fail "generate on an $kind: $(cat err)"
    else # translates (tests/generate_seq2seq.sh)
        tfm-generate -q -m k.st "In the" >/dev/null 2>err || fail "translate: $(cat err)"
    fi
done

# Every --json output and --items file of this test is strict JSON.
rm tok.json wp.tok.json  # the JSON files that are not one document a line
/usr/bin/python3 - ./*.json lwi.jsonl ok.items.jsonl <<'PY' || fail "not strict JSON"
import json, sys
def bad(name):
    raise ValueError("not JSON: " + name)
for path in sys.argv[1:]:
    for line in open(path):
        try:
            json.loads(line, parse_constant=bad)
        except ValueError as e:
            sys.exit("%s: %s: %s" % (path, e, line))
PY
echo ok
