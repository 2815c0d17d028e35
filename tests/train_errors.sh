#!/bin/sh
# Bad input is a clear error or a clean stop, never a crash: ids outside the
# vocabulary, data shorter than the context, a corrupt or foreign
# checkpoint, a diverging run (NaN), a tokenizer larger than the model.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data

expect_fail 1 "is outside the vocabulary (size 50)" \
    tfm-train -q -c run.yaml --set model.vocab_size=50 -o v
grep -q "^tfm-train: train.npy: token id [0-9]* at position [0-9]* is" err.txt || fail "id message"
printf 'the end' | make_npy short.npy
expect_fail 1 "short.npy: 7 tokens, fewer than block_size + 1 = 17" \
    tfm-train -q -c run.yaml --set data.train=short.npy -o s
expect_fail 1 "missing.npy" tfm-train -q -c run.yaml --set data.train=missing.npy -o s
printf 'not a numpy file' > junk.npy
expect_fail 1 "junk.npy" tfm-train -q -c run.yaml --set data.train=junk.npy -o s
expect_fail 1 "must be divisible" tfm-train -q -c run.yaml --set model.n_head=3 -o s

tfm-train -q -c run.yaml --threads 1 -o c --steps 10
cp c/state.safetensors state.good
cp c/model.safetensors model.good

# another model shape in the same run directory
expect_fail 1 "c/state.safetensors: tensor 'wte.weight' is F32 [117, 16] but the configuration needs F32 [117, 32]" \
    tfm-train -q -c run.yaml --set model.n_embd=32 -o c

# truncated, and bytes flipped in the header and in the data
size=$(wc -c < state.good)
for cut in 4 100 $((size / 2)) $((size - 1)); do
    head -c $cut state.good > c/state.safetensors
    expect_fail 1 "c/state.safetensors" tfm-train -q -c run.yaml -o c
done
for off in 3 9 60 200 700 $((size / 2)) $((size - 5)); do
    cp state.good c/state.safetensors
    printf '\001' | dd of=c/state.safetensors bs=1 seek=$off conv=notrunc 2>/dev/null
    expect_fail 1 "c/state.safetensors" tfm-train -q -c run.yaml -o c
done
# ... where the model file is intact, an explicit option continues from its
# weights and step with a fresh optimizer
grep -q -- "--fresh-optimizer" err.txt || fail "corrupt state: no --fresh-optimizer hint"
mkdir fresh && cp c/model.safetensors c/state.safetensors c/log.tsv fresh/
tfm-train -o fresh --fresh-optimizer --steps 2 2>err.txt || { cat err.txt; fail "--fresh-optimizer"; }
grep -q "continuing fresh at step 10 .* fresh optimizer" err.txt || { cat err.txt; fail "--fresh-optimizer message"; }
tfm-train -q -o fresh --steps 1 || fail "no resume after --fresh-optimizer"
expect_fail 1 "fresh2: no model.safetensors to continue from" \
    tfm-train -q -c run.yaml -o fresh2 --fresh-optimizer
cp state.good c/state.safetensors

# the summary says "1 thread", not "1 threads"
tfm-train -c run.yaml --threads 1 -o th --steps 1 2>err.txt
grep -q "ms/step on 1 thread$" err.txt || { cat err.txt; fail "summary: 1 thread"; }

# a run already past train.max_steps says so (and no "step 10/5")
tfm-train -o c --set train.max_steps=5 2>err.txt || fail "past max_steps: exit status"
grep -q "c is at step 10, already past train.max_steps 5" err.txt || { cat err.txt; fail "past max_steps message"; }
grep -q "10/5" err.txt && fail "past max_steps: step 10/5 printed"

# run directories: parents are made, a file is not a directory, and a start
# that fails leaves nothing behind
tfm-train -q -c run.yaml -o p/q/run --steps 1 || fail "-o with missing parents"
[ -f p/q/run/state.safetensors ] || fail "no checkpoint in p/q/run"
: > plain
expect_fail 1 "tfm-train: plain: not a directory" tfm-train -q -c run.yaml -o plain
expect_fail 1 "tfm-train: plain: not a directory" tfm-train -q -o plain
expect_fail 1 "tfm-train: plain: not a directory" tfm-train -q -c run.yaml -o plain/run
expect_fail 1 "not finite" tfm-train -q -c run.yaml -o new/run --set optim.lr=1e6 \
    --set optim.grad_clip=0 --set schedule.warmup=0 --set schedule.decay=constant
grep -q "is kept in" err.txt && fail "a failed start claims a checkpoint"
[ ! -e new ] || fail "a failed start left $(find new)"

# out of memory: a message with the program's name (not "tfm:"); ASan
# reserves more address space than the limit
if [ -z "${TFM_SANITIZED:-}" ]; then
    set +e
    (ulimit -v 1500000; tfm-train -q -c run.yaml --set model.n_embd=4096 --set model.n_layer=24 \
        --set model.n_head=32 -o oom) 2>err.txt
    st=$?; set -e
    [ $st = 1 ] && grep -q "^tfm-train: out of memory" err.txt || { cat err.txt; fail "out of memory: exit $st"; }
fi

# divergence: stop without saving, keep the last good checkpoint
expect_fail 1 "is kept in c" tfm-train -q -c run.yaml -o c --set optim.lr=1e6 \
    --set optim.grad_clip=0 --set schedule.warmup=0 --set schedule.decay=constant
grep -q "not finite" err.txt || fail "no NaN message"
cmp state.good c/state.safetensors || fail "state changed by a diverged run"
cmp model.good c/model.safetensors || fail "model changed by a diverged run"
# ... and it still resumes
tfm-train -q -c run.yaml -o c --steps 2

# a tokenizer larger than the model
if command -v tfm-tokenize >/dev/null; then
    tfm-tokenize train --model char -o tok.json corpus.txt
    expect_fail 1 "smaller than the vocabulary of tokenizer tok.json" \
        tfm-train -q -c run.yaml --set data.tokenizer=tok.json --set model.vocab_size=5 -o t
fi
echo ok
