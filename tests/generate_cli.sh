#!/bin/sh
# tfm-generate end to end: strategies, determinism, batching, stop strings,
# JSON output, streaming without read-ahead, and bad input.
set -eu
. "${TFM_SRCDIR:-$(dirname "$0")/..}/tests/cli_lib.sh"
G="tfm-generate -q --threads 1"
MK="$TFM_BUILDDIR/tests/mkmodel"

# A random model whose next token is far from uniform, with a character
# tokenizer (and an end-of-text token) over this text.
cat >text.txt <<'TXT'
In the beginning the shell was small, and every program did one thing well.
A tokenizer turns text into numbers; a model turns numbers into more numbers.
TXT
"$MK" m.st --text text.txt --layers 2 --heads 2 --embd 32 --context 48 --scale 3 --seed 4
"$MK" ids.st --layers 1 --heads 2 --embd 16 --context 32 --vocab 50 --scale 6

# A HuggingFace GPT-2 style file (prefixed names, no metadata) with the
# same weights gives the same tokens.
"$MK" hf.st --hf --layers 1 --heads 1 --embd 64 --context 32 --vocab 50 --scale 6
"$MK" tf.st --layers 1 --heads 1 --embd 64 --context 32 --vocab 50 --scale 6
$G -m hf.st --ids --greedy -n 10 "1 2 3" >hf.out
$G -m tf.st --ids --greedy -n 10 "1 2 3" >tf.out
cmp -s hf.out tf.out || fail "GPT-2 layout file differs from the tfm file"
[ "$(wc -w <hf.out)" -ge 1 ] || fail "no output from the GPT-2 layout file"

# Greedy is deterministic; --temp 0 and --top-k 1 are greedy too.
$G -m m.st --greedy -n 20 "In the" >g1
$G -m m.st --greedy -n 20 "In the" >g2
cmp -s g1 g2 || fail "greedy differs between runs"
[ "$(wc -c <g1)" -gt 1 ] || fail "greedy printed nothing"
$G -m m.st --temp 0 -n 20 "In the" >t0
cmp -s g1 t0 || fail "--temp 0 differs from --greedy"
$G -m m.st --top-k 1 --seed 5 -n 20 "In the" >k1
cmp -s g1 k1 || fail "--top-k 1 differs from --greedy"
# the cache changes nothing but the speed
$G -m m.st --greedy --no-cache -n 20 "In the" >nc
cmp -s g1 nc || fail "--no-cache differs from the cached greedy"
$G -m m.st --beam 3 --nbest 3 -n 20 --json "In the" "A mo" | sed 's/"timings".*//' >bc
$G -m m.st --beam 3 --nbest 3 -n 20 --no-cache --json "In the" "A mo" | sed 's/"timings".*//' >bnc
cmp -s bc bnc || fail "--no-cache differs from the cached beam search"
# Decoding does not depend on the thread count (the gemv sums each column
# in an order fixed by the shapes alone): the same tokens and log-probabilities on 1 and 2 threads,
# with matrices large enough to be split.
"$MK" wide.st --layers 1 --heads 2 --embd 192 --context 32 --vocab 50 --scale 4
tfm-generate -q --threads 1 -m wide.st --ids --greedy --ignore-eos -n 12 --json "1 2 3 4 5" >th1
tfm-generate -q --threads 2 -m wide.st --ids --greedy --ignore-eos -n 12 --json "1 2 3 4 5" >th2
sed 's/"timings".*//' th1 >th1.cut; sed 's/"timings".*//' th2 >th2.cut
cmp -s th1.cut th2.cut || fail "1 and 2 threads decode differently"

# bfloat16 weights: a valid run, mostly the same tokens as float32
$G -m ids.st --ids --greedy --ignore-eos -n 20 --bf16 "1 2 3" >bf
[ "$(wc -w <bf)" -eq 20 ] || fail "--bf16 run"
# --beam 1 is greedy
$G -m m.st --beam 1 -n 20 "In the" >b1
cmp -s g1 b1 || fail "--beam 1 differs from --greedy"

# Seeds: the same seed, the same text; another seed, another text.
$G -m m.st --seed 11 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 -n 40 "In the" "A mo" >s1
$G -m m.st --seed 11 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 -n 40 "In the" "A mo" >s2
$G -m m.st --seed 12 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 -n 40 "In the" "A mo" >s3
cmp -s s1 s2 || fail "same seed, different text"
cmp -s s1 s3 && fail "different seeds, same text"
# Sampling frequencies on a fixed model: 600 prompts, one token each (prompt
# i samples with seed + i), top-k 3 at temperature 1: only three tokens may
# appear, with the model's probabilities renormalised over them (the JSON
# reports each token's log-probability under the model).
for i in $(seq 600); do echo "In the"; done >same.txt
$G -m m.st --seed 100 --temp 1 --top-k 3 --top-p 1 --min-p 0 -n 1 --json --batch 64 \
    --prompt-file same.txt >freq.jsonl
/usr/bin/python3 - freq.jsonl <<'PY' || fail "sampling frequencies"
import json, math, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
count = collections.Counter(r["ids"][0] for r in rows)
lp = {r["ids"][0]: r["logprobs"][0] for r in rows}
assert len(count) <= 3, "more than top-k tokens drawn: %s" % count
z = sum(math.exp(v) for v in lp.values())
n = len(rows)
chi2 = sum((count[t] - n * math.exp(lp[t]) / z) ** 2 / (n * math.exp(lp[t]) / z) for t in count)
# 99.9th percentile of chi-square with 2 degrees of freedom
assert chi2 < 13.8, (chi2, count, lp)
assert len(count) >= 2, "a degenerate distribution tests nothing: %s" % count
PY
# a chosen seed is logged
tfm-generate -m m.st --threads 1 -n 3 "In" 2>err >/dev/null
grep -q 'seed [0-9]' err || fail "random seed not logged"

# Batched prompts give what each gives alone, in input order.
$G -m m.st --greedy -n 15 "In the" "A tok" "numbers" >batch
{ $G -m m.st --greedy -n 15 "In the"; $G -m m.st --greedy -n 15 "A tok"; \
  $G -m m.st --greedy -n 15 "numbers"; } >single
cmp -s batch single || fail "batched output differs from one at a time"
printf 'In the\nA tok\nnumbers\n' | $G -m m.st --greedy -n 15 >lines
cmp -s batch lines || fail "stdin lines differ from arguments"
printf 'In the\nA tok\nnumbers\n' >prompts.txt
$G -m m.st --greedy -n 15 --prompt-file prompts.txt --batch 2 >file
cmp -s batch file || fail "--prompt-file differs"

# JSON: one object per prompt with consistent fields.
$G -m m.st --greedy -n 12 --json "In the" "A" >j
[ "$(wc -l <j)" -eq 2 ] || fail "expected 2 JSON lines"
if /usr/bin/python3 -c 'import json' 2>/dev/null; then
    /usr/bin/python3 - j <<'PY' || fail "JSON output"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["prompt"] for r in rows] == ["In the", "A"], rows
for r in rows:
    assert len(r["ids"]) == len(r["logprobs"]) <= 12
    assert all(lp <= 0 for lp in r["logprobs"])
    assert r["finish_reason"] in ("eos", "length", "stop")
    assert r["finish_reason"] != "length" or len(r["ids"]) == 12
    assert r["prompt_tokens"] == len(r["prompt"])
    assert "prefill_s" in r["timings"] and "decode_s" in r["timings"]
PY
fi
# the JSON text is the plain output
/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' j >jt 2>/dev/null &&
    { $G -m m.st --greedy -n 12 "In the" >pt; cmp -s jt pt || fail "JSON text differs from plain text"; }

# -n bounds the output (ids mode counts tokens).
$G -m ids.st --ids --greedy --ignore-eos -n 7 "1 2 3" >n7
[ "$(wc -w <n7)" -eq 7 ] || fail "-n 7 gave $(wc -w <n7) tokens"

# --max-len-a/-b: a * prompt tokens + b new tokens at most, per prompt
$G -m ids.st --ids --greedy --ignore-eos -n 100 --max-len-a 2 --max-len-b 1 "1 2 3" "4" >ab
[ "$(sed -n 1p ab | wc -w)" -eq 7 ] && [ "$(sed -n 2p ab | wc -w)" -eq 3 ] || fail "--max-len-a/-b"
$G -m ids.st --ids --beam 2 --ignore-eos -n 100 --max-len-b 4 "1 2 3" >abb
[ "$(wc -w <abb)" -eq 4 ] || fail "--max-len-b with beam search"

# Stop strings: the text is cut before the first occurrence.
$G -m m.st --greedy --ignore-eos -n 30 "In the" >full
# (random models repeat themselves: take the first change of character)
stop=$(/usr/bin/python3 -c 'import sys; t=open(sys.argv[1]).read(); i=next(i for i in range(len(t)) if t[i]!=t[i+1]); print(t[i:i+2])' full)
[ -n "$stop" ] || fail "no text to take a stop string from"
$G -m m.st --greedy --ignore-eos -n 30 --stop "$stop" "In the" >cut
expect=$(/usr/bin/python3 -c 'import sys; t=open(sys.argv[1]).read(); print(t[:t.find(sys.argv[2])])' full "$stop")
[ -n "$expect" ] || fail "stop string at the start: a weak test"
[ "$(cat cut)" = "$expect" ] || fail "stop string: got '$(cat cut)', expected '$expect'"
$G -m m.st --greedy --ignore-eos -n 30 --stop "$stop" --json "In the" | grep -q '"finish_reason":"stop"' ||
    fail "finish reason is not stop"
# ... and ids and logprobs end where the text does (a character a token)
$G -m m.st --greedy --ignore-eos -n 30 --stop "$stop" --json "In the" >stop.json
/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["finish_reason"] == "stop" and r["text"] == sys.argv[2], r
assert len(r["ids"]) == len(r["logprobs"]) == len(r["text"]), r' stop.json "$expect" ||
    fail "--stop --json: ids or logprobs run past the stop: $(cat stop.json)"

# Beam search: n-best lists, best first; beam 4 scores at least greedy's.
$G -m m.st --beam 4 --nbest 3 -n 10 --json "In the" >bj
/usr/bin/python3 - bj <<'PY' || fail "beam JSON"
import json, sys
r = json.loads(open(sys.argv[1]).readline())
s = [h["score"] for h in r["nbest"]]
assert len(s) == 3 and s == sorted(s, reverse=True), s
PY
[ "$($G -m m.st --beam 3 --nbest 2 -n 10 "In the" | wc -l)" -eq 2 ] || fail "--nbest 2 prints 2 lines"
# A beam hypothesis cut at a stop string reports the score of what is left
# (its tokens' log p over their number^0.6), not the uncut one's; the list
# stays best first.  The stop is a character of the best text past its start.
$G -m m.st --beam 3 --nbest 3 --ignore-eos -n 20 --json "In the" >bfull
bstop=$(/usr/bin/python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["text"]
print(next(c for c in t if c != t[0]))' bfull)
$G -m m.st --beam 3 --nbest 3 --ignore-eos -n 20 --stop "$bstop" --json "In the" >bstop.json
/usr/bin/python3 - bstop.json "$bstop" <<'PY' || fail "beam --stop score: $(cat bstop.json)"
import json, sys
r = json.load(open(sys.argv[1]))
cut = [h for h in r["nbest"] if h["finish_reason"] == "stop"]
assert cut, "no hypothesis reached the stop string"
for h in r["nbest"]:
    assert sys.argv[2] not in h["text"], h
    if h["finish_reason"] == "stop":
        n = len(h["ids"])
        assert n == len(h["logprobs"]) >= 1, h
        want = sum(h["logprobs"]) / n ** 0.6
        assert abs(h["score"] - want) < 1e-4, (h["score"], want)
s = [h["score"] for h in r["nbest"]]
assert s == sorted(s, reverse=True), s
assert r["score"] == s[0] and r["text"] == r["nbest"][0]["text"]
PY

# The context limit ends generation (finish "length"), it is not an error.
long='In the beginning the shell was small, and ev'
$G -m m.st --greedy --ignore-eos -n 100 --json "$long" >ctx
grep -q '"finish_reason":"length"' ctx || fail "context limit"

# --raw: the whole input is one prompt.
printf 'In the\nA tok\n' | $G -m m.st --greedy -n 5 --raw --json >raw
[ "$(wc -l <raw)" -eq 1 ] || fail "--raw gave several prompts"
grep -q '"prompt":"In the\\nA tok\\n"' raw || fail "--raw prompt"

# One prompt at a time: each answer is out before the next line is read.
if command -v timeout >/dev/null && command -v mkfifo >/dev/null; then
    mkfifo in.fifo
    ( $G -m m.st --greedy -n 5 <in.fifo >stream.out & echo $! >pid
      exec 3>in.fifo; echo "In the" >&3; sleep 0.2
      i=0; while [ ! -s stream.out ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
      [ -s stream.out ] && echo answered >state || echo waiting >state
      exec 3>&- )
    wait "$(cat pid)" 2>/dev/null || true
    [ "$(cat state)" = answered ] || fail "no output before the end of input (read-ahead)"
fi

# Bad input: usage errors exit 2, failures exit 1, never a crash.
expect_exit 2 tfm-generate -m m.st --beam 2 --top-p 0.9 "x"
grep -q 'do not apply to --beam' err || fail "beam + top-p message"
expect_exit 2 tfm-generate -m m.st --greedy --temp 0.5 "x"
expect_exit 2 tfm-generate -m m.st --nbest 2 "x"
expect_exit 2 tfm-generate -m m.st --beam 2 --nbest 3 "x"
expect_exit 2 tfm-generate "x"
expect_exit 2 tfm-generate -m m.st --top-p 0 "x"
expect_exit 2 tfm-generate -m m.st -n 0 "x"
expect_exit 1 tfm-generate -m missing.st "x"
grep -q 'missing.st' err || fail "missing file not named"
printf 'not a model at all' >bad.st
expect_exit 1 tfm-generate -m bad.st "x"
grep -q 'bad.st' err || fail "bad model file not named"
head -c 3000 m.st >trunc.st
expect_exit 1 tfm-generate -m trunc.st "x"
expect_exit 1 tfm-generate -m text.txt "x"
# a byte flipped in the weights of a tfm-train file: its checksum catches it
cp "$TFM_SRCDIR/testdata/tiny-char.safetensors" flip.st
size=$(wc -c <flip.st)
printf '\377' | dd of=flip.st bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
expect_exit 1 tfm-generate -m flip.st "x"
grep -q 'checksum' err || fail "flipped byte not detected"
tfm-generate -q -m "$TFM_SRCDIR/testdata/tiny-char.safetensors" --greedy -n 3 "In" >/dev/null ||
    fail "the intact file does not load"
# An empty prompt starts a text after the end-of-text token; without one
# it is an error.
$G -m m.st --greedy -n 5 --json "" >empty.json || fail "empty prompt"
grep -q '"prompt_tokens":1,' empty.json || fail "empty prompt: not started from end-of-text"
expect_exit 1 tfm-generate -q -m ids.st --ids ""
grep -q 'empty.*no end-of-text' err || fail "empty prompt without end-of-text message"
printf 'In\n\nA\n' >withblank.txt
$G -m m.st --greedy -n 3 --prompt-file withblank.txt >blank.out || fail "empty line in a prompt file"
[ "$(wc -l <blank.out)" -eq 3 ] || fail "empty line in a prompt file: not 3 results"
# "-" is standard input; empty input is no prompt: no output, exit 0
printf 'In\nA\n' | $G -m m.st --greedy -n 3 - >dash.out || fail "'-' as stdin"
[ "$(wc -l <dash.out)" -eq 2 ] || fail "'-' not read as standard input"
: | $G -m m.st --greedy -n 3 - >none.out || fail "empty input is not a success"
[ ! -s none.out ] || fail "output for empty input"
: | $G -m m.st --greedy -n 3 >none.out || fail "empty stdin is not a success"
# -z: records end with NUL, so texts with newlines (this model writes them)
# can be split
$G -m m.st --seed 3 --ignore-eos -n 40 -z "In" "A" "the" >z.out
[ "$(tr -cd '\000' <z.out | wc -c)" -eq 3 ] || fail "-z: not 3 NUL-terminated records"
$G -m m.st --beam 3 --nbest 2 -n 10 -z "In" >zb.out
[ "$(tr -cd '\000' <zb.out | wc -c)" -eq 2 ] || fail "-z --nbest 2: not 2 records"
expect_exit 2 tfm-generate -m m.st -z --json "In"
# A write error is a message and exit 1 (here every result was lost).
set +e; tfm-generate -q -m m.st --greedy -n 3 "In" >/dev/full 2>err; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q 'write error' err || fail "write error: exit $rc, $(cat err)"
# --help: --nbest's output format under --nbest; --ignore-eos and --no-cache
# (decoders too) not under the encoder-decoder heading
tfm-generate --help >help.txt
grep -A1 -- '--nbest K' help.txt | grep -q 'index<TAB>rank<TAB>score<TAB>text' ||
    fail "--help: --nbest's output line is not under --nbest"
awk '/^Encoder-decoders/ { e = 1 } /^Other/ { e = 0 } e && /--ignore-eos|--no-cache/ { bad = 1 }
     END { exit bad }' help.txt || fail "--help: decoder options under encoder-decoders"
set +e; tfm-generate --help >/dev/full 2>err; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q 'write error' err || fail "--help write error: exit $rc"
# A model with NaN weights (a diverged run) is said to be one, in every
# strategy: sampling from NaN picks no valid token.
"$MK" nan.st --text text.txt --layers 1 --heads 2 --embd 16 --context 32 --nan
for s in --greedy "--beam 2" "--seed 1" "--greedy --no-cache"; do
    # shellcheck disable=SC2086
    expect_exit 1 tfm-generate -q -m nan.st --json -n 3 $s "In"
    grep -q 'the model produced NaN' err || fail "NaN model ($s): $(cat err)"
done
# ... naming the line of the prompt file it happened on
printf 'In\n' >nan.txt
for s in --greedy "--beam 2" "--seed 1"; do
    # shellcheck disable=SC2086
    expect_exit 1 tfm-generate -q -m nan.st -n 3 $s --prompt-file nan.txt
    grep -q '^tfm-generate: nan.txt:1: the model produced NaN' err || fail "NaN model ($s): $(cat err)"
done
toolong=$(head -c 60 text.txt | tr '\n' ' ')
expect_exit 1 tfm-generate -q -m m.st "$toolong"
grep -q 'longer than the model' err || fail "too-long prompt message"
printf 'In\n%s\n' "$toolong" >long.txt
expect_exit 1 tfm-generate -q -m m.st --prompt-file long.txt
grep -q "^tfm-generate: long.txt:2: the prompt is 60 tokens, longer than the model's context (48)" err ||
    fail "too-long prompt of a file: $(cat err)"
# A vocabulary padded past the tokenizer's (model.vocab_size 90, 31 ids with
# text): the 59 rows without text are never chosen, whatever the strategy,
# where a random model picks one of them at nearly every step.
"$MK" pad.st --text text.txt --layers 1 --heads 2 --embd 16 --context 48 --scale 3 \
    --set model.vocab_size=90
for s in --greedy "--beam 3 --nbest 3" "--seed 3 --temp 2 --top-k 0 --top-p 1 --min-p 0" \
         "--greedy --no-cache"; do
    # shellcheck disable=SC2086
    expect_exit 0 tfm-generate -q --threads 1 -m pad.st $s -n 30 --json "In the" "A mo" "nu"
    /usr/bin/python3 - out <<'PY' || fail "padded vocabulary ($s): $(cat err)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3
for r in rows:
    ids = r["ids"] + [i for h in r.get("nbest", []) for i in h["ids"]]
    assert ids and max(ids) < 31, ids
PY
done
expect_exit 1 tfm-generate -q -m ids.st "x"
grep -q 'no tokenizer' err || fail "no tokenizer message"
expect_exit 1 tfm-generate -q -m ids.st --ids "1 2 999"
grep -q '999' err || fail "bad id not named"

# --q8-gemm on or off is about 8-bit matrices: on a float32 file it says so
expect_exit 0 tfm-generate --threads 1 -m ids.st --ids --greedy -n 2 --q8-gemm on "1 2"
grep -q "warning: --q8-gemm on does nothing: ids.st has no 8-bit" err || fail "--q8-gemm on f32: $(cat err)"
expect_exit 0 tfm-generate --threads 1 -m ids.st --ids --greedy -n 2 --q8 --q8-gemm on "1 2"
grep -q "q8-gemm" err && fail "--q8-gemm with --q8 warned: $(cat err)"

# Summaries count in the singular too: "1 token", "1 thread"
tfm-generate --threads 1 -m m.st --greedy --ignore-eos -n 1 "In" 2>sum >/dev/null
grep -q "generated 1 token, .* 1 thread$" sum || fail "summary: $(cat sum)"

# Every --json output of this test is strict JSON (no nan or inf: null).
/usr/bin/python3 - ./*.json j bj th1 raw <<'PY' || fail "--json output is not strict JSON"
import json, sys
def bad(name):
    raise ValueError("not JSON: " + name)
for path in sys.argv[1:]:
    for line in open(path):
        json.loads(line, parse_constant=bad)
PY
echo ok
