#!/bin/sh
# The prefix LM for decoders (train.task prefix-lm; lib/train/task_prefixlm.c):
# --dump-batches shows windows of the corpus split after a prefix of 1 to
# block_size tokens, scored exactly after it (and pairs: input + EOS the
# prefix, target + EOS scored); the loss of a few steps falls; a resumed
# run repeats bit for bit; tfm-generate reads the prompt as the prefix
# (cached and uncached decoding agree, and tfm-eval's scores with the
# context as the prefix; a pairs model's prompt gets its end-of-text); what the task cannot run is one clear error.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
tfm-tokenize train -q -m bpe -v 400 --special '<|endoftext|>' -o tok.json corpus.txt
tfm-tokenize encode -t tok.json --document corpus.txt > stream.txt
cat > plm.yaml <<END
model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 24}
data: {text: corpus.txt, tokenizer: tok.json}
optim: {lr: 0.01}
schedule: {warmup: 5, decay: cosine}
train: {task: prefix-lm, batch_size: 8, max_steps: 60, eval_interval: 20,
        eval_batches: 4, log_interval: 5, seed: 3}
END
tfm-train -c plm.yaml --dump-batches 200 > d.jsonl
python3 - d.jsonl stream.txt <<'PY' || fail "prefix-lm sequences"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
stream = [int(t) for t in open(sys.argv[2]).read().split()]
text = " " + " ".join(map(str, stream)) + " "
seen = {}
for r in rows:
    x, y, p = r["input_ids"], r["target_ids"], r["prefix_len"]
    assert len(x) == 24 and 1 <= p <= 24, (len(x), p)
    # trailing ignored targets are left out of the dump: none here
    assert len(y) == 24, len(y)
    assert all(t == -1 for t in y[:p - 1]), "a prefix position is scored"
    assert all(t >= 0 for t in y[p - 1:]), "a position after the prefix is not scored"
    assert y[p - 1:-1] == x[p:], "the targets are not the next tokens"
    assert " " + " ".join(map(str, x + y[-1:])) + " " in text, "not a window of the corpus"
    seen[p] = seen.get(p, 0) + 1
# uniform over 1..24: 200 draws see most values, none far too often
assert len(seen) >= 18 and max(seen.values()) <= 25, seen
PY
tfm-train -c plm.yaml --dump-batches 200 > d2.jsonl
cmp d.jsonl d2.jsonl || fail "--dump-batches differs between two calls"

# a few steps: the loss falls (ln 400 = 6 at the start)
tfm-train -q -c plm.yaml --threads 1 -o a
start=$(awk -F'\t' 'NR == 2 { print $2 }' a/log.tsv)
first=$(awk -F'\t' 'NR > 1 && $3 != "" { print $3; exit }' a/log.tsv)
last=$(awk -F'\t' 'NR > 1 && $3 != "" { v = $3 } END { print v }' a/log.tsv)
awk -v s="$start" -v f="$first" -v l="$last" 'BEGIN { exit !(l < f && l < s - 1) }' ||
    fail "prefix-lm loss did not fall: $start (training, step 5) -> $first -> $last (validation)"
tfm-train -q -c plm.yaml --threads 1 -o b --steps 23
tfm-train -q --threads 1 -o b
cmp a/model.safetensors b/model.safetensors || fail "resumed prefix-lm run differs"
tfm-eval info -m a/model.safetensors > info.tsv
grep -qx 'prefix_lm	true' info.tsv && grep -qx 'prefix_from	random' info.tsv ||
    { cat info.tsv >&2; fail "tfm-eval info of a prefix LM"; }

# generation: the prompt is the prefix; the cache and recomputing the
# whole sequence (prefix mask over the prompt either way) agree
printf 'the cat sat on\na dog ate\n' > prompts.txt
tfm-generate -q -m a/model.safetensors --greedy -n 12 --ignore-eos -z \
    --prompt-file prompts.txt > g1.txt
tfm-generate -q -m a/model.safetensors --greedy -n 12 --ignore-eos -z --no-cache \
    --prompt-file prompts.txt > g2.txt
[ "$(tr -cd '\000' < g1.txt | wc -c)" = 2 ] || fail "generation: $(cat g1.txt)"
cmp g1.txt g2.txt || fail "prefix-LM generation: the cache and the full recomputation differ"
# tfm-eval reads the context as the prefix too: its score of the greedy
# continuation is the sum of generation's log-probabilities (with one layer
# the prefix could not change them: two here)
tfm-generate -q -m a/model.safetensors --greedy -n 6 --ignore-eos --json 'the cat sat on' > gj.json
python3 - gj.json > choice.jsonl <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
print(json.dumps({"context": r["prompt"], "endings": [r["text"], " a mat."], "label": 0}))
print(sum(r["logprobs"]), file=open("gen_lp.txt", "w"))
PY
tfm-eval choice -q --no-bos -m a/model.safetensors --items items.jsonl choice.jsonl > /dev/null
python3 - items.jsonl gen_lp.txt <<'PY' || fail "tfm-eval and tfm-generate disagree on a prefix LM"
import json, sys
lp = json.loads(open(sys.argv[1]).readline())["logprobs"][0]
want = float(open(sys.argv[2]).read())
assert abs(lp - want) < 1e-3, (lp, want)
PY
tfm-eval perplexity -q -m a/model.safetensors < corpus.txt > ppl.txt ||
    fail "tfm-eval perplexity of a prefix LM"

# text-to-text pairs: input<TAB>target (the input's words reversed)
awk 'NR <= 300 { n = split($0, w, " "); r = w[n]; for (i = n - 1; i >= 1; i--) r = r " " w[i];
                 print $0 "\t" r }' corpus.txt > pairs.tsv
cat > pairs.yaml <<END
model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {text: pairs.tsv, tokenizer: tok.json, val_fraction: 0.1}
optim: {lr: 0.01}
schedule: {warmup: 5, decay: cosine}
train: {task: prefix-lm, prefix_from: pairs, batch_size: 8, max_steps: 60, eval_interval: 20,
        log_interval: 5, seed: 3}
END
tfm-train -c pairs.yaml --dump-batches 50 > p.jsonl
python3 - p.jsonl tok.json <<'PY' || fail "prefix-lm pairs"
import json, sys
tok = json.load(open(sys.argv[2]))
eos = {t["content"]: t["id"] for t in tok["added_tokens"]}["<|endoftext|>"]
for l in open(sys.argv[1]):
    r = json.loads(l)
    x, y, p = r["input_ids"], r["target_ids"], r["prefix_len"]
    assert x[p - 1] == eos, "the prefix does not end with end-of-text"
    assert all(t == -1 for t in y[:p - 1])
    tgt = y[p - 1:]
    assert tgt[-1] == eos and eos not in tgt[:-1], tgt
    # the inputs after the prefix are the target (teacher forcing)
    assert x[p:p + len(tgt) - 1] == tgt[:-1]
    src = r["input"].split("<|endoftext|>")[0].split()
    want = " ".join(reversed(src))
    assert r["target"].replace("<|endoftext|>", "").split() == want.split(), (r["input"], r["target"])
PY
tfm-train -q -c pairs.yaml --threads 1 -o pa
first=$(awk -F'\t' 'NR == 2 { print $2 }' pa/log.tsv)
last=$(awk -F'\t' 'NR > 1 && $3 != "" { v = $3 } END { print v }' pa/log.tsv)
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 1) }' ||
    fail "prefix-lm pairs: loss did not fall: $first (training, step 5) -> $last (validation)"
# the prompt is read as an input: its tokens and end-of-text
n=$(printf 'the cat sat.' | tfm-tokenize encode -t tok.json | wc -w)
tfm-generate -q -m pa/model.safetensors --greedy -n 8 --json 'the cat sat.' > pj.json
python3 - pj.json "$n" <<'PY' || fail "a pairs prefix LM's prompt"
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["prompt_tokens"] == int(sys.argv[2]) + 1, (r["prompt_tokens"], sys.argv[2])
PY

# what the task cannot run
expect_fail 1 "train.task prefix-lm needs model.kind decoder" \
    tfm-train -q -c plm.yaml --set model.kind=encoder -o e
[ ! -e e ] || fail "a refused start left a run directory"
expect_fail 1 "train.task prefix-lm needs model.kind decoder (full attention over a prefix of a causal stack), not encoder-decoder" \
    tfm-train -q -c plm.yaml --set model.kind=encoder-decoder -o e
expect_fail 1 "data.packing with train.task prefix-lm" \
    tfm-train -q -c plm.yaml --set data.packing=true -o e
expect_fail 1 "train.prefix_from is for train.task prefix-lm" \
    tfm-train -q -c plm.yaml --set train.task=lm --set train.prefix_from=pairs -o e
expect_fail 1 "train.prefix_from pairs reads input<TAB>target lines from data.text" \
    tfm-train -q -c plm.yaml --set data.text= --set data.train=train.npy \
    --set data.tokenizer= --set train.prefix_from=pairs -o e
expect_fail 1 "corpus.txt:1: no tab" \
    tfm-train -q -c plm.yaml --set train.prefix_from=pairs -o e
expect_fail 1 "pairs.tsv:" \
    tfm-train -q -c pairs.yaml --set model.block_size=8 --set data.truncate=error -o e
expect_fail 2 "train.prefix_from" tfm-train -q -c plm.yaml --set train.prefix_from=spam -o e
echo ok
