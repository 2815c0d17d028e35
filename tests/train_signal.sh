#!/bin/sh
# SIGTERM and SIGINT save a checkpoint and exit 0; the run then resumes.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
for sig in TERM INT; do
    rm -rf r
    tfm-train -q -c run.yaml --threads 1 --set train.max_steps=100000000 \
        --set train.eval_interval=0 --set train.log_interval=1 -o r &
    pid=$!
    # Wait until the loop runs (the handlers are installed before it).
    i=0
    while [ "$( (cat r/log.tsv 2>/dev/null || :) | wc -l)" -lt 3 ]; do
        i=$((i + 1)); [ $i -lt 600 ] || { kill -9 $pid; fail "training did not start"; }
        sleep 0.1
    done
    kill -$sig $pid
    st=0; wait $pid || st=$?
    [ $st = 0 ] || fail "SIG$sig: exit status $st"
    [ -f r/state.safetensors ] && [ -f r/model.safetensors ] || fail "SIG$sig: nothing saved"
    ls r | grep -q tmp && fail "SIG$sig: temporary files left: $(ls r)"
    # resumes from where it stopped
    tfm-train -o r --threads 1 --steps 2 2> err.txt
    grep -q "resuming r at step [1-9]" err.txt || { cat err.txt; fail "SIG$sig: no resume"; }
done
# One writer per run directory: a second tfm-train on a running one is
# refused, and the first goes on undisturbed.
rm -rf r
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=100000000 \
    --set train.eval_interval=0 --set train.log_interval=1 -o r &
pid=$!
i=0
while [ "$( (cat r/log.tsv 2>/dev/null || :) | wc -l)" -lt 3 ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { kill -9 $pid; fail "training did not start"; }
    sleep 0.1
done
set +e; tfm-train -q -c run.yaml -o r --threads 1 2>err.txt; st=$?; set -e
[ $st = 1 ] && grep -q "^tfm-train: r: another tfm-train is writing" err.txt ||
    { kill -9 $pid; cat err.txt; fail "second writer: exit $st"; }
kill -TERM $pid
st=0; wait $pid || st=$?
[ $st = 0 ] && [ -f r/state.safetensors ] || fail "the first writer was disturbed: exit $st"

# SIGINT during start-up (here: while the text is being tokenized) saves
# nothing, says so, and leaves nothing: the next start is a clean one.
if [ -r /proc/self/status ]; then
    perl -e 'print "the cat sat on the mat and ran.\n" x 1000000' >big.txt
    printf 'the cat sat on the mat and ran.\n' >small.txt
    tfm-tokenize train -q --model char -o tok.json small.txt
    printf 'model: {n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}\n' >big.yaml
    printf 'data: {text: big.txt, tokenizer: tok.json}\ntrain: {max_steps: 3}\n' >>big.yaml
    rm -rf s0
    tfm-train -c big.yaml --threads 1 -o s0 2>err.txt &
    pid=$!
    # as soon as the handler is installed (SigCgt has SIGINT, bit 2)
    i=0
    while :; do
        m=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$pid/status 2>/dev/null || :)
        [ -n "$m" ] && [ $(( 0x$m & 2 )) -ne 0 ] && break
        i=$((i + 1)); [ $i -lt 3000 ] || { kill -9 $pid; fail "no SIGINT handler"; }
        sleep 0.01
    done
    kill -INT $pid
    st=0; wait $pid || st=$?
    [ $st = 0 ] || { cat err.txt; fail "SIGINT at start-up: exit $st"; }
    if grep -q "interrupted before the first step: nothing saved" err.txt; then
        grep -q "saved step" err.txt && fail "SIGINT at start-up: claims a save"
        [ ! -e s0 ] || fail "SIGINT at start-up left $(ls s0)"
    else
        # the machine was slow: the signal came after the first step
        grep -q "interrupted: saved step [1-9]" err.txt || { cat err.txt; fail "SIGINT message"; }
    fi
    tfm-train -q -c big.yaml --threads 1 -o s0 || fail "no clean start after SIGINT"
fi

# kill -9 while checkpoints are written every step: the last one loads.
rm -rf k
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=100000000 --set train.eval_interval=0 \
    --set train.log_interval=1 --set train.checkpoint_interval=1 -o k &
pid=$!
i=0
while [ "$( (cat k/log.tsv 2>/dev/null || :) | wc -l)" -lt 20 ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { kill -9 $pid; fail "training did not start"; }
    sleep 0.05
done
kill -9 $pid
wait $pid || :
tfm-train -o k --threads 1 --steps 1 2> err.txt || { cat err.txt; fail "no resume after kill -9"; }
ls k | grep -q tmp && fail "temporary files left after resume: $(ls k)"
echo ok
