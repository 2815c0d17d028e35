"""What the GPT-2 cross-checks (hf_gpt2.py, hf_gpt2_errors.py,
hf_gpt2_tok.py) share: a small byte-level BPE tokenizer trained by HF
tokenizers on the project's corpus and written as transformers writes it,
random GPT-2 folders made and saved by transformers, transformers' model
read back from such a folder (in float32, eager attention), and tests/
io_probe model-logits on a batch."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import ByteLevelBPETokenizer  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from hf_lib import PROBE, SRC, run  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
CORPUS = os.path.join(SRC, "testdata", "gpt2", "corpus.txt")
EOT = "<|endoftext|>"


def train_tokenizer(top, vocab_size=400):
    """(raw dir with vocab.json + merges.txt, the GPT2Tokenizer read from it):
    byte-level BPE learned by HF tokenizers from testdata's corpus,
    <|endoftext|> id 0."""
    raw = os.path.join(top, "tok-raw")
    os.makedirs(raw, exist_ok=True)
    t = ByteLevelBPETokenizer()
    t.train([CORPUS], vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT],
            show_progress=False)
    t.save_model(raw)
    return raw, GPT2Tokenizer.from_pretrained(raw)


def make_model(V, seed, dims=None, **keys):
    """GPT2LMHeadModel(GPT2Config(..., **keys)) with every parameter random
    and well away from its initial value (layer norms' gains about 1, the
    biases not 0), so each tensor's mapping shows in the logits."""
    d = dict(n_positions=64, n_embd=32, n_layer=2, n_head=4)
    d.update(dims or {})
    keys.setdefault("bos_token_id", 0)
    keys.setdefault("eos_token_id", 0)
    torch.manual_seed(seed)
    m = GPT2LMHeadModel(GPT2Config(vocab_size=V, **d, **keys))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if ".ln_" in n and n.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 0.3)
    return m.eval()


def hf_model(d, **override):
    """transformers' model of the folder d, in float32 (F16/BF16 folders
    widened as from_pretrained(dtype=float32) does), eager attention (the
    one that returns attention maps and honours reorder_and_upcast_attn)."""
    return GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                           **override).eval()


def probe(d, rows, work):
    """tests/io_probe model-logits of the folder d on the id lists rows
    (right-padded into one batch): (process, [logits [len, V] per row])."""
    T = max(len(r) for r in rows)
    a = np.zeros((len(rows), T), np.int32)
    for i, r in enumerate(rows):
        a[i, :len(r)] = r
    bf, of = os.path.join(work, "batch.bin"), os.path.join(work, "logits.bin")
    with open(bf, "wb") as f:
        f.write(np.array([len(rows), T], np.int32).tobytes() + a.tobytes() +
                np.zeros_like(a).tobytes() + np.array([len(r) for r in rows], np.int32).tobytes())
    r = run([PROBE, "model-logits", d, bf, of])
    if r.returncode != 0:
        return r, None
    got = np.fromfile(of, np.float32).reshape(len(rows), T, -1)
    return r, [got[i, :len(x)] for i, x in enumerate(rows)]


def hf_logits(m, ids):
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()
