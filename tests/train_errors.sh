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
expect_fail 1 "model.n_kv_head (3) must divide model.n_head (4)" \
    tfm-train -q -c run.yaml --set model.n_head=4 --set model.n_kv_head=3 -o s
expect_fail 1 "model.attention_window (100000) is larger than the context, model.block_size" \
    tfm-train -q -c run.yaml --set model.attention_window=100000 -o s
expect_fail 1 "model.forced_bos, model.source_bos with model.kind decoder: these keys are for an encoder-decoder" \
    tfm-train -q -c run.yaml --set model.forced_bos=0 --set model.source_bos=true -o s

tfm-train -q -c run.yaml --threads 1 -o c --steps 10
cp c/state.safetensors state.good
cp c/model.safetensors model.good

# another model in the same run directory: refused before any tensor is
# read, naming the keys (with -c or with the run's own configuration), and
# without offering --fresh-optimizer, which cannot help
expect_fail 1 "cannot resume c: model.n_embd 32 (the run's: 16): a run keeps its model's shape" \
    tfm-train -q -c run.yaml --set model.n_embd=32 -o c
expect_fail 1 "cannot resume c: model.n_layer 2 (the run's: 1)" \
    tfm-train -q -c run.yaml --set model.n_layer=2 -o c
grep -q -- "--fresh-optimizer" err.txt && fail "a shape mismatch offers --fresh-optimizer"
expect_fail 1 "cannot resume c: model.positions rope (the run's: learned), model.norm post (the run's: pre), model.activation relu (the run's: gelu)" \
    tfm-train -q -o c --set model.positions=rope --set model.norm=post --set model.activation=relu
expect_fail 1 "cannot resume c: model.kind encoder (the run's: decoder)" \
    tfm-train -q -o c --set model.kind=encoder
cmp state.good c/state.safetensors || fail "state changed by a refused resume"

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
# weights and step with a fresh optimizer (the message says so, with -c or
# without: then the configuration itself is read from the damaged file)
grep -q -- "damaged or truncated (rerun with --fresh-optimizer" err.txt ||
    { cat err.txt; fail "corrupt state: no --fresh-optimizer hint"; }
head -c $((size / 2)) state.good > c/state.safetensors
expect_fail 1 "data buffer: the training state is damaged or truncated (rerun with --fresh-optimizer" \
    tfm-train -q -c run.yaml -o c
head -c 100 state.good > c/state.safetensors
expect_fail 1 "the training state is damaged or truncated (rerun with --fresh-optimizer" \
    tfm-train -q -o c
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

# a warmup as long as the run is a warning (the rate never decays)
tfm-train -c run.yaml --threads 1 --set schedule.warmup=50 --set train.max_steps=10 -o wu 2>err.txt ||
    { cat err.txt; fail "long warmup"; }
grep -qF "warning: schedule.warmup 50 is not below train.max_steps 10: the learning rate rises for the whole run (to 0.002 at the last step)" err.txt ||
    { cat err.txt; fail "no warmup warning"; }
tfm-train -c run.yaml --threads 1 --set train.max_steps=10 -o wu2 2>err.txt
grep -q "warning" err.txt && { cat err.txt; fail "a warning for warmup 5 of 10"; }

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
# an output that cannot be created says why, naming the directory
expect_fail 1 "tfm-train: nodir/c.svg: cannot create: the directory 'nodir' does not exist: No such file or directory" \
    tfm-train --plot c -o nodir/c.svg
expect_fail 1 "tfm-train: plain/m.safetensors: cannot create: 'plain' is not a directory: Not a directory" \
    tfm-train --convert bf16 c/model.safetensors -o plain/m.safetensors
if [ "$(id -u)" != 0 ]; then # root writes anywhere
    mkdir ro && chmod 555 ro
    expect_fail 1 "tfm-train: ro/run: cannot create directory: the directory 'ro' is not writable: Permission denied" \
        tfm-train -q -c run.yaml -o ro/run
    expect_fail 1 "tfm-train: ro/c.svg: cannot create: the directory 'ro' is not writable: Permission denied" \
        tfm-train --plot c -o ro/c.svg
    chmod 755 ro
fi
expect_fail 1 "not finite" tfm-train -q -c run.yaml -o new/run --set optim.lr=1e6 \
    --set optim.grad_clip=0 --set schedule.warmup=0 --set schedule.decay=constant
grep -q "is kept in" err.txt && fail "a failed start claims a checkpoint"
grep -q "stopped; no checkpoint was written$" err.txt || { cat err.txt; fail "no checkpoint: message"; }
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

# a first session that diverges after its first checkpoint keeps what it
# wrote: its log, curves and best model with the checkpoint
expect_fail 1 "is kept in g" tfm-train -q -c run.yaml -o g --threads 1 --set optim.lr=100 \
    --set optim.grad_clip=0 --set schedule.warmup=0 --set schedule.decay=constant \
    --set schedule.min_lr=0 --set train.eval_interval=2 --set train.log_interval=1
grep -q "the gradient is not finite at step" err.txt || { cat err.txt; fail "no NaN in g"; }
for f in log.tsv curves.svg best.safetensors model.safetensors state.safetensors; do
    [ -s g/$f ] || fail "a first session that diverged after its checkpoint lost $f"
done
[ "$(tail -n 1 g/log.tsv | cut -f 1)" -ge 2 ] || fail "g/log.tsv lost its lines"
# ... and so does one whose write fails after its first checkpoint (as a
# full disk: here best.safetensors cannot be written at the evaluation)
mkdir -p w/best.safetensors
expect_fail 1 "w/best.safetensors: is a directory" tfm-train -q -c run.yaml -o w --threads 1 \
    --set train.checkpoint_interval=1 --set train.eval_interval=4 --set train.log_interval=1
[ "$(tail -n 1 w/log.tsv | cut -f 1)" = 3 ] || fail "a write failure at step 4 lost w/log.tsv"
[ -s w/state.safetensors ] || fail "a write failure at step 4 lost the checkpoint of step 3"

# --fresh-optimizer on a LoRA run (its model.safetensors is the merged
# model, without adapters) is refused, not a silent full fine-tune, and
# the run directory is kept as it was
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=20 -o lbase
tfm-train -q -c run.yaml --threads 1 --set train.init=lbase/model.safetensors \
    --set train.lora.r=2 --set train.max_steps=20 -o lrun --steps 10
cp lrun/state.safetensors lrun.state
expect_fail 1 "tfm-train: lrun: --fresh-optimizer on a LoRA run: it resumes from its state.safetensors" \
    tfm-train -q -o lrun --fresh-optimizer --threads 1
cmp lrun.state lrun/state.safetensors || fail "a refused --fresh-optimizer changed the state"
[ -s lrun/log.tsv ] || fail "a refused --fresh-optimizer deleted the log"

# weights that turn NaN while the loss stays finite (Adam with optim.eps 0
# on the untied rows of bytes no batch has): never saved, and the message
# names the last good step, or that there is none
tfm-train -q -c run.yaml --threads 1 --set model.tie_embeddings=false --set train.max_steps=20 -o nan
cp nan/model.safetensors nan.good
expect_fail 1 "the weights are not finite at step 40 (NaN or infinity): stopped without saving; the last good checkpoint (step 20) is kept in nan" \
    tfm-train -q -o nan --threads 1 --set optim.eps=0 --set train.max_steps=60
cmp nan.good nan/model.safetensors || fail "NaN weights saved"
expect_fail 1 "not finite" \
    tfm-train -q -c run.yaml --threads 1 --set model.tie_embeddings=false --set optim.eps=0 -o nan2
grep -q "stopped.*; no checkpoint was written$" err.txt || { cat err.txt; fail "no checkpoint: message"; }
[ ! -e nan2 ] || fail "a start with NaN weights left $(find nan2)"

# a tokenizer larger than the model
if command -v tfm-tokenize >/dev/null; then
    tfm-tokenize train --model char -o tok.json corpus.txt
    expect_fail 1 "smaller than the vocabulary of tokenizer tok.json" \
        tfm-train -q -c run.yaml --set data.tokenizer=tok.json --set model.vocab_size=5 -o t
fi
echo ok
