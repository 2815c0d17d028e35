#!/bin/sh
# The unit tests whose promises are bitwise (the packed and direct products
# give BLIS's own bits; an embedding is the same alone or in any batch; the
# decode step and a beam search through its cache match the whole-sequence
# forward) under every BLIS kernel family tfm chooses from that this host
# can run: skx (BLIS_ARCH_TYPE=0) with AVX-512F, haswell (3) with AVX2 and
# FMA.  The rest of `make check` runs on the host's own choice;
# scripts/check runs its sanitized pass on the other family where there is
# one.
set -u
b=${TFM_BUILDDIR:-.}
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) || { echo "no /proc/cpuinfo: skipped"; exit 77; }
has() { case " ${flags#*:} " in *" $1 "*) return 0 ;; esac; return 1; }
archs=
has avx512f && archs="$archs 0"
has avx2 && has fma && archs="$archs 3"
[ -n "$archs" ] || { echo "neither AVX-512F nor AVX2: skipped"; exit 77; }
status=0
for a in $archs; do
    for t in lib/tensor/gemm_test lib/nn/attention_test lib/infer/embed_test lib/model/decode_test \
             lib/infer/beam_cache_test; do
        if BLIS_ARCH_TYPE=$a "$b/$t" >"$b/arch_test.$a.log" 2>&1; then
            echo "PASS: BLIS_ARCH_TYPE=$a $t"
        else
            echo "FAIL: BLIS_ARCH_TYPE=$a $t"; tail -n 20 "$b/arch_test.$a.log"; status=1
        fi
    done
done
rm -f "$b"/arch_test.*.log
exit $status
