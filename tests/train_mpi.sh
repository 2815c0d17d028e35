#!/bin/sh
# Data-parallel tfm-train over MPI, 2 ranks on this machine: the same run as
# one process with the whole batch, the same bits whether the gradient sum
# overlaps backward or follows it, resumable with the same or another
# number of ranks, and stopped as a whole by a signal to any rank.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
if [ -z "${TFM_MPIRUN:-}" ]; then
    echo "SKIP: tfm was built without MPI (install libopenmpi-dev and openmpi-bin, then configure)"
    exit 77
fi
if [ -n "${TFM_SANITIZED:-}" ]; then
    # Open MPI's own allocations at start-up are reported as leaks, and its
    # launcher spawns programs the sanitizer runtime does not expect.
    echo "SKIP: MPI runs are not tested under the sanitizers (Open MPI's start-up leaks)"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # root on CI machines
# ranks on one machine talk through shared memory; Open MPI 5 (Debian 13)
# otherwise tries TCP too and warns on stderr when the machine's interfaces
# pair with nothing, which the checks below take for tfm's messages
export OMPI_MCA_btl=^tcp
# timeout: a rank stuck in a collective must fail the test, not hang it
mpi() { n=$1; shift; timeout 120 "$TFM_MPIRUN" --oversubscribe -np "$n" "$@"; }
setup_data

# The collectives themselves on 2 and 3 ranks.
mpi 2 "$TFM_BUILDDIR/lib/train/dist_test" >out.txt || fail "dist_test on 2 ranks"
grep -q "2 ranks ok" out.txt || fail "dist_test: $(cat out.txt)"
mpi 3 "$TFM_BUILDDIR/lib/train/dist_test" >out.txt || fail "dist_test on 3 ranks"

# compare A B: the train and validation losses of two logs agree to 1e-5
# relative, line by line, over the same steps.
compare() {
    paste "$1" "$2" | awk -F'\t' -v a="$1" -v b="$2" '
        NR == 1 { w = NF / 2; next }   # each log as wide as its task has metrics
        { n++
          if ($1 != $(1 + w)) { print "step " $1 " against " $(1 + w); bad = 1 }
          for (k = 2; k <= 3; k++) {
              x = $k; y = $(k + w)
              if ((x == "") != (y == "")) { print "step " $1 ": an evaluation in one only"; bad = 1 }
              if (x == "") continue
              d = x - y; if (d < 0) d = -d
              m = x < 0 ? -x : x
              if (d > 1e-5 * m) { print "step " $1 " column " k ": " x " against " y; bad = 1 }
          } }
        END { if (n == 0) { print "no steps"; bad = 1 } exit bad }' ||
        fail "$1 and $2 differ"
}

# tensors FILE: the tensor bytes of a safetensors file (its header holds
# the configuration, which names train.overlap)
tensors() {
    perl -e 'binmode STDIN; binmode STDOUT; read STDIN, $h, 8 or exit 1;
             read STDIN, $j, unpack("Q<", $h) or exit 1; local $/; print <STDIN>' < "$1"
}
# same_run A B: two run directories hold the same weights and the same
# losses, learning rates and gradient norms, bit for bit.
same_run() {
    tensors "$1/model.safetensors" > a.bin && tensors "$2/model.safetensors" > b.bin ||
        fail "$1, $2: no model files"
    [ -s a.bin ] && cmp -s a.bin b.bin || fail "$1 and $2: the weights differ"
    cut -f 1-5 "$1/log.tsv" > a.tsv
    cut -f 1-5 "$2/log.tsv" > b.tsv
    cmp -s a.tsv b.tsv || fail "$1 and $2: the logs differ"
}
# started PCT: the all-reduce report in err.txt says PCT% of the buckets
# started during backward
started() {
    grep -q "^tfm-train: 2 ranks: all-reduce of [0-9.]* MB a step in [0-9]* buckets (the last [0-9.]* MB; $1% started during backward)" err.txt ||
        { cat err.txt; fail "not $1% of the buckets started during backward"; }
}

# One process with the whole batch against 2 ranks with 2 and 3 of its 5
# rows, 2 micro-batches a step: the same loss curve (summation order aside).
# A bucket a tensor (train.bucket_mb 0), so that most of the sum overlaps
# backward.
opts="--threads 1 --set train.max_steps=20 --set train.log_interval=1 --set train.batch_size=5
--set train.grad_accum=2 --set train.eval_interval=10 --set train.checkpoint_interval=5
--set train.bucket_mb=0"
tfm-train -q -c run.yaml $opts -o one
mpi 2 tfm-train -c run.yaml $opts -o two 2>err.txt || { cat err.txt; fail "2 ranks"; }
[ "$(wc -l < two/log.tsv)" = 21 ] || fail "2 ranks: $(wc -l < two/log.tsv) log lines, not 21"
compare one/log.tsv two/log.tsv
started 100
# rank 0 alone speaks
[ "$(grep -c "parameters, vocabulary" err.txt)" = 1 ] || { cat err.txt; fail "messages from every rank"; }
# LoRA: only the adapters' gradients are summed, packed in one bucket (2
# adapters of 2·4·16 floats), not the frozen base's zeros: the same curve.
lora="--set train.init=one/model.safetensors --set train.lora.r=4 --set train.lora.targets=q,v"
tfm-train -q -c run.yaml $opts $lora -o lora1
mpi 2 tfm-train -c run.yaml $opts $lora -o lora2 2>err.txt || { cat err.txt; fail "LoRA, 2 ranks"; }
compare lora1/log.tsv lora2/log.tsv
grep -q "all-reduce of 0.00 MB a step in 1 buckets (the last 0.00 MB" err.txt ||
    { cat err.txt; fail "LoRA: not one bucket of the adapters"; }
cmp -s one/model.safetensors lora2/model.safetensors && fail "LoRA on 2 ranks changed nothing"
# The buckets summed after backward instead: the same sums, bit for bit.
mpi 2 tfm-train -c run.yaml $opts --set train.overlap=false -o two-off 2>err.txt ||
    { cat err.txt; fail "2 ranks, no overlap"; }
started 0
same_run two two-off
# ... and with 2 replicas a rank (unbound: mpirun pins a rank to a core),
# whose backward hands finished buckets on while the other thread computes.
set -- -c run.yaml --threads 2 --set train.max_steps=20 --set train.bucket_mb=0
mpi 2 --bind-to none tfm-train -q "$@" --data-parallel yes -o rep2 2>err.txt ||
    { cat err.txt; fail "2 ranks x 2 replicas"; }
mpi 2 --bind-to none tfm-train -q "$@" --data-parallel yes --set train.overlap=false \
    -o rep2-off 2>>err.txt || { cat err.txt; fail "2 ranks x 2 replicas, no overlap"; }
[ ! -s err.txt ] || { cat err.txt; fail "2 ranks x 2 replicas: not 2 threads"; }
same_run rep2 rep2-off

# With 4 rows, 2 ranks x 1 thread is 1 process x 2 replicas (the same split,
# gradients added in the same order): the same model, bit for bit.  Every
# checkpoint also compared the ranks' parameters (a difference is an error).
tfm-train -q -c run.yaml --threads 2 --data-parallel yes --set train.max_steps=20 -o rep
mpi 2 tfm-train -q -c run.yaml --threads 1 --set train.max_steps=20 -o two4
cmp rep/model.safetensors two4/model.safetensors || fail "2 ranks against 2 replicas"

# A 2-rank run resumed on 2 ranks continues identically.
mpi 2 tfm-train -q -c run.yaml $opts --steps 10 -o res
cp -r res res1
mpi 2 tfm-train -q -o res --threads 1 || fail "resume on 2 ranks"
cut -f 1-5 res/log.tsv > a.tsv
cut -f 1-5 two/log.tsv > b.tsv
cmp a.tsv b.tsv || fail "resumed 2-rank log differs"
cmp res/model.safetensors two/model.safetensors || fail "resumed 2-rank model differs"
# ... and on 1 process (the state is the same for any number of ranks), and
# a 1-process checkpoint on 2 ranks.
tfm-train -o res1 --threads 1 2>err.txt || { cat err.txt; fail "resume 2 ranks -> 1"; }
grep -q "resuming res1 at step 10" err.txt || { cat err.txt; fail "2 -> 1: no resume"; }
compare res1/log.tsv two/log.tsv
tfm-train -q -c run.yaml $opts --steps 10 -o one2
mpi 2 tfm-train -o one2 --threads 1 2>err.txt || { cat err.txt; fail "resume 1 -> 2 ranks"; }
grep -q "resuming one2 at step 10" err.txt || { cat err.txt; fail "1 -> 2: no resume"; }
compare one2/log.tsv one/log.tsv

# An encoder-decoder with token-budget batches (rows vary per step, some
# batches a single pair, so a rank may hold none): the one-process curve.
perl -e '
    my $s = 5;
    sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
    for (1 .. 200) {
        my $w = join "", map { chr(97 + r() % 6) } 1 .. 1 + r() % 10;
        print $w, "\t", scalar reverse($w), "\n";
    }' > pairs.tsv
tfm-tokenize train -q -m char --special '<pad>' --special '<s>' --special '</s>' -o p.json pairs.tsv
cat > s2s.yaml <<END
model: {kind: encoder-decoder, n_layer: 1, n_head: 2, n_embd: 16, block_size: 12}
data: {text: pairs.tsv, tokenizer: p.json}
train: {max_steps: 12, max_tokens: 20, log_interval: 1, eval_interval: 6, seed: 2}
END
tfm-train -q -c s2s.yaml --threads 1 -o s2s1
set -- -c s2s.yaml --threads 1 --set train.bucket_mb=0
mpi 2 tfm-train -q "$@" -o s2s2 || fail "encoder-decoder on 2 ranks"
compare s2s1/log.tsv s2s2/log.tsv
mpi 2 tfm-train -q "$@" --set train.overlap=false -o s2s2-off ||
    fail "encoder-decoder on 2 ranks, no overlap"
same_run s2s2 s2s2-off

# BERT pre-training (post-LN, segments, the MLM head and NSP on the pooler):
# the same again.  Each head's mean runs over the whole batch's targets,
# which the ranks' rows share unevenly (masked positions follow the rows'
# lengths, NSP counts rows).
cat > mlm.yaml <<END
model: {kind: encoder, n_layer: 2, n_head: 2, n_embd: 16, block_size: 24, vocab_size: 128,
        norm: post, activation: gelu_exact, segments: 2, emb_norm: true, mlm_head: true,
        pooler: true, classes: 2, nsp: true}
data: {train: train.npy, val: val.npy, cls_id: 1, sep_id: 2, mask_id: 3, n_special: 4}
train: {task: mlm+nsp, batch_size: 4, max_steps: 16, eval_interval: 8, eval_batches: 4,
        log_interval: 1, seed: 7, short_seq_prob: 0.3}
END
tfm-train -q -c mlm.yaml --threads 1 -o mlm1
set -- -c mlm.yaml --threads 1 --set train.bucket_mb=0
mpi 2 tfm-train -q "$@" -o mlm2 || fail "encoder on 2 ranks"
compare mlm1/log.tsv mlm2/log.tsv
mpi 2 tfm-train -q "$@" --set train.overlap=false -o mlm2-off || fail "encoder on 2 ranks, no overlap"
same_run mlm2 mlm2-off

# More ranks than rows: refused on every rank.
set +e; mpi 3 tfm-train -q -c run.yaml --set train.batch_size=2 -o few 2>err.txt; st=$?; set -e
[ $st != 0 ] && grep -q "train.batch_size 2 is smaller than the number of ranks (3)" err.txt ||
    { cat err.txt; fail "3 ranks, 2 rows: exit $st"; }
[ ! -e few ] || fail "3 ranks, 2 rows: left $(ls few)"

# SIGTERM to one rank (here the last): every rank stops, rank 0 saves once,
# all exit 0, and the run resumes.
mpi 2 tfm-train -c run.yaml --threads 1 --set train.max_steps=100000000 \
    --set train.eval_interval=0 --set train.log_interval=1 -o sig 2>err.txt &
pid=$!
i=0
while [ "$( (cat sig/log.tsv 2>/dev/null || :) | wc -l)" -lt 5 ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { kill $pid; fail "2-rank training did not start"; }
    sleep 0.1
done
# the ranks: the tfm-train processes below this background job
below() { for c in $(ps -o pid= --ppid "$1"); do echo "$c"; below "$c"; done; }
ranks=""
for p in $(below $pid); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = tfm-train ] && ranks="$ranks $p"
done
[ "$(echo $ranks | wc -w)" = 2 ] || { kill $pid; fail "ranks not found: '$ranks'"; }
kill -TERM $(echo $ranks | awk '{ print $NF }')
st=0; wait $pid || st=$?
[ $st = 0 ] || { cat err.txt; fail "SIGTERM to one rank: exit status $st"; }
[ "$(grep -c "interrupted: saved step [1-9]" err.txt)" = 1 ] || { cat err.txt; fail "not one save"; }
[ -f sig/state.safetensors ] || fail "SIGTERM: nothing saved"
ls sig | grep -q tmp && fail "SIGTERM: temporary files left: $(ls sig)"
mpi 2 tfm-train -o sig --threads 1 --steps 2 2>err.txt || { cat err.txt; fail "no resume after SIGTERM"; }
grep -q "resuming sig at step [1-9]" err.txt || { cat err.txt; fail "SIGTERM: no resume"; }
echo ok
