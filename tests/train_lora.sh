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
# bad input
expect_fail 1 "'qq' names no projection" tfm-train -q -c run.yaml "$@" \
    --set train.lora.targets=qq -o c
expect_fail 1 "needs train.init" tfm-train -q -c run.yaml --set train.lora.r=4 -o c
expect_fail 1 "a run keeps its adapters" tfm-train -q -c run.yaml --threads 1 \
    --set train.lora.r=4 --set train.init=base/model.safetensors -o base
echo ok
