#!/bin/sh
# LoRA (train.lora): the base stays as train.init gave it, only the
# adapters train; the run directory holds PEFT's adapter files and the
# merged model; resuming is bit-exact; bad keys are one clear error.
. "${TFM_SRCDIR:-..}/tests/train_lib.sh"
setup_data
tfm-train -q -c run.yaml --threads 1 --set train.max_steps=20 -o base
set -- --threads 1 --set train.init=base/model.safetensors --set train.lora.r=4 \
    --set train.lora.alpha=8 --set 'train.lora.targets=q, v, fc' --set optim.lr=1e-2
tfm-train -c run.yaml "$@" --set train.max_steps=30 -o a 2> a.err
grep -q 'LoRA r 4, alpha 8 on q, v, fc: [0-9]* trainable parameters' a.err ||
    { cat a.err; fail "no trainable count"; }
[ -s a/adapter_model.safetensors ] || fail "no adapter_model.safetensors"
grep -q '"peft_type": "LORA"' a/adapter_config.json || fail "adapter_config.json: no peft_type"
grep -q '"r": 4' a/adapter_config.json || fail "adapter_config.json: no r"
grep -q '"attn.q", "attn.v", "mlp.c_fc"' a/adapter_config.json ||
    { cat a/adapter_config.json; fail "adapter_config.json: target_modules"; }
# the merged model differs from the base (the adapters learned something)
cmp -s base/model.safetensors a/model.safetensors && fail "LoRA changed nothing"
# paused and resumed: the same files, bit for bit
tfm-train -q -c run.yaml "$@" --set train.max_steps=30 -o b --steps 12
tfm-train -q --threads 1 -o b
cmp a/model.safetensors b/model.safetensors || fail "resumed LoRA run differs"
cmp a/adapter_model.safetensors b/adapter_model.safetensors || fail "resumed adapter differs"
# --adapter DIR on the base is the merged model: the same scores, the same text
ppl() { tfm-eval perplexity -q --threads 1 --tokens val.npy "$@"; }
ppl -m a/model.safetensors > merged.tsv
ppl -m base/model.safetensors --adapter a > adapted.tsv
cmp merged.tsv adapted.tsv || fail "--adapter differs from the merged model"
ppl -m base/model.safetensors > base.tsv
cmp -s merged.tsv base.tsv && fail "perplexity cannot tell the adapter"
tfm-generate -q --threads 1 -m a/model.safetensors --ids --greedy -n 12 "65 66" > g1.txt
tfm-generate -q --threads 1 -m base/model.safetensors --adapter a --ids --greedy -n 12 "65 66" \
    > g2.txt
cmp g1.txt g2.txt || fail "tfm-generate --adapter differs from the merged model"
# tfm-train --merge-adapter writes the merged model as one file
tfm-train --merge-adapter a base/model.safetensors -o m.safetensors
ppl -m m.safetensors > m.tsv
cmp merged.tsv m.tsv || fail "--merge-adapter differs from the run's merged model"
# bad adapters: one message naming the program and the file, exit 1, no output file
tfm-train -q -c run.yaml --threads 1 --set model.n_embd=32 --set train.max_steps=1 -o wide
expect_fail 1 "tfm-eval: a/adapter_model.safetensors: module 'h.0.attn.q': lora_A [4, 16] and lora_B [16, 4] do not fit the base model's h.0.attn.c_attn.weight [32, 96]" \
    ppl -m wide/model.safetensors --adapter a
write_config deep.yaml
sed -i 's/n_layer: 1/n_layer: 2/' deep.yaml
tfm-train -q -c deep.yaml --threads 1 --set train.max_steps=1 -o deep
tfm-train -q -c deep.yaml --threads 1 --set train.init=deep/model.safetensors \
    --set train.lora.r=4 --set train.max_steps=1 -o deep_a
expect_fail 1 "tfm-generate: deep_a/adapter_model.safetensors: module 'h.1.attn.q' names no weight of the base model" \
    tfm-generate -m base/model.safetensors --adapter deep_a --ids "1 2"
mkdir bad
cp a/adapter_model.safetensors bad/
sed 's/"attn.q"/"attn.qq"/' a/adapter_config.json > bad/adapter_config.json
expect_fail 1 "tfm-generate: bad/adapter_config.json:8:22: target_modules entry 'attn.qq' names no module" \
    tfm-generate -m base/model.safetensors --adapter bad --ids "1 2"
sed '/"r":/d' a/adapter_config.json > bad/adapter_config.json
expect_fail 1 'tfm-eval: bad/adapter_config.json: no "r"' ppl -m base/model.safetensors --adapter bad
sed '/"lora_alpha":/d' a/adapter_config.json > bad/adapter_config.json
expect_fail 1 'tfm-eval: bad/adapter_config.json: no "lora_alpha"' \
    ppl -m base/model.safetensors --adapter bad
cp a/adapter_config.json bad/
size=$(wc -c < bad/adapter_model.safetensors)
printf 'X' | dd of=bad/adapter_model.safetensors bs=1 seek=$((size - 10)) conv=notrunc 2>/dev/null
expect_fail 1 "tfm-train: bad/adapter_model.safetensors: checksum mismatch" \
    tfm-train --merge-adapter bad base/model.safetensors -o bad.safetensors
[ ! -e bad.safetensors ] || fail "a failed merge left an output file"
ls | grep -q 'bad.safetensors' && fail "a failed merge left a temporary file"
expect_fail 2 "no output file" tfm-train --merge-adapter a base/model.safetensors
# bad training input
expect_fail 1 "'qq' names no projection" tfm-train -q -c run.yaml "$@" \
    --set train.lora.targets=qq -o c
expect_fail 1 "needs train.init" tfm-train -q -c run.yaml --set train.lora.r=4 -o c
expect_fail 1 "a run keeps its adapters" tfm-train -q -c run.yaml --threads 1 \
    --set train.lora.r=4 --set train.init=base/model.safetensors -o base

# train.init's tokenizer reads data.text when data.tokenizer is left out (lm
# and LoRA on a decoder, as fine-tuning), named in the stored configuration;
# another vocabulary is refused, the same with other settings is a warning
command -v tfm-tokenize >/dev/null || { echo "ok (no tfm-tokenize)"; exit 0; }
tfm-tokenize train -q --model char -o tok.json corpus.txt
printf 'the cat\n' > few.txt
tfm-tokenize train -q --model char -o few.json few.txt
sed 's/a/A/g' corpus.txt > upper.txt
tfm-tokenize train -q --model char -o upper.json upper.txt
tfm-tokenize train -q --model char --lowercase -o lower.json corpus.txt
set -- --threads 1 --set data.train= --set data.val= --set data.text=corpus.txt \
    --set train.max_steps=4 --set train.eval_interval=2 --set schedule.warmup=1
tfm-train -q -c run.yaml "$@" --set data.tokenizer=tok.json -o tbase
for lora in 0 2; do
    tfm-train -q -c run.yaml "$@" --set train.init=tbase/model.safetensors \
        --set train.lora.r=$lora -o tl$lora
    tfm-train -o tl$lora --dump-config | grep -q '^  tokenizer: tbase/model.safetensors ' ||
        fail "train.lora.r $lora: the stored data.tokenizer is not train.init"
    tfm-train -q -o tl$lora --set train.max_steps=6 || fail "train.lora.r $lora: no resume"
    expect_fail 1 "data.tokenizer few.json is not the tokenizer of train.init tbase/model.safetensors (8 tokens, train.init's 21)" \
        tfm-train -q -c run.yaml "$@" --set train.init=tbase/model.safetensors \
        --set train.lora.r=$lora --set data.tokenizer=few.json -o tf$lora
    expect_fail 1 'is "A", train.init'"'"'s "a")' \
        tfm-train -q -c run.yaml "$@" --set train.init=tbase/model.safetensors \
        --set train.lora.r=$lora --set data.tokenizer=upper.json -o tf$lora
    [ ! -e tf$lora ] || fail "a refused tokenizer left tf$lora"
    tfm-train -c run.yaml "$@" --set train.init=tbase/model.safetensors \
        --set train.lora.r=$lora --set data.tokenizer=tok.json -o ts$lora 2> same.err
    grep -q warning same.err && { cat same.err; fail "the same tokenizer warns"; }
    tfm-train -c run.yaml "$@" --set train.init=tbase/model.safetensors \
        --set train.lora.r=$lora --set data.tokenizer=lower.json -o tw$lora 2> warn.err
    grep -qF "warning: data.tokenizer lower.json has the vocabulary of train.init tbase/model.safetensors's tokenizer but other settings" warn.err ||
        { cat warn.err; fail "no warning for another normalization"; }
done
# a file without a tokenizer: data.text needs data.tokenizer
expect_fail 1 "data.text needs a tokenizer: train.init base/model.safetensors carries none (set data.tokenizer)" \
    tfm-train -q -c run.yaml "$@" --set train.init=base/model.safetensors -o tn
echo ok
