#!/usr/bin/python3
"""train.task dpo against TRL's DPOTrainer and PyTorch, on a tiny
GPT2LMHeadModel folder made by transformers (sft_trl.py's).

- The rows: the chosen and rejected rows tfm-train --dump-batches draws
  (its rng replayed) are the prompt + answer ids TRL's DPOTrainer
  tokenizes, the targets on the answers (its completion_mask).
- The loss: tfm-train's first loss (log.tsv) is TRL's _compute_loss
  (sigmoid, beta 0.1 and 0.5) on the same pairs, the reference the
  initial model, to 1e-5.
- One step: the weights after one AdamW step are PyTorch's to 1e-4 (the
  DPO loss written out, the reference's log-probabilities fixed; optim.eps
  1e-6, as large as a few of the gradients at the start, where z = 0, so
  that Adam's division does not blow their float32 rounding up to lr;
  measured 1.1e-5), and the validation rewards in log.tsv (reward_accuracy, chosen_reward,
  rejected_reward, reward_margin) are those of the updated model.
- A reference given (train.reference, another random folder of the same
  shape) gives TRL's loss with that ref_model.
- Refusals, one message naming the file and line or the key, exit 1,
  nothing written: an empty or identical chosen/rejected, a malformed
  line, a reference of another architecture (model.n_layer), an encoder."""
import json
import math
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
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from trl import DPOConfig, DPOTrainer  # noqa: E402

from hf_gpt2_lib import train_tokenizer  # noqa: E402
from hf_lib import TRAIN, refusals, run  # noqa: E402
from sft_trl import WORDS, first_loss, sentence, write_jsonl  # noqa: E402
from train_torch import DATA_SEED_SALT, Rng, read_safetensors  # noqa: E402

SEED, B, T = 11, 3, 64
TOL = 1e-5


def pairs(rng, n):
    out = []
    for i in range(n):
        c = (" " if i % 2 else "") + sentence(rng, 2 + i % 4)
        r = (" " if i % 3 else "") + sentence(rng, 3 + i % 3)
        out.append({"prompt": sentence(rng, 2 + i % 3), "chosen": c, "rejected": r})
    return out


def folder(top, name, tok, seed, layers=2):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=T, n_embd=32, n_layer=layers, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                     eos_token_id=0)
    m = GPT2LMHeadModel(cfg)
    with torch.no_grad():  # away from the initial values: the log-probs differ per token
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    d = os.path.join(top, name)
    m.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def trainer(d, tok, rows, work, beta, ref=None):
    args = DPOConfig(output_dir=os.path.join(work, "trl"), beta=beta, max_length=T + 1,
                     report_to=[], bf16=False, use_cpu=True)
    model = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32)
    ref_model = GPT2LMHeadModel.from_pretrained(ref, dtype=torch.float32) if ref else None
    return DPOTrainer(model=model, ref_model=ref_model, args=args,
                      train_dataset=Dataset.from_list(rows), processing_class=tok)


def tfm(args, **kw):
    return run([TRAIN, *args], **kw)


def common(d, data, *extra):
    return ["--set", "train.task=dpo", "--set", f"train.init={d}", "--set", f"data.text={data}",
            "--set", f"train.batch_size={B}", "--set", f"train.seed={SEED}", *extra]


def draws(n_pairs):
    rng = Rng(SEED ^ DATA_SEED_SALT)
    return [rng.below(n_pairs) for _ in range(B)]


def logps(m, ids, start):
    """Sum of log p of ids[start:] under m, each token given those before."""
    logits = m(input_ids=torch.tensor([ids])).logits[0, :-1]
    lp = torch.log_softmax(logits.float(), -1)
    t = torch.tensor(ids[1:])
    return lp[torch.arange(len(t)), t][start - 1:].sum()


def main():
    bad = []
    top = tempfile.mkdtemp(prefix="tfm-dpo-")
    try:
        _, tok = train_tokenizer(top)
        d = folder(top, "gpt2", tok, 3)
        other = folder(top, "ref", tok, 4)
        deep = folder(top, "deep", tok, 5, layers=3)
        rng = np.random.default_rng(8)
        rows = pairs(rng, 8)
        data = os.path.join(top, "pref.jsonl")
        write_jsonl(data, rows)
        n_train = len(rows) - int(len(rows) * 0.25)  # data.val_fraction 0.25: the last 2
        tr = trainer(d, tok, rows[:n_train], top, 0.1)
        ds = [tr.train_dataset[i] for i in range(n_train)]
        # the rows tfm draws are TRL's prompt + answer ids
        r = tfm(["--dump-batches", str(2 * B), *common(d, data, "--set",
                                                       "data.val_fraction=0.25")])
        if r.returncode != 0:
            raise RuntimeError(f"tfm-train --dump-batches: {r.stderr.strip()}")
        got = [json.loads(x) for x in r.stdout.splitlines()]
        idx = draws(n_train)
        for k, i in enumerate(idx):
            p, c, rj = ds[i]["prompt_ids"], ds[i]["chosen_ids"], ds[i]["rejected_ids"]
            for what, ans, row in (("chosen", c, got[k]), ("rejected", rj, got[B + k])):
                ids = p + ans
                want_y = [-1] * (len(p) - 1) + ans
                if row["input_ids"][:len(ids) - 1] != ids[:-1] or row["target_ids"] != want_y:
                    bad.append(f"pair {i + 1} {what}: tfm {row}, TRL prompt {p} answer {ans}")
        print(f"  rows: {2 * B} rows of {len(set(idx))} pairs, TRL's prompt and answer ids")
        # TRL's loss on the first batch, against tfm-train's first loss
        for beta, ref in ((0.1, None), (0.5, other)):
            extra = ["--set", "data.val_fraction=0.25", "--set", f"train.beta={beta}", "--set",
                     "train.max_steps=1", "--set", "optim.lr=0.01", "--set",
                     "optim.weight_decay=0.1", "--set", "optim.eps=1e-6", "--set",
                     "train.eval_interval=1"]
            if ref:
                extra += ["--set", f"train.reference={ref}"]
            out = os.path.join(top, f"run-{beta}")
            r = tfm(["-q", "--threads", "1", "-o", out, *common(d, data, *extra)])
            if r.returncode != 0:
                bad.append(f"tfm-train dpo beta {beta}: {r.stderr.strip()}")
                continue
            t = trainer(d, tok, rows[:n_train], top, beta, ref)
            keys = ("prompt_ids", "chosen_ids", "rejected_ids")
            inputs = t.data_collator([{k: t.train_dataset[i][k] for k in keys} for i in idx])
            with torch.no_grad():
                want = t._compute_loss(t.model, inputs, False).item()
            have = first_loss(out)
            print(f"  beta {beta}{' reference ' + os.path.basename(ref) if ref else ''}: loss "
                  f"tfm {have:.7f}, TRL's DPOTrainer {want:.7f}")
            if not abs(have - want) <= TOL:
                bad.append(f"DPO loss (beta {beta}) tfm {have:.7f}, TRL {want:.7f}")
            if ref:
                continue
            # one step in PyTorch: the same loss, fixed reference log-probs
            pol = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32,
                                                  attn_implementation="eager").train()
            refm = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32,
                                                   attn_implementation="eager").eval()

            def terms(m, i):
                p = ds[i]["prompt_ids"]
                return (logps(m, p + ds[i]["chosen_ids"], len(p)),
                        logps(m, p + ds[i]["rejected_ids"], len(p)))

            with torch.no_grad():
                rl = {i: terms(refm, i) for i in range(n_train)}
            total = 0
            for i in idx:
                c, rj = terms(pol, i)
                z = beta * ((c - rl[i][0]) - (rj - rl[i][1]))
                total = total - F.logsigmoid(z)
            loss = total / len(idx)
            loss.backward()
            params = list(pol.parameters())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
            torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.999), eps=1e-6).step()
            P = {k.removeprefix("transformer."): v.detach() for k, v in pol.state_dict().items()}
            W, _ = read_safetensors(os.path.join(out, "model.safetensors"))
            worst = max((W[k].double() - P[k].double()).abs().max().item() for k in W if k in P)
            print(f"  one step: loss torch {loss.item():.7f}; weights max |tfm - torch| = "
                  f"{worst:.2e}")
            if not abs(loss.item() - have) <= TOL or not worst <= 1e-4:
                bad.append(f"one DPO step: loss {have:.7f} vs {loss.item():.7f}, weights "
                           f"{worst:.3g}")
            # the validation rewards of the updated model, in log.tsv
            pol.eval()
            rc, rr = [], []
            with torch.no_grad():
                for e in rows[n_train:]:
                    t1 = trainer(d, tok, [e], top, beta)
                    x = t1.train_dataset[0]
                    p = x["prompt_ids"]
                    c = logps(pol, p + x["chosen_ids"], len(p)) - \
                        logps(refm, p + x["chosen_ids"], len(p))
                    rj = logps(pol, p + x["rejected_ids"], len(p)) - \
                        logps(refm, p + x["rejected_ids"], len(p))
                    rc.append(beta * c.item())
                    rr.append(beta * rj.item())
            want = {"reward_accuracy": np.mean([a > b for a, b in zip(rc, rr)]),
                    "chosen_reward": np.mean(rc), "rejected_reward": np.mean(rr),
                    "reward_margin": np.mean(rc) - np.mean(rr)}
            with open(os.path.join(out, "log.tsv")) as f:
                lines = [x.rstrip("\n").split("\t") for x in f]
            row = dict(zip(lines[0], lines[-1]))
            for k, v in want.items():
                got = row.get("val_" + k)
                if got is None or not abs(float(got) - v) <= 1e-4:
                    bad.append(f"log.tsv val_{k} {got}, the updated model's {v:.6g}")
            print("  log.tsv: " + ", ".join(f"val_{k} {row.get('val_' + k)} (torch {v:.6g})"
                                           for k, v in want.items()))
        # refusals
        cases = []
        for k, (what, line, piece) in enumerate((
                ("an empty rejected", {"prompt": "a", "chosen": "b", "rejected": ""}, "empty"),
                ("identical answers", {"prompt": "a", "chosen": " b", "rejected": " b"},
                 "the same answer"))):
            f = os.path.join(top, f"bad{k}.jsonl")
            write_jsonl(f, rows[:2] + [line])
            cases.append((what, common(d, f), [f"{f}:3", piece]))
        broken = os.path.join(top, "broken.jsonl")
        with open(broken, "w") as f:
            f.write(json.dumps(rows[0]) + '\n{"prompt": "a", "chosen": "b",\n')
        cases.append(("a malformed line", common(d, broken), [f"{broken}:2"]))
        cases.append(("a reference of another architecture",
                      common(d, data, "--set", f"train.reference={deep}"),
                      ["train.reference", "model.n_layer"]))
        cases.append(("an encoder", ["--set", "train.task=dpo", "--set", "model.kind=encoder",
                                     "--set", f"train.init={d}", "--set", f"data.text={data}"],
                      ["train.task dpo", "decoder"]))
        for what, args, pieces in cases:
            out = os.path.join(top, "refused")
            rr = tfm(["-q", "-o", out, *args])
            bad += refusals(what, pieces, [("tfm-train", rr)])
            if os.path.exists(out):
                bad.append(f"{what}: tfm-train left {out}")
                shutil.rmtree(out)
        print(f"  refusals: {len(cases)} cases")
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
