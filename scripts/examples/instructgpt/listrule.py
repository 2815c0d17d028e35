#!/usr/bin/env python3
"""The instructgpt pipeline's data and judge (Python's standard library
only).  The preference: an instruction "List N CATEGORY:" is answered by a
comma-separated list of exactly N distinct CATEGORY words.  A script can
check it, and it is one of the criteria InstructGPT's labelers rated
("follows explicit constraints in the instruction": a count, a length, a
format), the kind of constraint small models break.

  listrule.py data OUT        corpus.txt (pre-training: the format with any
                              count), sft.jsonl (demonstrations, half of
                              them breaking the rule), pref.jsonl and
                              pref_val.jsonl (an answer that keeps the rule
                              chosen, one that breaks it rejected: a wrong
                              count, a word of another category, a word
                              twice), prompts.jsonl (PPO's), eval.txt
  listrule.py answers GEN.jsonl OUT.jsonl   tfm-generate --json's answers
                              as {"prompt", "completion"} (tfm-eval reward)
                              and {"context", "endings"} (tfm-eval choice)
                              lines: OUT.jsonl and OUT.choice.jsonl
  listrule.py report SFT POLICY...   each policy's win rate against the SFT
                              model's answers under the reward model and
                              under the rule, and its KL (files: NAME.gen.jsonl,
                              NAME.rm.txt, NAME.lp.jsonl, NAME.sftlp.jsonl)
"""
import json
import random
import sys

CATS = {
    "animals": "cat dog horse cow sheep goat bird fish lion bear".split(),
    "colors": "red blue green black white yellow brown pink gray purple".split(),
    "fruits": "apple pear plum grape lemon orange peach mango cherry melon".split(),
}
COUNTS = (1, 2, 3, 4)
SEED = 1


def prompt(n, cat):
    return f"List {n} {cat}:"


def answer(rng, cat, k):
    return " " + ", ".join(rng.sample(CATS[cat], k))


def wrong(rng, n):
    return rng.choice([k for k in range(1, 6) if k != n])


def bad_answer(rng, n, cat):
    """An answer that breaks the rule one way: a wrong count, a word of
    another category, or a word twice (a one-item list has no repeat)."""
    how = rng.randrange(3 if n > 1 else 2)
    if how == 0:
        return answer(rng, cat, wrong(rng, n))
    items = rng.sample(CATS[cat], n)
    if how == 1:
        other = rng.choice([c for c in sorted(CATS) if c != cat])
        items[rng.randrange(n)] = rng.choice(CATS[other])
    else:
        i = rng.randrange(1, n)
        items[i] = items[rng.randrange(i)]
    return " " + ", ".join(items)


def score(p, a):
    """1 when answer a lists exactly the N distinct CATEGORY words prompt p asks for."""
    w = p.split()
    n, cat = int(w[1]), w[2].rstrip(":")
    items = [x.strip() for x in a.strip().split(",")]
    return int(len(items) == n and len(set(items)) == n and all(x in CATS[cat] for x in items))


def jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def data(out, n_sft=2000, n_pref=2000, n_val=300, n_prompts=500, n_eval=200):
    rng = random.Random(SEED)
    draw = lambda: (rng.choice(COUNTS), rng.choice(sorted(CATS)))  # noqa: E731
    with open(f"{out}/corpus.txt", "w") as f:
        for _ in range(20000):
            n, cat = draw()
            f.write(prompt(n, cat) + answer(rng, cat, rng.randint(1, 5)) + "\n")
    sft = []
    for i in range(n_sft):
        n, cat = draw()
        a = answer(rng, cat, n) if i % 2 == 0 else bad_answer(rng, n, cat)
        sft.append({"prompt": prompt(n, cat), "completion": a})
    jsonl(f"{out}/sft.jsonl", sft)
    for name, m in (("pref", n_pref), ("pref_val", n_val)):
        rows = []
        for _ in range(m):
            n, cat = draw()
            rows.append({"prompt": prompt(n, cat), "chosen": answer(rng, cat, n),
                         "rejected": bad_answer(rng, n, cat)})
        jsonl(f"{out}/{name}.jsonl", rows)
    jsonl(f"{out}/prompts.jsonl", [{"prompt": prompt(*draw())} for _ in range(n_prompts)])
    with open(f"{out}/eval.txt", "w") as f:
        for _ in range(n_eval):
            f.write(prompt(*draw()) + "\n")


def answers(gen, out):
    rows = [json.loads(x) for x in open(gen)]
    # Byte-level BPE may sample a NUL, which a JSON text line may not hold,
    # and bytes that are no UTF-8, which decode to U+FFFD: that is 3 bytes
    # again, so the text would encode longer than the sampled ids (past the
    # context).  Both are dropped: the answers scored are their text.
    for r in rows:
        r["text"] = r["text"].replace("\0", "").replace("\ufffd", "")
    jsonl(out, [{"prompt": r["prompt"], "completion": r["text"]} for r in rows])
    jsonl(out.replace(".jsonl", ".choice.jsonl"),
          [{"context": r["prompt"], "endings": [r["text"] or " "] * 2, "label": 0}
           for r in rows])


def load(name):
    gen = [json.loads(x) for x in open(f"{name}.gen.jsonl")]
    rm = [float(x) for x in open(f"{name}.rm.txt")]
    return gen, rm


def logps(path):
    return [json.loads(x)["logprobs"][0] for x in open(path)]


def win(a, b):
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(a, b)) / len(a)


def report(sft, policies):
    sg, sr = load(sft)
    srule = [score(g["prompt"], g["text"]) for g in sg]
    print("model\trule_score\twin_rate_rule\twin_rate_reward_model\tkl_to_sft")
    print(f"sft\t{sum(srule) / len(srule):.3f}\t-\t-\t0")
    for p in policies:
        g, r = load(p)
        rule = [score(x["prompt"], x["text"]) for x in g]
        lp, ref = logps(f"{p}.lp.jsonl"), logps(f"{p}.sftlp.jsonl")
        kl = sum(a - b for a, b in zip(lp, ref)) / len(lp)
        print(f"{p.rsplit('/', 1)[-1]}\t{sum(rule) / len(rule):.3f}\t{win(rule, srule):.3f}\t"
              f"{win(r, sr):.3f}\t{kl:.3f}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "data" and len(sys.argv) == 3:
        data(sys.argv[2])
    elif cmd == "answers" and len(sys.argv) == 4:
        answers(sys.argv[2], sys.argv[3])
    elif cmd == "report" and len(sys.argv) >= 4:
        report(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
