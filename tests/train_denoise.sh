#!/bin/sh
# BART's denoising (train.task denoise; lib/train/task_denoise.c) and the T5
# study's other noise for span-corruption (train.noise iid|drop|bert):
# --dump-batches shows sequences that undo to windows of the corpus, the
# loss of a few steps falls, a resumed run repeats bit for bit, and what
# the tasks cannot run is one clear error.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
tfm-tokenize train -q -m bpe -v 300 --special '<|endoftext|>' --special '<mask>' \
    -o bart.json corpus.txt
tfm-tokenize encode -t bart.json --document corpus.txt > bart_stream.txt
cat > bart.yaml <<END
model: {kind: encoder-decoder, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32}
data: {text: corpus.txt, tokenizer: bart.json}
optim: {lr: 0.01}
schedule: {warmup: 5, decay: cosine}
train: {task: denoise, batch_size: 8, max_steps: 60, eval_interval: 20,
        eval_batches: 4, log_interval: 5, seed: 3}
END
# (no random tokens in place of masks here, so that every other token of
# the source is the window's)
tfm-train -c bart.yaml --set train.random_token_prob=0 --dump-batches 40 > d.jsonl
tfm-train -c bart.yaml --set train.random_token_prob=0 --set train.permute_sentences=false \
    --dump-batches 40 > np.jsonl

python3 - d.jsonl np.jsonl bart_stream.txt bart.json <<'PY' || fail "denoise sequences"
import json, sys
perm = [json.loads(l) for l in open(sys.argv[1])]
plain = [json.loads(l) for l in open(sys.argv[2])]
stream = [int(t) for t in open(sys.argv[3]).read().split()]
tok = json.load(open(sys.argv[4]))
ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
mask, eos = ids["<mask>"], ids["<|endoftext|>"]
text = " " + " ".join(map(str, stream)) + " "
def window(r):
    y = r["target_ids"]
    assert len(y) == 32 and y[-1] == eos, len(y)
    assert " " + " ".join(map(str, y[:-1])) + " " in text, "the target is not a window"
    assert r["input_ids"][-1] == eos and len(r["input_ids"]) <= 32
    assert "<mask>" in r["input"] or mask not in r["input_ids"]
    return y[:-1], r["input_ids"][:-1]
covered = 0
for r in plain:
    w, x = window(r)
    # the inverse: the source matches the window with each mask a wildcard
    # for the run it hides (none for an insert), as fnmatch's *
    ok = [True] + [False] * len(w)
    for t in x:
        if t == mask:
            for j in range(1, len(w) + 1):
                ok[j] = ok[j] or ok[j - 1]
        else:
            ok = [False] + [ok[j - 1] and w[j - 1] == t for j in range(1, len(w) + 1)]
    assert ok[len(w)], "the source is not the window with runs under masks"
    covered += len(w) - sum(t != mask for t in x)
share = covered / (31 * len(plain))
# 0.3 planned, about 0.27 covered as overlapping spans merge
assert 0.2 < share <= 0.3, share
# with permutation: the source's tokens come from the window, and some
# sources are not in the window's order
moved = 0
for r in perm:
    w, x = window(r)
    kept = [t for t in x if t != mask]
    rest = list(w)
    for t in kept:
        assert t in rest, "a source token not in the window"
        rest.remove(t)
    it = iter(w)
    moved += not all(t in it for t in kept)
assert moved > len(perm) // 2, moved
PY
tfm-train -c bart.yaml --set train.random_token_prob=0 --dump-batches 40 > d2.jsonl
cmp d.jsonl d2.jsonl || fail "--dump-batches differs between two calls"

# a few steps: the loss falls (ln 300 = 5.7 at the start)
tfm-train -q -c bart.yaml --threads 1 -o a
start=$(awk -F'\t' 'NR == 2 { print $2 }' a/log.tsv)
first=$(awk -F'\t' 'NR > 1 && $3 != "" { print $3; exit }' a/log.tsv)
last=$(awk -F'\t' 'NR > 1 && $3 != "" { v = $3 } END { print v }' a/log.tsv)
awk -v s="$start" -v f="$first" -v l="$last" 'BEGIN { exit !(l < f && l < s - 1.5) }' ||
    fail "denoise loss did not fall: $start (training, step 5) -> $first -> $last (validation)"
tfm-train -q -c bart.yaml --threads 1 -o b --steps 23
tfm-train -q --threads 1 -o b
cmp a/model.safetensors b/model.safetensors || fail "resumed denoise run differs"

# BART's <s> text </s> (a BART folder's model.source_bos and forced_bos):
# every source and every target begins with <s>, never noised, before a
# window a token shorter
tfm-tokenize train -q -m bpe -v 300 --special '<s>' --special '<pad>' --special '</s>' \
    --special '<unk>' --special '<mask>' -o bs.json corpus.txt
tfm-tokenize encode -t bs.json --document corpus.txt > bs_stream.txt
bos=$(python3 -c 'import json, sys
print([t["id"] for t in json.load(open(sys.argv[1]))["added_tokens"] if t["content"] == "<s>"][0])' bs.json)
tfm-train -c bart.yaml --set data.tokenizer=bs.json --set model.source_bos=true \
    --set model.forced_bos="$bos" --set train.random_token_prob=0 --dump-batches 20 > bs.jsonl
python3 - bs.jsonl bs_stream.txt bs.json <<'PY' || fail "denoise with source_bos and forced_bos"
import json, sys
stream = [int(t) for t in open(sys.argv[2]).read().split()]
ids = {t["content"]: t["id"] for t in json.load(open(sys.argv[3]))["added_tokens"]}
bos, eos = ids["<s>"], ids["</s>"]
text = " " + " ".join(map(str, stream)) + " "
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 20
for r in rows:
    x, y = r["input_ids"], r["target_ids"]
    assert y[0] == bos and y[-1] == eos and len(y) == 32, y
    assert " " + " ".join(map(str, y[1:-1])) + " " in text, "the target is not <s> + a window"
    assert x[0] == bos and x[-1] == eos and len(x) <= 32 and bos not in x[1:], x
PY

# the T5 study's variants, on a tokenizer with sentinels
tfm-tokenize train -q -m unigram -v 60 --extra-ids 12 -o t5.json corpus.txt
tfm-tokenize encode -t t5.json --document corpus.txt > t5_stream.txt
cat > t5.yaml <<END
model: {kind: encoder-decoder, n_layer: 1, n_head: 2, n_embd: 32, block_size: 48}
data: {text: corpus.txt, tokenizer: t5.json}
optim: {lr: 0.01}
schedule: {warmup: 5, decay: cosine}
train: {task: span-corruption, batch_size: 8, max_steps: 40, eval_interval: 20,
        eval_batches: 4, log_interval: 5, seed: 3}
END
for n in iid drop bert; do
    tfm-train -c t5.yaml --set train.noise=$n --dump-batches 30 > $n.jsonl
done
python3 - t5_stream.txt t5.json <<'PY' || fail "span-corruption's train.noise sequences"
import json, sys
stream = [int(t) for t in open(sys.argv[1]).read().split()]
tok = json.load(open(sys.argv[2]))
ids = {}
def walk(o):
    if isinstance(o, dict):
        if isinstance(o.get("content"), str) and isinstance(o.get("id"), int):
            ids[o["content"]] = o["id"]
        for v in o.values():
            walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
walk(tok)
sent = [ids["<extra_id_%d>" % i] for i in range(12)]
eos = ids["</s>"]
text = " " + " ".join(map(str, stream)) + " "
def in_corpus(w):
    return " " + " ".join(map(str, w)) + " " in text
def rows(name):
    out = []
    for l in open(name + ".jsonl"):
        r = json.loads(l)
        x, y = r["input_ids"], r["target_ids"]
        assert x[-1] == eos and y[-1] == eos and len(x) <= 48 and len(y) <= 48
        out.append((x[:-1], y[:-1]))
    return out
# iid: the k-th sentinel of the input is the k-th run of noise in the
# target (whether the window starts with noise or not)
noise = total = 0
for x, y in rows("iid"):
    runs, cur = [], None
    for t in y:
        if t in sent:
            cur = None
        else:
            if cur is None:
                cur = []
                runs.append(cur)
            cur.append(t)
    used = [t for t in x if t in sent]
    assert used == sent[:len(used)] and len(used) == len(runs), (used, runs)
    w, k = [], 0
    for t in x:
        if t in sent:
            w += runs[k]
            k += 1
        else:
            w.append(t)
    assert len(w) <= 47 and in_corpus(w), "iid: not a window of the corpus"
    noise += sum(map(len, runs))
    total += len(w)
assert 0.08 < noise / total < 0.22, noise / total
# drop: input and target interleave into a window of 47 tokens
def interleaves(a, b, w):
    ok = [[False] * (len(b) + 1) for _ in range(len(a) + 1)]
    ok[0][0] = True
    for i in range(len(a) + 1):
        for j in range(len(b) + 1):
            if i and ok[i - 1][j] and a[i - 1] == w[i + j - 1]:
                ok[i][j] = True
            if j and ok[i][j - 1] and b[j - 1] == w[i + j - 1]:
                ok[i][j] = True
    return ok[len(a)][len(b)]
for x, y in rows("drop"):
    assert len(x) + len(y) == 47 and not set(x + y) & set(sent)
    assert any(interleaves(x, y, stream[s:s + 47]) for s in range(len(stream) - 46)
               if stream[s] in (x[:1] + y[:1])), "drop: not a window of the corpus"
# bert: the target is the window, the input it with some tokens masked
masked = total = 0
for x, y in rows("bert"):
    assert len(x) == len(y) == 47 and in_corpus(y)
    diff = [(a, b) for a, b in zip(x, y) if a != b]
    masked += sum(a == sent[0] for a, b in diff)
    total += len(y)
# 0.15 x 0.9 of the tokens become <extra_id_0> (a few more by chance: a
# masked token equal to the original is not counted)
assert 0.08 < masked / total < 0.2, masked / total
PY
# a few steps of each: the loss falls
for n in iid drop bert; do
    tfm-train -q -c t5.yaml --set train.noise=$n --threads 1 -o $n
    first=$(awk -F'\t' 'NR == 2 { print $2 }' $n/log.tsv)
    last=$(awk -F'\t' 'NR > 1 && $3 != "" { v = $3 } END { print v }' $n/log.tsv)
    awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 0.5) }' ||
        fail "train.noise $n: loss did not fall: $first (training, step 5) -> $last (validation)"
done

# what the tasks cannot run
expect_fail 1 "t5.json: no mask token (<mask> or [MASK]): train.task denoise replaces each noise span with one; train a tokenizer with it (tfm-tokenize train --special '<mask>'" \
    tfm-train -q -c bart.yaml --set data.tokenizer=t5.json -o e
[ ! -e e ] || fail "a refused start left a run directory"
expect_fail 1 "train.task denoise needs model.kind encoder-decoder" \
    tfm-train -q -c bart.yaml --set model.kind=decoder -o e
expect_fail 1 "data.train with train.task denoise: give the raw text as data.text" \
    tfm-train -q -c bart.yaml --set data.text= --set data.train=train.npy -o e
expect_fail 1 "model.block_size 2 is too short to denoise" \
    tfm-train -q -c bart.yaml --set model.block_size=2 -o e
expect_fail 1 "bart.json: no sentinel <extra_id_0>: train.noise bert masks with <extra_id_0>" \
    tfm-train -q -c t5.yaml --set data.tokenizer=bart.json --set train.noise=bert -o e
expect_fail 1 "train.noise iid needs one per run of noise tokens" \
    tfm-train -q -c t5.yaml --set data.tokenizer=bart.json --set train.noise=iid -o e
expect_fail 2 "train.noise" tfm-train -q -c t5.yaml --set train.noise=spam -o e
echo ok
