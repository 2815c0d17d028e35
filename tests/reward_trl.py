#!/usr/bin/python3
"""train.task reward and tfm-eval reward against TRL's RewardTrainer and
PyTorch, on a tiny GPT2LMHeadModel folder made by transformers.

- The texts: the rows tfm-train --dump-batches draws (its rng replayed)
  are the chosen_ids and rejected_ids TRL's RewardTrainer tokenizes
  (prompt + answer + end-of-text).
- The loss: tfm-train's first loss is TRL's formula, -logsigmoid(r_chosen
  - r_rejected).mean(), over rewards PyTorch computes from the same
  weights (the folder's transformer, tfm's initial classifier) at each
  text's last token, to 1e-5; and one AdamW step gives PyTorch's weights
  to 1e-4 (optim.eps 1e-6, as in dpo_trl.py).
  (HF's GPT2ForSequenceClassification reads the last token that is not
  the pad token, which for GPT-2, whose pad is its end-of-text, is the one
  before the end-of-text TRL appends; tfm reads the end-of-text itself, as
  HF does for a tokenizer with a pad token of its own.)
- tfm-eval reward: the scores of pairs and of single answers are
  PyTorch's for the trained model, and the accuracy on stderr theirs.
- Refusals, exit 1, nothing written: an identical chosen/rejected (file:line),
  an encoder (the key)."""
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
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402,F401
import trl  # noqa: E402,F401
from datasets import Dataset  # noqa: E402
from transformers import GPT2ForSequenceClassification, GPT2Model  # noqa: E402
from trl import RewardConfig, RewardTrainer  # noqa: E402

from dpo_trl import folder, pairs  # noqa: E402
from hf_gpt2_lib import train_tokenizer  # noqa: E402
from hf_lib import EVAL, TRAIN, refusals, run  # noqa: E402
from sft_trl import first_loss, write_jsonl  # noqa: E402
from train_torch import DATA_SEED_SALT, Rng, read_safetensors  # noqa: E402

SEED, B = 11, 3
TOL = 1e-5


def common(d, data, *extra):
    return ["--set", "train.task=reward", "--set", f"train.init={d}", "--set",
            f"data.text={data}", "--set", f"train.batch_size={B}", "--set",
            f"train.seed={SEED}", "--set", "data.val_fraction=0.25", *extra]


class Reward(torch.nn.Module):
    def __init__(self, d, st):
        super().__init__()
        self.body = GPT2Model.from_pretrained(d, dtype=torch.float32,
                                              attn_implementation="eager")
        W, _ = read_safetensors(st)
        self.w = torch.nn.Parameter(W["classifier.weight"].float().clone())
        self.b = torch.nn.Parameter(W["classifier.bias"].float().clone())

    def forward(self, ids):
        h = self.body(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        return (h @ self.w.T + self.b)[0]


def main():
    bad = []
    top = tempfile.mkdtemp(prefix="tfm-reward-")
    try:
        _, tok = train_tokenizer(top)
        d = folder(top, "gpt2", tok, 3)
        rows = pairs(np.random.default_rng(9), 8)
        data = os.path.join(top, "pref.jsonl")
        write_jsonl(data, rows)
        n_train = 6
        torch.manual_seed(0)
        tok.pad_token = tok.eos_token
        sc = GPT2ForSequenceClassification.from_pretrained(d, num_labels=1)
        sc.config.pad_token_id = tok.eos_token_id
        tr = RewardTrainer(model=sc, args=RewardConfig(output_dir=os.path.join(top, "trl"),
                                                       report_to=[], bf16=False, use_cpu=True,
                                                       max_length=None),
                           train_dataset=Dataset.from_list(rows[:n_train]),
                           processing_class=tok)
        ds = [tr.train_dataset[i] for i in range(n_train)]
        r = run([TRAIN, "--dump-batches", str(2 * B), *common(d, data)])
        if r.returncode != 0:
            raise RuntimeError(f"--dump-batches: {r.stderr.strip()}")
        got = [json.loads(x) for x in r.stdout.splitlines()]
        rng = Rng(SEED ^ DATA_SEED_SALT)
        idx = [rng.below(n_train) for _ in range(B)]
        for k, i in enumerate(idx):
            for what, ids, row in (("chosen", ds[i]["chosen_ids"], got[k]),
                                   ("rejected", ds[i]["rejected_ids"], got[B + k])):
                x = row["input_ids"]
                if x[:len(ids)] != ids or any(v != 0 for v in x[len(ids):]):
                    bad.append(f"pair {i + 1} {what}: tfm {x}, TRL {ids}")
        print(f"  texts: {2 * B} rows of {len(set(idx))} pairs, TRL's chosen_ids and "
              "rejected_ids")
        # the initial classifier, then one step
        init = os.path.join(top, "init")
        step = ["--set", "optim.lr=0.01", "--set", "optim.weight_decay=0.1", "--set",
                "optim.eps=1e-6", "--set", "train.eval_interval=1"]
        r0 = run([TRAIN, "-q", "--threads", "1", "-o", init, *common(d, data, "--set",
                                                                     "train.max_steps=0")])
        out = os.path.join(top, "run")
        r1 = run([TRAIN, "-q", "--threads", "1", "-o", out,
                  *common(d, data, "--set", "train.max_steps=1", *step)])
        if r0.returncode or r1.returncode:
            raise RuntimeError(f"tfm-train reward: {r0.stderr.strip()} {r1.stderr.strip()}")
        m = Reward(d, os.path.join(init, "model.safetensors")).train()
        rc = torch.stack([m(ds[i]["chosen_ids"]) for i in idx])
        rr = torch.stack([m(ds[i]["rejected_ids"]) for i in idx])
        loss = -F.logsigmoid(rc - rr).mean()  # RewardTrainer.compute_loss
        have = first_loss(out)
        loss.backward()
        params = list(m.parameters())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.999), eps=1e-6).step()
        P = {k: v.detach() for k, v in m.body.state_dict().items()}
        P["classifier.weight"], P["classifier.bias"] = m.w.detach(), m.b.detach()
        W, _ = read_safetensors(os.path.join(out, "model.safetensors"))
        worst = max((W[k].double() - P[k].double()).abs().max().item() for k in W if k in P)
        print(f"  loss tfm {have:.7f}, TRL's formula in torch {loss.item():.7f}; after one "
              f"step max |tfm - torch| = {worst:.2e} over {sum(k in P for k in W)} tensors")
        if not abs(have - loss.item()) <= TOL:
            bad.append(f"reward loss tfm {have:.7f}, torch {loss.item():.7f}")
        if not worst <= 1e-4 or "classifier.weight" not in W:
            bad.append(f"weights after one reward step differ by {worst:.3g}")
        # tfm-eval reward on the held-out pairs, and single answers
        st = os.path.join(out, "model.safetensors")
        # PyTorch's scores with tfm's trained weights
        m = Reward(d, st).eval()
        body = {k: v.float() for k, v in W.items() if not k.startswith("classifier.")}
        missing, _ = m.body.load_state_dict(body, strict=False)
        if [k for k in missing if not k.endswith("attn.bias")]:
            bad.append(f"the trained model lacks {missing}")
        held = os.path.join(top, "held.jsonl")
        write_jsonl(held, rows[n_train:])
        r = run([EVAL, "reward", "-m", st, held])
        with torch.no_grad():
            want = []
            for e in rows[n_train:]:
                c = tok(e["prompt"] + e["chosen"] + tok.eos_token)["input_ids"]
                j = tok(e["prompt"] + e["rejected"] + tok.eos_token)["input_ids"]
                want.append((m(c).item(), m(j).item()))
        if r.returncode != 0:
            bad.append(f"tfm-eval reward: {r.stderr.strip()}")
        else:
            got = [tuple(map(float, x.split("\t"))) for x in r.stdout.splitlines()]
            err = max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w))
            acc = np.mean([a > b for a, b in want])
            print(f"  tfm-eval reward: {len(got)} pairs, max |tfm - torch| = {err:.2e}; "
                  f"{r.stderr.strip()}")
            if len(got) != len(want) or not err <= 1e-5 or f"accuracy {acc:.4f}" not in r.stderr:
                bad.append(f"tfm-eval reward: {got} vs {want}, {r.stderr.strip()}")
            singles = os.path.join(top, "singles.jsonl")
            write_jsonl(singles, [{"prompt": e["prompt"], "completion": e["chosen"]}
                                  for e in rows[n_train:]])
            r = run([EVAL, "reward", "-m", st, "-q", singles])
            one = [float(x) for x in r.stdout.splitlines()] if r.returncode == 0 else []
            if len(one) != len(want) or max(abs(a - w[0]) for a, w in zip(one, want)) > 1e-5:
                bad.append(f"tfm-eval reward on answers: {one} {r.stderr.strip()}, want "
                           f"{[w[0] for w in want]}")
        # refusals
        same = os.path.join(top, "same.jsonl")
        write_jsonl(same, rows[:3] + [{"prompt": "a", "chosen": " b", "rejected": " b"}])
        cases = [("identical answers", common(d, same), [f"{same}:4", "the same answer"]),
                 ("an encoder", common(d, data, "--set", "model.kind=encoder"),
                  ["train.task reward", "decoder"])]
        for what, args, pieces in cases:
            o = os.path.join(top, "refused")
            bad += refusals(what, pieces, [("tfm-train", run([TRAIN, "-q", "-o", o, *args]))])
            if os.path.exists(o):
                bad.append(f"{what}: tfm-train left {o}")
                shutil.rmtree(o)
        r = run([EVAL, "reward", "-m", d, held])
        bad += refusals("tfm-eval reward on a language model", ["not a reward model"],
                        [("tfm-eval", r)])
        print(f"  refusals: {len(cases) + 1} cases")
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
