#!/bin/sh
# Shared cores: the default thread count follows the CPUs this process may
# use (taskset), more threads than that are capped with a warning, two runs
# at once on the same cores each take about twice their solo time (not 30
# times: waits must not spin against each other), and tfm-train honours
# SIGTERM within a second whatever --threads says.  Times are compared with
# solo runs measured here, with generous factors, so a loaded machine does
# not make the test fail.
set -eu
: "${TFM_BUILDDIR:=$(pwd)}" "${TFM_SRCDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
PATH="$TFM_BUILDDIR:$PATH"
command -v taskset >/dev/null || { echo "taskset is needed"; exit 77; }
command -v perl >/dev/null || { echo "perl is needed"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tfm-threads.XXXXXX")
pids=
trap 'for p in $pids; do kill -9 $p 2>/dev/null || :; done; rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
unset TFM_NUM_THREADS OMP_NUM_THREADS OMP_WAIT_POLICY GOMP_SPINCOUNT || :

now_ms() { perl -MTime::HiRes=time -e 'printf "%d\n", time * 1000'; }
# run_ms CMD...: milliseconds the command takes; at most LIMIT seconds.
LIMIT=60
run_ms() {
    t0=$(now_ms)
    timeout -s KILL $LIMIT "$@" >/dev/null 2>>err.txt || fail "failed or timed out: $*"
    echo $(($(now_ms) - t0))
}
# pair_ms CMD...: the longer of two runs of CMD started together.
pair_ms() {
    t0=$(now_ms)
    timeout -s KILL $LIMIT "$@" >/dev/null 2>>err.txt & p1=$!
    timeout -s KILL $LIMIT "$@" >/dev/null 2>>err.txt & p2=$!
    pids="$p1 $p2"
    s1=0; wait $p1 || s1=$?
    s2=0; wait $p2 || s2=$?
    pids=
    [ $s1 = 0 ] && [ $s2 = 0 ] || fail "failed or timed out together: $*"
    echo $(($(now_ms) - t0))
}
# within WHAT MS BASE FACTOR: MS <= FACTOR * BASE + 1 s (the second absorbs
# start-up and noise in short runs).
within() {
    echo "$1: $2 ms (against $3 ms)"
    [ "$2" -le $(($4 * $3 + 1000)) ] ||
        fail "$1: $2 ms, more than $4 x $3 ms (+1 s)"
}

perl -e 'srand 3; for (1 .. 400) { print join(" ", map { (qw(the cat dog sat ran on a mat log))[rand 9] } 1 .. 8), ".\n" }' >corpus.txt
# Large enough that its products run on several threads.
"$TFM_BUILDDIR/tests/mkmodel" m.st --text corpus.txt --layers 2 --heads 4 --embd 256 \
    --context 64 --seed 1
head -c 12000 corpus.txt | perl -e '
    local $/; my @b = unpack("C*", <STDIN>);
    my $h = "{\x27descr\x27: \x27<u2\x27, \x27fortran_order\x27: False, \x27shape\x27: (" . scalar(@b) . ",), }";
    $h .= " " x (63 - (10 + length $h) % 64) . "\n";
    print "\x93NUMPY\x01\x00", pack("v", length $h), $h, pack("v*", @b);' >train.npy
cat >run.yaml <<END
model: {n_layer: 2, n_head: 4, n_embd: 256, block_size: 64}
data: {train: train.npy, val: train.npy}
train: {batch_size: 8, max_steps: 4, eval_interval: 0, log_interval: 100, seed: 7, checkpoint_interval: 0}
END

EVAL="tfm-eval -q perplexity -m m.st corpus.txt"
GEN="tfm-generate -q -m m.st --seed 1 --ignore-eos --no-cache -n 30 --batch 8 a b c d e f g h"
# each run in a directory of its own (two run at once)
printf '%s\n' 'exec tfm-train -q -c run.yaml -o "$(mktemp -d r.XXXXXX)" "$@"' >train.sh
TRAIN="sh train.sh"

for prog in eval gen train; do
    case $prog in
    eval) cmd=$EVAL ;;
    gen) cmd=$GEN ;;
    train) cmd=$TRAIN ;;
    esac
    # One core: the default is one thread, as fast as --threads 1.
    one=$(run_ms taskset -c 0 $cmd --threads 1)
    [ $prog = eval ] && one_eval=$one
    def=$(run_ms taskset -c 0 $cmd)
    within "$prog on one core, default threads" "$def" "$one" 3
    # Two at once on one core: about twice one run.
    both=$(pair_ms taskset -c 0 $cmd)
    within "$prog: two runs on one core" "$both" "$one" 6
    # Two at once on two cores, two threads each.
    if taskset -c 0,1 true 2>/dev/null; then
        solo=$(run_ms taskset -c 0,1 $cmd --threads 2)
        both=$(pair_ms taskset -c 0,1 $cmd --threads 2)
        within "$prog: two 2-thread runs on two cores" "$both" "$solo" 6
    fi
done

# More threads than CPUs: capped, with a warning naming the program.
: >err.txt
t=$(run_ms taskset -c 0 tfm-eval perplexity -m m.st --threads 4 corpus.txt)
within "tfm-eval --threads 4 on one core" "$t" "$one_eval" 6
grep -q "^tfm-eval: .*--threads 4.*1 CPU" err.txt || { cat err.txt >&2; fail "no warning for --threads 4"; }
grep -q "1 thread" err.txt || { cat err.txt >&2; fail "--threads 4 not capped to 1"; }

# SIGTERM within a second, whatever the thread count; products split across
# the threads (not the batch), where waits in BLIS dominate.
for n in 8 1000; do
    rm -rf s
    taskset -c 0 tfm-train -q -c run.yaml --threads $n --data-parallel no --set train.max_steps=100000000 \
        --set train.log_interval=1 -o s 2>/dev/null &
    pid=$!; pids=$pid
    i=0
    while [ "$( (cat s/log.tsv 2>/dev/null || :) | wc -l)" -lt 3 ]; do
        i=$((i + 1)); [ $i -lt 300 ] || fail "--threads $n: training did not start"
        sleep 0.1
    done
    t0=$(now_ms)
    kill -TERM $pid
    # wait returns once the program exits; a watchdog ends it after 20 s
    (sleep 20; kill -9 $pid) >/dev/null 2>&1 & dog=$!
    st=0; wait $pid || st=$?
    t=$(($(now_ms) - t0)); pids=
    kill $dog 2>/dev/null || :
    [ $st = 0 ] || fail "--threads $n: SIGTERM: exit status $st"
    # (a second asked, three allowed for a loaded machine)
    [ $t -le 3000 ] || fail "--threads $n: SIGTERM took $t ms"
done
echo ok
