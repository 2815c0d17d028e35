#!/bin/sh
# The library's layers point downward only: every #include "layer/..." in
# lib/<layer>/ (code and unit tests alike) names the layer itself or one it
# may use, as listed here.  A new edge is a decision: change the table (and
# the layout in README) in the same commit, with the reason.
#
#   base     errors, memory, files, rng, threads, options: uses nothing
#   io       JSON/YAML, the config schema engine, safetensors, .npy
#   text     UTF-8, pre-tokenizers, tokenizers
#   metrics  scores of predictions against references: no model
#   tensor   GEMM and kernels
#   nn       layers with their backward
#   model    the transformer, tfm's files and the decode step, its config
#            keys and the run configuration a model file records
#   convert  HuggingFace checkpoints as models: one file per family
#   lm       the model + tokenizer bundle a program opens (tfm's files and
#            convert's checkpoints)
#   data     example readers, their encodings, and a fine-tuned model's
#            predictions over them (training's validation and tfm-eval's)
#   train    tasks, optimizers, the loop: never infer
#   infer    decoding, generation, evaluation, embeddings: never train
set -eu
src=${TFM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}

allowed() {
    case $1 in
    base) echo "" ;;
    io) echo "base" ;;
    text) echo "base io" ;;
    metrics) echo "base io text" ;;
    tensor) echo "base" ;;
    nn) echo "base tensor" ;;
    model) echo "base io text tensor nn" ;;
    convert) echo "base io text tensor nn model" ;;
    lm) echo "base io text tensor nn model convert" ;;
    data) echo "base io text metrics tensor nn model convert lm" ;;
    train) echo "base io text metrics tensor nn model convert lm data" ;;
    infer) echo "base io text metrics tensor nn model convert lm data" ;;
    *) echo "?" ;;
    esac
}

bad=0
for dir in "$src"/lib/*/; do
    layer=$(basename "$dir")
    ok=$(allowed "$layer")
    if [ "$ok" = "?" ]; then
        echo "FAIL: lib/$layer is not in the table of tests/layers.sh" >&2
        bad=1
        continue
    fi
    for f in "$dir"*.c "$dir"*.h; do
        [ -e "$f" ] || continue
        # a header without its layer (autoconf's config.h aside) could be
        # cmd/'s, found through the include path
        for h in $(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^/"]*\)".*|\1|p' "$f"); do
            [ "$h" = config.h ] && continue
            echo "FAIL: lib/$layer/$(basename "$f") includes \"$h\": name its layer (\"$layer/$h\")" >&2
            bad=1
        done
        # "layer/file.h" includes: the layer is the part before the slash
        for used in $(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z0-9_]*\)/.*|\1|p' "$f" | sort -u); do
            [ "$used" = "$layer" ] && continue
            case " $ok " in
            *" $used "*) ;;
            *)
                echo "FAIL: lib/$layer/$(basename "$f") includes $used/: $layer may use only: ${ok:-nothing}" >&2
                bad=1
                ;;
            esac
        done
    done
done
exit $bad
