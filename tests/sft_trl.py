#!/usr/bin/python3
"""train.task sft against TRL's SFTTrainer and PyTorch, on a tiny
GPT2LMHeadModel folder made by transformers (a byte-level BPE tokenizer
trained by HF tokenizers, saved by GPT2Tokenizer).

- The rows: for TRL's three formats (prompt/completion strings,
  conversational prompt/completion, messages), the ids and the labels of
  every example tfm-train --dump-batches draws (its rng replayed here) are
  those TRL's SFTTrainer tokenizes (completion_only_loss, and
  assistant_only_loss over ChatML with {% generation %} markers, which
  renders as tfm's ChatML does) and its data collator labels (-100 where
  tfm has no target), shifted by one as the loss reads them.
- The loss and one step: tfm-train's first loss (log.tsv) is PyTorch's
  cross-entropy of the folder's GPT2LMHeadModel on the same batch to 1e-5,
  and the weights after one AdamW step (tfm's: decay on matrices only,
  the gradient clipped by its norm) are torch.optim.AdamW's to 1e-4
  (measured 3e-5: Adam moves a weight whose gradient is near 0 by about
  lr either way, which float32 rounding of that gradient tips).
- Packing: the packed rows are the examples one after another (doc_start
  at each), and the first loss is the mean over the examples computed one
  by one, so attention does not cross them.
- LoRA: the same first loss with train.lora.r (the adapters start at 0).
- tfm-generate --chat: the prompt's ids are those of transformers'
  apply_chat_template(add_generation_prompt=True).
- Refusals, one message, exit 1, nothing written: a chat_template that is
  not ChatML (tokenizer_config.json or chat_template.jinja, the file
  named; the exact ChatML is taken), a malformed line (file:line), an
  example without an assistant message."""
import json
import os
import shutil
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402,F401
import trl  # noqa: E402,F401
from datasets import Dataset  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from hf_gpt2_lib import train_tokenizer  # noqa: E402
from hf_lib import GEN, TRAIN, refusals, run  # noqa: E402
from train_torch import DATA_SEED_SALT, Rng, read_safetensors  # noqa: E402

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
# the same rendering, the assistant's content and <|im_end|> marked for
# transformers' assistant mask
TRAINING = ("{% for message in messages %}{% if message['role'] == 'assistant' %}"
            "{{'<|im_start|>assistant\\n'}}{% generation %}{{message['content'] + '<|im_end|>'}}"
            "{% endgeneration %}{{'\\n'}}{% else %}{{'<|im_start|>' + message['role'] + '\\n' + "
            "message['content'] + '<|im_end|>' + '\\n'}}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SEED, B, T = 7, 3, 256
TOL = 1e-5
WORDS = ("In the beginning God created the heaven and the earth . And the earth was "
         "without form , and void ; and darkness was upon the face of the deep").split()


def sentence(rng, n):
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))


def examples(rng):
    pc, conv, msg = [], [], []
    for i in range(6):
        c = (" " if i % 2 else "") + sentence(rng, 3 + i)
        if i == 4:
            c += "<|endoftext|>"  # TRL adds none then
        pc.append({"prompt": sentence(rng, 2 + i % 3), "completion": c})
    for i in range(4):
        conv.append({"prompt": [{"role": "user", "content": sentence(rng, 3)}],
                     "completion": [{"role": "assistant", "content": sentence(rng, 2 + i)}]})
    for i in range(4):
        m = [{"role": "system", "content": sentence(rng, 2)}] if i % 2 else []
        m += [{"role": "user", "content": sentence(rng, 3)},
              {"role": "assistant", "content": sentence(rng, 2 + i)},
              {"role": "user", "content": sentence(rng, 2)},
              {"role": "assistant", "content": sentence(rng, 3)}]
        msg.append({"messages": m})
    return {"prompt/completion": pc, "conversational": conv, "messages": msg}


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def trl_rows(d, tok, rows, work):
    """(ids, labels) of each example as SFTTrainer tokenizes it and its
    collator labels it."""
    conv = "messages" in rows[0]
    tok.chat_template = TRAINING
    args = SFTConfig(output_dir=os.path.join(work, "trl"), max_length=T + 1, report_to=[],
                     completion_only_loss=True, assistant_only_loss=conv, bf16=False,
                     use_cpu=True, dataset_num_proc=None)
    model = GPT2LMHeadModel.from_pretrained(d)
    tr = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                    processing_class=tok)
    out = []
    for i in range(len(rows)):
        ex = tr.train_dataset[i]
        # the labels column SFTTrainer builds from its masks, as its collator reads it
        batch = tr.data_collator([{"input_ids": ex["input_ids"], "labels": ex["labels"]}])
        out.append((list(ex["input_ids"]), batch["labels"][0].tolist()))
    return out


def dump(d, data, n, *extra):
    r = run([TRAIN, "--dump-batches", str(n), "--set", "train.task=sft", "--set",
             f"train.init={d}", "--set", f"data.text={data}", "--set", "data.val_fraction=0",
             "--set", f"train.batch_size={B}", "--set", f"train.seed={SEED}", *extra])
    if r.returncode != 0:
        raise RuntimeError(f"tfm-train --dump-batches: {r.stderr.strip()}")
    return [json.loads(x) for x in r.stdout.splitlines()]


def draws(n_examples, n_rows):
    rng = Rng(SEED ^ DATA_SEED_SALT)
    return [rng.below(n_examples) for _ in range(n_rows)]


def packed_draws(lens, n_batches):
    """task_sft.c's packing replayed: rows of example indices."""
    rng = Rng(SEED ^ DATA_SEED_SALT)
    out = []
    for _ in range(n_batches):
        nxt = rng.below(len(lens))
        for _ in range(B):
            row, at = [], 0
            while at + lens[nxt] - 1 <= T:
                row.append(nxt)
                at += lens[nxt] - 1
                nxt = rng.below(len(lens))
            out.append(row)
    return out


def targets_of(labels):
    """TRL's labels as tfm's targets: position t predicts label t + 1."""
    y = [v if v != -100 else -1 for v in labels[1:]]
    while y and y[-1] < 0:
        y.pop()
    return y


def check_rows(name, d, tok, rows, work, bad):
    data = os.path.join(work, name.replace("/", "-") + ".jsonl")
    write_jsonl(data, rows)
    ref = trl_rows(d, tok, rows, work)
    got = dump(d, data, 4 * B)
    idx = draws(len(rows), 4 * B)
    seen = set()
    for r, (g, i) in enumerate(zip(got, idx)):
        ids, labels = ref[i]
        seen.add(i)
        L = len(ids)
        x = g["input_ids"]
        if x[:L - 1] != ids[:-1] or any(v != 0 for v in x[L - 1:]):
            bad.append(f"{name}: row {r} (example {i + 1}) inputs {x}, TRL's ids {ids}")
        if g["target_ids"] != targets_of(labels):
            bad.append(f"{name}: row {r} (example {i + 1}) targets {g['target_ids']}, TRL's "
                       f"labels {labels}")
    n_scored = sum(sum(v != -100 for v in lab) for _, lab in ref)
    print(f"  {name}: {len(got)} rows of {len(seen)} examples, ids and labels as TRL's "
          f"({n_scored} completion tokens)")
    if not all(any(v != -100 for v in lab) and any(v == -100 for v in lab) for _, lab in ref):
        bad.append(f"{name}: an example has no prompt or no completion tokens in TRL's labels")
    return data, ref


def torch_step(d, batch_rows, lr, wd, clip):
    """PyTorch's loss of the rows (ids, labels) padded, and the weights
    after one AdamW step as tfm's optimizer defines it."""
    m = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32,
                                        attn_implementation="eager").train()
    Tm = max(len(ids) for ids, _ in batch_rows)
    x = torch.zeros(len(batch_rows), Tm, dtype=torch.long)
    y = torch.full((len(batch_rows), Tm), -100, dtype=torch.long)
    for k, (ids, lab) in enumerate(batch_rows):
        x[k, :len(ids)] = torch.tensor(ids)
        y[k, :len(lab)] = torch.tensor(lab)
    loss = m(input_ids=x, labels=y).loss
    loss.backward()
    params = [p for p in m.parameters()]
    torch.nn.utils.clip_grad_norm_(params, clip)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8).step()
    return loss.item(), {k.removeprefix("transformer."): v.detach() for k, v in
                         m.state_dict().items()}


def first_loss(run_dir):
    with open(os.path.join(run_dir, "log.tsv")) as f:
        return float(f.read().splitlines()[1].split("\t")[1])


def train(d, data, out, *extra):
    return run([TRAIN, "-q", "--threads", "1", "-o", out, "--set", "train.task=sft", "--set",
                f"train.init={d}", "--set", f"data.text={data}", "--set", "data.val_fraction=0",
                "--set", f"train.batch_size={B}", "--set", f"train.seed={SEED}", "--set",
                "train.max_steps=1", "--set", "optim.lr=0.01", "--set",
                "optim.weight_decay=0.1", "--set", "optim.grad_clip=1", *extra])


def check_step(name, d, data, ref, work, bad):
    out = os.path.join(work, "step-" + name.replace("/", "-"))
    r = train(d, data, out)
    if r.returncode != 0:
        bad.append(f"{name}: tfm-train: {r.stderr.strip()}")
        return None
    rows = [ref[i] for i in draws(len(ref), B)]
    want, P = torch_step(d, rows, 0.01, 0.1, 1.0)
    got = first_loss(out)
    W, _ = read_safetensors(os.path.join(out, "model.safetensors"))
    worst = max((W[k].double() - P[k].double()).abs().max().item() for k in W if k in P)
    print(f"  {name}: loss tfm {got:.7f} torch {want:.7f}; after one AdamW step max |tfm - "
          f"torch| = {worst:.2e} over {len(W)} tensors")
    if not abs(got - want) <= TOL:
        bad.append(f"{name}: SFT loss tfm {got:.7f}, PyTorch {want:.7f}")
    # Adam divides each gradient by its own size: a weight whose gradient is
    # near 0 moves by about lr either way, so float32 rounding shows more here
    if not worst <= 1e-4:
        bad.append(f"{name}: weights after one step differ from PyTorch's by {worst:.3g}")
    if not all(k in P for k in W):
        bad.append(f"{name}: tensors {sorted(k for k in W if k not in P)} not in the folder")
    return got


def check_packing(d, data, ref, work, bad):
    lens = [len(ids) for ids, _ in ref]
    got = dump(d, data, 2 * B, "--set", "data.packing=true")
    rows = packed_draws(lens, 2)
    for r, (g, row) in enumerate(zip(got, rows)):
        x, y, docs, at = [], [], [], 0
        for i in row:
            ids, lab = ref[i]
            x += ids[:-1]
            y += [v if v != -100 else -1 for v in lab[1:]]
            docs += [at] * (len(ids) - 1)
            at += len(ids) - 1
        while y and y[-1] < 0:
            y.pop()
        docs += list(range(at, T))
        if g["input_ids"][:at] != x or g["target_ids"] != y or g.get("doc_start") != docs:
            bad.append(f"packing: row {r} is not examples {row} one after another: {g}")
    print(f"  packing: {len(got)} rows of {sum(len(r) for r in rows)} examples, each with its "
          f"own doc_start")
    out = os.path.join(work, "packed")
    rr = train(d, data, out, "--set", "data.packing=true")
    if rr.returncode != 0:
        bad.append(f"packing: tfm-train: {rr.stderr.strip()}")
        return
    m = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32,
                                        attn_implementation="eager").eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in [i for row in rows[:B] for i in row]:
            ids, lab = ref[i]
            logits = m(input_ids=torch.tensor([ids])).logits[0, :-1]
            t = torch.tensor(lab[1:])
            total += torch.nn.functional.cross_entropy(logits, t, ignore_index=-100,
                                                       reduction="sum").item()
            count += int((t != -100).sum())
    want, have = total / count, first_loss(out)
    print(f"  packing: loss tfm {have:.7f}, the examples one by one in torch {want:.7f}")
    if not abs(have - want) <= TOL:
        bad.append(f"packing: loss {have:.7f}, the examples alone {want:.7f}: attention "
                   "crosses them")


def check_generate(d, tok, bad):
    r = run([GEN, "-m", d, "--chat", "--json", "--greedy", "-n", "2", "-q",
             "the face of the deep"])
    if r.returncode != 0:
        bad.append(f"tfm-generate --chat: {r.stderr.strip()}")
        return
    n = json.loads(r.stdout)["prompt_tokens"]
    tok.chat_template = CHATML
    want = tok.apply_chat_template([{"role": "user", "content": "the face of the deep"}],
                                   add_generation_prompt=True, tokenize=True, return_dict=True)
    want = len(want["input_ids"])
    print(f"  tfm-generate --chat: {n} prompt tokens, apply_chat_template's {want}")
    if n != want:
        bad.append(f"tfm-generate --chat: {n} prompt tokens, transformers' template {want}")


def check_refusals(d, tok, data, work, bad):
    cases = []
    # a template tfm cannot apply, in either file transformers writes
    other = os.path.join(work, "other")
    shutil.copytree(d, other)
    with open(os.path.join(other, "tokenizer_config.json")) as f:
        tc = json.load(f)
    tc["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with open(os.path.join(other, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)
    cases.append(("a chat_template that is not ChatML", other,
                  [os.path.join(other, "tokenizer_config.json"), "chat_template"], data))
    jinja = os.path.join(work, "jinja")
    shutil.copytree(d, jinja)
    with open(os.path.join(jinja, "chat_template.jinja"), "w") as f:
        f.write("{{ messages }}")
    cases.append(("chat_template.jinja that is not ChatML", jinja,
                  [os.path.join(jinja, "chat_template.jinja")], data))
    broken = os.path.join(work, "broken.jsonl")
    with open(broken, "w") as f:
        f.write('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": }\n')
    cases.append(("a malformed line", d, [f"{broken}:2"], broken))
    noasst = os.path.join(work, "noasst.jsonl")
    write_jsonl(noasst, [{"messages": [{"role": "user", "content": "hi"}]}])
    cases.append(("no assistant message", d, [f"{noasst}:1", "assistant"], noasst))
    for what, folder, pieces, f in cases:
        out = os.path.join(work, "refused")
        r = train(folder, f, out)
        bad += refusals(what, pieces, [("tfm-train", r)])
        if os.path.exists(out):
            bad.append(f"{what}: tfm-train left {out}")
            shutil.rmtree(out)
    r = run([GEN, "-m", other, "--chat", "--greedy", "-n", "1", "x"])
    bad += refusals("tfm-generate --chat with a template it cannot apply",
                    ["tokenizer_config.json"], [("tfm-generate", r)])
    # the exact ChatML, as transformers saves it, is taken
    same = os.path.join(work, "chatml")
    shutil.copytree(d, same)
    tok.chat_template = CHATML
    tok.save_pretrained(same)
    r = run([TRAIN, "--dump-batches", "1", "--set", "train.task=sft", "--set",
             f"train.init={same}", "--set", f"data.text={data}"])
    if r.returncode != 0:
        bad.append(f"the ChatML template saved by transformers is refused: {r.stderr.strip()}")
    print(f"  refusals: {len(cases) + 1} cases, the ChatML template taken")


def main():
    bad = []
    top = tempfile.mkdtemp(prefix="tfm-sft-")
    try:
        _, tok = train_tokenizer(top)
        V = len(tok)
        torch.manual_seed(3)
        cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=32, n_layer=2, n_head=4,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                         eos_token_id=0)
        d = os.path.join(top, "gpt2")
        GPT2LMHeadModel(cfg).save_pretrained(d)
        tok.save_pretrained(d)
        for f in ("chat_template.jinja",):
            if os.path.exists(os.path.join(d, f)):
                os.remove(os.path.join(d, f))
        # the two templates render alike
        m = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        r1 = tok.apply_chat_template(m, chat_template=CHATML, tokenize=False)
        r2 = tok.apply_chat_template(m, chat_template=TRAINING, tokenize=False)
        if r1 != r2:
            bad.append(f"the training template renders {r2!r}, ChatML {r1!r}")
        rng = np.random.default_rng(5)
        sets = examples(rng)
        kept = {}
        for name, rows in sets.items():
            kept[name] = check_rows(name, d, tok, rows, top, bad)
        for name in ("prompt/completion", "messages"):
            check_step(name, d, *kept[name], top, bad)
        data, ref = kept["messages"]
        check_packing(d, data, ref, top, bad)
        full = first_loss(os.path.join(top, "step-messages"))
        out = os.path.join(top, "lora")
        r = train(d, data, out, "--set", "train.lora.r=2", "--set", "train.lora.targets=q, v")
        if r.returncode != 0:
            bad.append(f"LoRA: tfm-train: {r.stderr.strip()}")
        else:
            lo = first_loss(out)
            print(f"  LoRA: first loss {lo:.7f}, full fine-tuning's {full:.7f}")
            if not abs(lo - full) <= 1e-6:
                bad.append(f"LoRA's first loss {lo:.7f} is not full fine-tuning's {full:.7f}")
            if not os.path.exists(os.path.join(out, "adapter_model.safetensors")):
                bad.append("LoRA SFT wrote no adapter_model.safetensors")
        check_generate(d, tok, bad)
        check_refusals(d, tok, data, top, bad)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
