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
