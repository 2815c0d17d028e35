#!/bin/sh
# The block's kinds end to end (model.norm_type rmsnorm, model.ffn geglu
# and swiglu, model.attn_scale false, model.n_kv_head: multi-query attention
# in the decoder and the encoder-decoder, grouped-query in the encoder): a
# decoder, an encoder (masked LM) and a T5-shaped encoder-decoder are
# trained a few steps by tfm-train and their loss falls; then tfm-generate (the cached decode equal to recomputing the
# whole sequence, bfloat16 too), tfm-eval (perplexity, info, fill) and
# tfm-embed use them.  Bad combinations of the keys are refused by name.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
make_corpus 400 > corpus.txt
tfm-tokenize train -q -m char --special '<|endoftext|>' -o tok.json corpus.txt

# falls: the first validation loss is above the last
fell() {
    awk -F'\t' 'NR > 1 && $3 != "" { if (f == "") f = $3; l = $3 }
        END { if (!(l < f)) { print "val loss " f " -> " l; exit 1 } }' "$1/log.tsv" ||
        fail "$1: the validation loss did not fall"
}

# a decoder: RMSNorm, SwiGLU, unscaled attention, RoPE, no biases, heads
# 3 x 12 = 36 wide over n_embd 32 (model.head_dim) sharing one key/value
# head (model.n_kv_head 1: multi-query), dropout inside the
# feed-forward and after the final norm (their streams resume as the
# others do)
cat > dec.yaml <<END
model: {n_layer: 2, n_head: 3, head_dim: 12, n_kv_head: 1, n_embd: 32, block_size: 32,
        positions: rope, norm_type: rmsnorm, ffn: swiglu, attn_scale: false, bias: false, d_ff: 48,
        ffn_dropout: 0.1, final_dropout: 0.1}
data: {text: corpus.txt, tokenizer: tok.json}
optim: {lr: 0.01}
schedule: {warmup: 5, decay: cosine, min_lr: 0.001}
train: {batch_size: 8, max_steps: 60, eval_interval: 20, eval_batches: 4, log_interval: 10,
        seed: 5}
END
tfm-train -q -c dec.yaml --threads 1 -o dec
fell dec
tfm-train -q --dump-config -o dec > dec.dump
grep -q '^  norm_type: rmsnorm ' dec.dump && grep -q '^  ffn: swiglu ' dec.dump &&
    grep -q '^  attn_scale: false ' dec.dump && grep -q '^  head_dim: 12 ' dec.dump &&
    grep -q '^  n_kv_head: 1 ' dec.dump ||
    fail "the run's configuration lost the block's keys"
# resuming is bit-exact
tfm-train -q -c dec.yaml --threads 1 --set train.max_steps=30 -o r1
tfm-train -q -c dec.yaml --threads 1 --set train.max_steps=30 --steps 12 -o r2
tfm-train -q --threads 1 -o r2
cmp r1/model.safetensors r2/model.safetensors || fail "resumed run differs"

tfm-eval info -m dec/model.safetensors > info.tsv
grep -qx 'norm_type	rmsnorm' info.tsv && grep -qx 'ffn	swiglu' info.tsv &&
    grep -qx 'attn_scale	false' info.tsv && grep -qx 'head_dim	12' info.tsv &&
    grep -qx 'n_head	3' info.tsv && grep -qx 'n_kv_head	1' info.tsv &&
    grep -qx 'prefix_lm	false' info.tsv && grep -qx 'prefix_from	-' info.tsv ||
    { cat info.tsv >&2; fail "tfm-eval info"; }
G="tfm-generate -q --threads 1 -m dec/model.safetensors -n 24 --top-k 1"
printf 'the cat\nand then\n' > prompts.txt
$G < prompts.txt > cached.txt
$G --no-cache < prompts.txt > full.txt
[ "$(wc -l < cached.txt)" -eq 2 ] || fail "tfm-generate: $(wc -l < cached.txt) lines for 2 prompts"
cmp cached.txt full.txt || fail "the cached decode differs from recomputing the sequence"
$G --bf16 < prompts.txt > bf16.txt
[ "$(wc -l < bf16.txt)" -eq 2 ] || fail "tfm-generate --bf16"
tail -c 3000 corpus.txt > val.txt
tfm-eval perplexity -q --threads 1 -m dec/model.safetensors val.txt > ppl.txt
awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "perplexity") c = i }
    NR == 2 { p = $c } END { exit !(c && p > 1 && p < 40) }' ppl.txt ||
    { cat ppl.txt >&2; fail "tfm-eval perplexity"; }
tfm-embed -q --threads 1 -m dec/model.safetensors -f tsv prompts.txt > dec.tsv
[ "$(wc -l < dec.tsv)" -eq 2 ] && [ "$(head -n 1 dec.tsv | awk -F'\t' '{ print NF }')" -eq 32 ] ||
    fail "tfm-embed of the decoder"

# an encoder: masked LM with GEGLU and RMSNorm (the MLM head keeps its
# LayerNorm and activation)
tfm-tokenize train -q -m char --special '[CLS]' --special '[SEP]' --special '[MASK]' \
    -o mtok.json corpus.txt
awk '{ print } NR % 5 == 0 { print "" }' corpus.txt > docs.txt
cat > enc.yaml <<END
model: {kind: encoder, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, block_size: 40,
        segments: 2,
        emb_norm: true, mlm_head: true, norm_type: rmsnorm, ffn: geglu,
        activation: gelu_exact}
data: {text: docs.txt, tokenizer: mtok.json}
optim: {lr: 0.01}
schedule: {warmup: 5, decay: linear}
train: {task: mlm, batch_size: 8, max_steps: 60, eval_interval: 20, eval_batches: 4,
        log_interval: 10, seed: 7}
END
tfm-train -q -c enc.yaml --threads 1 -o enc
fell enc
tfm-embed -q --threads 1 -m enc/model.safetensors -f tsv prompts.txt > enc.tsv
[ "$(wc -l < enc.tsv)" -eq 2 ] || fail "tfm-embed of the encoder"
printf 'the c[MASK]t sat.\n' > fill.txt
tfm-eval fill -q --threads 1 -m enc/model.safetensors -k 3 fill.txt > fill.tsv
[ "$(wc -l < fill.tsv)" -eq 1 ] || fail "tfm-eval fill"

# a T5-shaped encoder-decoder: RMSNorm, GEGLU, unscaled attention, T5
# positions, no biases, on a reversal task
perl -e '
    my $s = 99;
    sub r { $s = ($s * 1103515245 + 12345) % 2147483648; return $s >> 16 }
    for (1 .. 300) {
        my $w = join "", map { chr(97 + r() % 6) } 1 .. 3 + r() % 6;
        print $w, "\t", scalar reverse($w), "\n";
    }' > pairs.tsv
tfm-tokenize train -q -m char --special '<pad>' --special '<s>' --special '</s>' \
    -o stok.json pairs.tsv
cat > t5.yaml <<END
model: {kind: encoder-decoder, n_layer: 2, n_head: 2, n_kv_head: 1, n_embd: 32, block_size: 12,
        positions: t5, t5_buckets: 8, t5_max_distance: 16, norm_type: rmsnorm, ffn: geglu,
        attn_scale: false, bias: false, d_ff: 64}
data: {text: pairs.tsv, tokenizer: stok.json, val_fraction: 0.1}
optim: {lr: 0.005}
schedule: {warmup: 10, decay: constant}
train: {batch_size: 16, max_steps: 60, eval_interval: 20, log_interval: 10, seed: 3}
END
tfm-train -q -c t5.yaml --threads 1 -o t5
fell t5
printf 'abc\nfedcb\n' > src.txt
tfm-generate -q --threads 1 -m t5/model.safetensors < src.txt > t5.beam
[ "$(wc -l < t5.beam)" -eq 2 ] || fail "tfm-generate (beam) of the encoder-decoder"
tfm-generate -q --threads 1 -m t5/model.safetensors --greedy < src.txt > t5.out
tfm-generate -q --threads 1 -m t5/model.safetensors --greedy --no-cache < src.txt > t5.full
[ "$(wc -l < t5.out)" -eq 2 ] || fail "tfm-generate of the encoder-decoder"
cmp t5.out t5.full || fail "the encoder-decoder's cached decode differs from recomputing"
tfm-embed -q --threads 1 -m t5/model.safetensors -f tsv src.txt > t5.tsv
[ "$(wc -l < t5.tsv)" -eq 2 ] || fail "tfm-embed of the encoder-decoder's encoder"

# bad combinations, named
expect_fail 1 "model.activation relu with model.ffn swiglu" \
    tfm-train -q -c dec.yaml --set model.activation=relu -o bad
[ ! -e bad ] || fail "a refused run left a directory"
expect_fail 2 "must be one of plain|geglu|swiglu" tfm-train -q -c dec.yaml --set model.ffn=reglu -o bad
# a run started from the decoder keeps its block; contradicting it is an error
expect_fail 1 "model.norm_type layernorm" \
    tfm-train -q -c dec.yaml --set train.init=dec/model.safetensors \
    --set model.norm_type=layernorm -o bad
echo "ok"
