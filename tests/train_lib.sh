# Shared by tests/train_*.sh (sourced, not a test itself).
set -eu
: "${TFM_BUILDDIR:=.}" "${TFM_SRCDIR:=..}"
command -v tfm-train >/dev/null || PATH="$TFM_BUILDDIR:$PATH"
command -v perl >/dev/null || { echo "perl is needed to make test data"; exit 77; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tfm-train-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# A deterministic little corpus with structure a small model learns quickly.
make_corpus() {
    perl -e '
        my @w = qw(the cat dog sat ran on a mat log and then slept ate fish bread);
        my $s = 12345;
        sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
        for my $line (1 .. $ARGV[0]) {
            my @l = map { $w[r() % @w] } 1 .. 3 + r() % 5;
            print join(" ", @l), ".\n";
        }' "$1"
}

# stdin bytes -> 1-D uint16 .npy of the byte values (ids < 128 for ASCII).
make_npy() {
    perl -e '
        local $/; my $d = <STDIN>; my @b = unpack("C*", $d);
        my $h = "{\x27descr\x27: \x27<u2\x27, \x27fortran_order\x27: False, \x27shape\x27: (" . scalar(@b) . ",), }";
        my $pad = 64 - (10 + length($h) + 1) % 64; $pad = 0 if $pad == 64;
        $h .= " " x $pad . "\n";
        print "\x93NUMPY\x01\x00", pack("v", length $h), $h, pack("v*", @b);' > "$1"
}

# A small config: 1 layer, width 16, context 16.
write_config() {
    cat > "$1" <<END
model: {n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}
data: {train: train.npy, val: val.npy}
optim: {lr: 0.01, weight_decay: 0.1, beta2: 0.99}
schedule: {warmup: 5, decay: cosine, min_lr: 0.001}
train: {batch_size: 4, max_steps: 40, eval_interval: 20, eval_batches: 4, log_interval: 5, seed: 7}
END
}

setup_data() {
    make_corpus 400 > corpus.txt
    head -c 12000 corpus.txt | make_npy train.npy
    tail -c 2000 corpus.txt | make_npy val.npy
    write_config run.yaml
}

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_fail STATUS PATTERN cmd...: the command exits STATUS with PATTERN on stderr.
expect_fail() {
    want=$1 pat=$2; shift 2
    set +e; "$@" > out.txt 2> err.txt; st=$?; set -e
    [ "$st" = "$want" ] || { cat err.txt >&2; fail "'$*' exited $st, expected $want"; }
    grep -qF -- "$pat" err.txt || { cat err.txt >&2; fail "'$*': no '$pat' in stderr"; }
}
