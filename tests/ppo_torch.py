#!/usr/bin/python3
"""train.task ppo against a PyTorch implementation of TRL's PPOTrainer
formulas (trl/experimental/ppo/ppo_trainer.py at huggingface/trl
fd0902588: pip's TRL 1.16 does not ship it), on a tiny GPT2LMHeadModel
folder made by transformers (the SFT model) and a reward model tfm-train
makes from it.

- The rollout: every sample tfm-train logs (samples.tsv) is recomputed:
  the prompts are those the run's rng draws (train_torch.Rng replayed),
  the policy's and the reference's log-probabilities of the sampled
  answer, the value head's outputs (its initial weights from a run at
  optim.lr 0, which samples the same answers: the sampling is seeded),
  the reward model's score of prompt + answer (GPT2Model + the
  classifier at the last token), the KL, and GAE's whitened advantages
  and returns (TRL's loop and masked_whiten, on tfm's masks: see
  tfm-config(5) train.task ppo), each to 1e-5.
- The losses: each step's clipped surrogate and clipped value loss
  (log.tsv val_pg_loss, val_vf_loss; train_loss their sum with vf_coef)
  are TRL's formulas to 1e-5: two passes over one rollout (the second
  with the ratio and the values clipped: small cliprange and
  cliprange_value), and a rollout in two minibatches (the pass's
  permutation replayed); the weights after the steps are PyTorch's
  AdamW's to 1e-4 (optim.eps 1e-6 as in dpo_trl.py).
- Refusals, exit 1, one message naming the key or file:line, nothing
  written: no train.reward_model, a reference of another architecture,
  an empty prompts file, a prompt line with another key, an empty
  prompt."""
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
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model  # noqa: E402

from dpo_trl import folder, pairs  # noqa: E402
from hf_gpt2_lib import train_tokenizer  # noqa: E402
from hf_lib import TRAIN, refusals, run  # noqa: E402
from sft_trl import sentence, write_jsonl  # noqa: E402
from train_torch import DATA_SEED_SALT, Rng, read_safetensors  # noqa: E402

SEED, B = 11, 4
TOL = 1e-5
KL, GAMMA, LAM, CLIP, CLIPV, VF = 0.1, 0.9, 0.8, 0.2, 0.01, 0.5


# ---- TRL's helpers, as ppo_trainer.py writes them
def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum()


def masked_var(values, mask):
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    n = mask.sum()
    return variance * (n / (n - 1))


def masked_whiten(values, mask):
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def gae(rewards, values, gamma, lam):
    lastgaelam = 0
    rev = []
    W = rewards.shape[1]
    for t in reversed(range(W)):
        nextvalues = values[:, t + 1] if t < W - 1 else 0.0
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam = delta + gamma * lam * lastgaelam
        rev.append(lastgaelam)
    return torch.stack(rev[::-1], axis=1)


def losses(new_lp, vpred, old_lp, values, adv, ret, mask, clip, clipv):
    vpredclipped = torch.clamp(vpred, values - clipv, values + clipv)
    vf_losses1 = torch.square(vpred - ret)
    vf_losses2 = torch.square(vpredclipped - ret)
    vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), mask)
    ratio = torch.exp(new_lp - old_lp)
    pg_losses = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), mask)
    return pg_loss, vf_loss


# ---- the models
class Policy(torch.nn.Module):
    """The SFT folder's GPT-2 and a value head (tfm's model.tags 1)."""

    def __init__(self, d, st):
        super().__init__()
        self.lm = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32,
                                                  attn_implementation="eager")
        W, _ = read_safetensors(st)
        self.vw = torch.nn.Parameter(W["classifier.weight"].float().clone())
        self.vb = torch.nn.Parameter(W["classifier.bias"].float().clone())

    def forward(self, ids):
        out = self.lm(input_ids=torch.tensor([ids]), output_hidden_states=True)
        h = out.hidden_states[-1][0]
        return torch.log_softmax(out.logits[0].float(), -1), (h @ self.vw.T + self.vb)[:, 0]


class Reward(torch.nn.Module):
    def __init__(self, d, st):
        super().__init__()
        W, _ = read_safetensors(st)
        self.body = GPT2Model(GPT2Config.from_pretrained(d))
        state = {k: v.float() for k, v in W.items() if not k.startswith("classifier.")}
        missing, _ = self.body.load_state_dict(state, strict=False)
        if [k for k in missing if not k.endswith("attn.bias")]:
            raise RuntimeError(f"reward model: missing {missing}")
        self.w, self.b = W["classifier.weight"].float(), W["classifier.bias"].float()
        self.body.eval()

    def forward(self, ids):
        h = self.body(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        return (h @ self.w.T + self.b)[0]


def answer_terms(model, p, a):
    """log p of each answer token and the values before each."""
    lp, v = model(p + a[:-1]) if isinstance(model, Policy) else (None, None)
    if lp is None:
        out = model(input_ids=torch.tensor([p + a[:-1]]))
        lp = torch.log_softmax(out.logits[0].float(), -1)
    P = len(p)
    idx = torch.arange(P - 1, P - 1 + len(a))
    tok = torch.tensor(a)
    return lp[idx, tok], (v[idx] if v is not None else None)


def read_samples(path):
    rows = []
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(head, line.rstrip("\n").split("\t")))
            for k in ("answer_ids",):
                r[k] = [int(x) for x in r[k].split()]
            for k in ("logprobs", "ref_logprobs", "values", "advantages", "returns"):
                r[k] = [float(x) for x in r[k].split()]
            for k in ("update", "sample", "prompt_line", "tokens"):
                r[k] = int(r[k])
            r["reward"], r["kl"] = float(r["reward"]), float(r["kl"])
            rows.append(r)
    return rows


def read_log(path):
    with open(path) as f:
        lines = f.read().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, ln.split("\t"))) for ln in lines[1:]]


def tfm(args):
    return run([TRAIN, *args])


def common(d, rm, data, *extra):
    return ["-q", "--threads", "1", "--set", "train.task=ppo", "--set", f"train.init={d}",
            "--set", f"train.reward_model={rm}", "--set", f"data.text={data}", "--set",
            f"train.batch_size={B}", "--set", f"train.seed={SEED}", "--set",
            "train.max_new_tokens=6", "--set", f"train.kl_coef={KL}", "--set",
            f"train.gamma={GAMMA}", "--set", f"train.lam={LAM}", "--set",
            f"train.vf_coef={VF}", "--set", "train.eval_interval=1", "--set",
            "optim.weight_decay=0.1", "--set", "optim.eps=1e-6", *extra]


def draws(n_prompts, epochs):
    rng = Rng(SEED ^ DATA_SEED_SALT)
    idx = [rng.below(n_prompts) for _ in range(B)]
    rng.u64()  # the sampling seed
    perms = []
    for _ in range(epochs):
        p = list(range(B))
        for i in range(B - 1, 0, -1):
            j = rng.below(i + 1)
            p[i], p[j] = p[j], p[i]
        perms.append(p)
    return idx, perms


def adamw(model, lr):
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6)


def worst_weights(pol, st):
    W, _ = read_safetensors(st)
    P = {k.removeprefix("transformer."): v.detach() for k, v in pol.lm.state_dict().items()}
    P["classifier.weight"], P["classifier.bias"] = pol.vw.detach(), pol.vb.detach()
    return max((W[k].double() - P[k].double()).abs().max().item() for k in W if k in P)


def main():
    bad = []
    top = tempfile.mkdtemp(prefix="tfm-ppo-")
    try:
        _, tok = train_tokenizer(top)
        d = folder(top, "gpt2", tok, 3)
        other = folder(top, "ref", tok, 4)
        deep = folder(top, "deep", tok, 5, layers=3)
        pref = os.path.join(top, "pref.jsonl")
        write_jsonl(pref, pairs(np.random.default_rng(9), 8))
        rmdir = os.path.join(top, "rm")
        r = tfm(["-q", "--threads", "1", "-o", rmdir, "--set", "train.task=reward", "--set",
                 f"train.init={d}", "--set", f"data.text={pref}", "--set", "train.batch_size=3",
                 "--set", "train.max_steps=3", "--set", "optim.lr=0.01", "--set",
                 "data.val_fraction=0.25"])
        if r.returncode != 0:
            raise RuntimeError(f"tfm-train reward: {r.stderr.strip()}")
        rng = np.random.default_rng(5)
        prompts = [sentence(rng, 2 + i % 3) for i in range(6)]
        data = os.path.join(top, "prompts.jsonl")
        write_jsonl(data, [{"prompt": p} for p in prompts])
        reward = Reward(d, os.path.join(rmdir, "model.safetensors"))
        refm = GPT2LMHeadModel.from_pretrained(other, dtype=torch.float32,
                                               attn_implementation="eager").eval()

        for mini, epochs, steps in ((1, 2, 2), (2, 1, 1)):
            tag = f"{mini} minibatch{'es' if mini > 1 else ''}, {epochs} pass{'es' if epochs > 1 else ''}"
            extra = ["--set", f"train.minibatches={mini}", "--set", f"train.ppo_epochs={epochs}",
                     "--set", f"train.max_steps={steps}", "--set", f"train.reference={other}",
                     "--set", f"train.cliprange={CLIP}", "--set", f"train.cliprange_value={CLIPV}"]
            zero = os.path.join(top, f"zero-{mini}")
            out = os.path.join(top, f"run-{mini}")
            r0 = tfm(["-o", zero, *common(d, rmdir, data, *extra, "--set", "optim.lr=0")])
            r1 = tfm(["-o", out, *common(d, rmdir, data, *extra, "--set", "optim.lr=0.01")])
            if r0.returncode or r1.returncode:
                bad.append(f"tfm-train ppo ({tag}): {r0.stderr.strip()} {r1.stderr.strip()}")
                continue
            s0 = read_samples(os.path.join(zero, "samples.tsv"))
            s1 = read_samples(os.path.join(out, "samples.tsv"))
            if [x["answer_ids"] for x in s0] != [x["answer_ids"] for x in s1]:
                bad.append(f"{tag}: the seeded samples differ between two runs")
            idx, perms = draws(len(prompts), epochs)
            if [x["prompt_line"] for x in s1] != [i + 1 for i in idx]:
                bad.append(f"{tag}: prompts {[x['prompt_line'] for x in s1]}, the rng's "
                           f"{[i + 1 for i in idx]}")
            pol = Policy(d, os.path.join(zero, "model.safetensors")).train()
            pids = [tok(prompts[x["prompt_line"] - 1])["input_ids"] for x in s1]
            ans = [x["answer_ids"] for x in s1]
            Wd = max(len(a) for a in ans)
            mask = torch.zeros(B, Wd, dtype=torch.bool)
            old_lp, ref_lp, vals = (torch.zeros(B, Wd) for _ in range(3))
            scores = torch.zeros(B)
            worst = {"logprobs": 0, "ref_logprobs": 0, "values": 0, "reward": 0, "kl": 0}
            with torch.no_grad():
                for i in range(B):
                    n = len(ans[i])
                    mask[i, :n] = True
                    lp, v = answer_terms(pol, pids[i], ans[i])
                    rl, _ = answer_terms(refm, pids[i], ans[i])
                    old_lp[i, :n], vals[i, :n], ref_lp[i, :n] = lp, v, rl
                    scores[i] = reward(pids[i] + ans[i])
                    for k, want in (("logprobs", lp), ("ref_logprobs", rl), ("values", v)):
                        worst[k] = max(worst[k], (torch.tensor(s1[i][k]) - want).abs().max().item())
                    worst["reward"] = max(worst["reward"], abs(s1[i]["reward"] - scores[i].item()))
                    worst["kl"] = max(worst["kl"], abs(s1[i]["kl"] - (lp - rl).sum().item()))
            # TRL's rewards, GAE and whitening, on tfm's masks: the score on
            # the last answer token, values 0 after it
            kl = (old_lp - ref_lp) * mask
            rewards = -KL * kl
            rewards[torch.arange(B), mask.sum(1) - 1] += scores
            adv = gae(rewards, vals, GAMMA, LAM)
            ret = adv + vals
            adv = torch.masked_fill(masked_whiten(adv, mask), ~mask, 0)
            for k, want in (("advantages", adv), ("returns", ret)):
                worst[k] = max((torch.tensor(s1[i][k]) - want[i, :len(ans[i])]).abs().max().item()
                               for i in range(B))
            print(f"  {tag}: rollout of {B} answers ({sum(map(len, ans))} tokens); max |tfm - "
                  f"torch|: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
            bad += [f"{tag}: {k} differ by {v:.3g}" for k, v in worst.items() if not v <= TOL]
            # the steps
            log = read_log(os.path.join(out, "log.tsv"))
            step = 0
            opt = adamw(pol, 0.01)
            for e in range(epochs):
                for m in range(mini):
                    if step == steps:
                        break
                    sel = perms[e][m * B // mini:(m + 1) * B // mini] if mini > 1 else list(range(B))
                    new_lp = torch.zeros(len(sel), Wd)
                    vpred = torch.zeros(len(sel), Wd)
                    for j, i in enumerate(sel):
                        n = len(ans[i])
                        lp, v = answer_terms(pol, pids[i], ans[i])
                        new_lp[j, :n], vpred[j, :n] = lp, v
                    pg, vf = losses(new_lp, vpred, old_lp[sel], vals[sel], adv[sel], ret[sel],
                                    mask[sel], CLIP, CLIPV)
                    loss = pg + VF * vf
                    row = log[step]
                    have = (float(row["val_pg_loss"]), float(row["val_vf_loss"]),
                            float(row["train_loss"]))
                    want = (pg.item(), vf.item(), loss.item())
                    ratio = torch.exp(new_lp - old_lp[sel])[mask[sel]]
                    clipped = ((ratio - 1).abs() > CLIP).sum().item()
                    vclipped = ((vpred - vals[sel]).abs() > CLIPV)[mask[sel]].sum().item()
                    print(f"  {tag}, step {step + 1}: pg tfm {have[0]:.7f} torch {want[0]:.7f}; "
                          f"vf tfm {have[1]:.7f} torch {want[1]:.7f}; loss {have[2]:.7f} "
                          f"({clipped} ratios, {vclipped} values clipped)")
                    if not all(abs(a - b) <= TOL for a, b in zip(have, want)):
                        bad.append(f"{tag} step {step + 1}: tfm (pg, vf, loss) {have}, torch {want}")
                    for g in opt.param_groups:
                        g["lr"] = float(row["lr"])
                    opt.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(list(pol.parameters()), 1.0)
                    opt.step()
                    step += 1
            if epochs > 1 and not (0 < clipped < mask.sum() and vclipped > 0):
                bad.append(f"{tag}: {clipped} ratios and {vclipped} values clipped in the last "
                           "step: the clips are not tested")
            w = worst_weights(pol, os.path.join(out, "model.safetensors"))
            print(f"  {tag}: weights after {steps} step{'s' if steps > 1 else ''}: max |tfm - "
                  f"torch| {w:.2e}")
            if not w <= 1e-4:
                bad.append(f"{tag}: weights after the steps differ by {w:.3g}")

        # refusals
        empty = os.path.join(top, "empty.jsonl")
        open(empty, "w").close()
        other_key = os.path.join(top, "key.jsonl")
        write_jsonl(other_key, [{"prompt": "a"}, {"prompt": "b", "completion": "c"}])
        blank = os.path.join(top, "blank.jsonl")
        write_jsonl(blank, [{"prompt": "a"}, {"prompt": ""}])

        def refuse(what, pieces, args):
            o = os.path.join(top, "refused")
            rr = run([TRAIN, "-q", "-o", o, *args])
            out = refusals(what, pieces, [("tfm-train", rr)])
            if os.path.exists(o):
                out.append(f"{what}: {o} written")
                shutil.rmtree(o)
            return out

        base = ["--set", "train.task=ppo", "--set", f"train.init={d}"]
        bad += refuse("no reward model", ["train.reward_model"], [*base, "--set",
                      f"data.text={data}"])
        bad += refuse("a reference of another architecture",
                      ["train.reference", "model.n_layer"],
                      [*base, "--set", f"train.reward_model={rmdir}", "--set",
                       f"data.text={data}", "--set", f"train.reference={deep}"])
        bad += refuse("an empty prompts file", [empty], [*base, "--set",
                      f"train.reward_model={rmdir}", "--set", f"data.text={empty}"])
        bad += refuse("a prompt line with another key", [f"{other_key}:2", "completion"],
                      [*base, "--set", f"train.reward_model={rmdir}", "--set",
                       f"data.text={other_key}"])
        bad += refuse("an empty prompt", [f"{blank}:2", "empty"],
                      [*base, "--set", f"train.reward_model={rmdir}", "--set",
                       f"data.text={blank}"])
        print("  refusals: no train.reward_model, a reference of another architecture, an "
              "empty prompts file, another key, an empty prompt")
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for b in bad:
        print(f"FAIL: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
