/* tfm-train's configuration: its keys and the checks between them; the
 * engine that reads and prints them is io/schema.c. */
#include "io/run_config.h"

#include "config.h"

#include <string.h>

#define OFF(f) offsetof(tfm_config, f)
#define I64 9.2e18

/* The single source of truth for keys, defaults, ranges and documentation. */
static const tfm_schema_key keys[] = {
    {"model.kind", TFM_SCHEMA_ENUM, OFF(model.kind), "decoder", 0, 0,
     "decoder|encoder|encoder-decoder",
     "decoder: causal self-attention (GPT); encoder: full self-attention over the "
     "unpadded positions (BERT); encoder-decoder: an encoder over the source, then "
     "decoder blocks with cross-attention to it (the original Transformer)"},
    {"model.positions", TFM_SCHEMA_ENUM, OFF(model.positions), "learned", 0, 0,
     "learned|sinusoidal|rope|alibi|t5",
     "position scheme: a learned table (up to block_size), the original Transformer's "
     "sinusoids, rotary q/k (rope), linear score biases (alibi), or T5's learned "
     "relative buckets (t5); all but learned extend past block_size at inference"},
    {"model.n_layer", TFM_SCHEMA_INT, OFF(model.n_layer), "4", 1, 1024, NULL,
     "number of transformer blocks (an encoder-decoder's decoder blocks)"},
    {"model.n_enc_layer", TFM_SCHEMA_INT, OFF(model.n_enc_layer), "0", 0, 1024, NULL,
     "encoder-decoder: the encoder's blocks; 0 means n_layer"},
    {"model.n_head", TFM_SCHEMA_INT, OFF(model.n_head), "4", 1, 1024, NULL,
     "attention heads per block (must divide n_embd unless model.head_dim is set)"},
    {"model.n_embd", TFM_SCHEMA_INT, OFF(model.n_embd), "128", 1, 65536, NULL,
     "model width (embedding size)"},
    {"model.block_size", TFM_SCHEMA_INT, OFF(model.block_size), "64", 1, 1048576, NULL,
     "context length in tokens"},
    {"model.vocab_size", TFM_SCHEMA_INT, OFF(model.vocab_size), "0", 0, 16777216, NULL,
     "vocabulary size; 0 takes it from the tokenizer (or the largest id in the data + 1)"},
    {"model.dropout", TFM_SCHEMA_FLOAT, OFF(model.dropout), "0", 0, 0.99, NULL,
     "dropout probability on embeddings, attention and residual branches"},
    {"model.ffn_dropout", TFM_SCHEMA_FLOAT, OFF(model.ffn_dropout), "0", 0, 0.99, NULL,
     "dropout probability inside each feed-forward, on its hidden units after the activation "
     "(or the gated product), before the output projection: T5's DenseReluDense dropout "
     "(HF dropout_rate, as model.dropout) and BART's activation_dropout"},
    {"model.final_dropout", TFM_SCHEMA_FLOAT, OFF(model.final_dropout), "0", 0, 0.99, NULL,
     "dropout probability on each stack's output, after its final norm: the decoder's "
     "before the heads, an encoder's before cross-attention reads it (T5's stacks, at "
     "dropout_rate as model.dropout)"},
    {"model.tie_embeddings", TFM_SCHEMA_BOOL, OFF(model.tie_embeddings), "true", 0, 0, NULL,
     "the LM head shares the token embedding matrix"},
    {"model.tie_source", TFM_SCHEMA_BOOL, OFF(model.tie_source), "true", 0, 0, NULL,
     "encoder-decoder: the source shares the (target) token embedding, one joint "
     "vocabulary; with tie_embeddings, the original Transformer's three-way tie"},
    {"model.src_vocab_size", TFM_SCHEMA_INT, OFF(model.src_vocab_size), "0", 0, 16777216,
     NULL, "encoder-decoder with tie_source false: the source vocabulary's size; 0 means "
     "vocab_size"},
    {"model.bias", TFM_SCHEMA_BOOL, OFF(model.bias), "true", 0, 0, NULL,
     "the linear layers of each block have biases (layer norms always keep theirs, rmsnorm "
     "has none)"},
    {"model.norm", TFM_SCHEMA_ENUM, OFF(model.norm), "pre", 0, 0, "pre|post",
     "layer norm placement: pre (GPT-2) or post (GPT-1, original Transformer)"},
    {"model.norm_type", TFM_SCHEMA_ENUM, OFF(model.norm_type), "layernorm", 0, 0,
     "layernorm|rmsnorm",
     "the norms of the blocks, the final and the embedding norm: layernorm (mean and "
     "variance, weight and bias) or rmsnorm (x / sqrt(mean(x^2) + ln_eps) times a weight, no "
     "bias: T5, LLaMA)"},
    {"model.activation", TFM_SCHEMA_ENUM, OFF(model.activation), "gelu", 0, 0,
     "gelu|gelu_exact|relu", "MLP activation: gelu (tanh approximation), gelu_exact (erf), relu; "
     "a gated model.ffn has its own (and the MLM head keeps this one)"},
    {"model.ffn", TFM_SCHEMA_ENUM, OFF(model.ffn), "plain", 0, 0, "plain|geglu|swiglu",
     "feed-forward: plain (activation(x W_fc) W_proj) or gated, (act(x W_0) * (x W_1)) W_proj "
     "with act GELU-tanh (geglu: T5 v1.1's gated-gelu) or SiLU (swiglu: LLaMA); d_ff is the "
     "width of W_0 and W_1"},
    {"model.attn_scale", TFM_SCHEMA_BOOL, OFF(model.attn_scale), "true", 0, 0, NULL,
     "attention scores q.k scaled by 1/sqrt(head size); false: unscaled, as T5 (whose "
     "initialisation absorbs the factor)"},
    {"model.ln_eps", TFM_SCHEMA_FLOAT, OFF(model.ln_eps), "1e-05", 1e-12, 1, NULL,
     "layer norm epsilon"},
    {"model.d_ff", TFM_SCHEMA_INT, OFF(model.d_ff), "0", 0, 1048576, NULL,
     "inner width of the MLP; 0 means 4 x n_embd"},
    {"model.head_dim", TFM_SCHEMA_INT, OFF(model.head_dim), "0", 0, 65536, NULL,
     "width of each attention head; 0 means n_embd / n_head.  The projections q, k, v "
     "are n_head x head_dim wide, which may differ from n_embd (T5 v1.1 small, "
     "flan-t5-small: 6 heads of 64 over d_model 512)"},
    {"model.rope_base", TFM_SCHEMA_FLOAT, OFF(model.rope_base), "10000", 2, 1e9, NULL,
     "rope: the base of the rotation frequencies"},
    {"model.t5_buckets", TFM_SCHEMA_INT, OFF(model.t5_buckets), "32", 2, 4096, NULL,
     "t5: relative position buckets (half per direction in encoders)"},
    {"model.t5_max_distance", TFM_SCHEMA_INT, OFF(model.t5_max_distance), "128", 2, 1048576,
     NULL, "t5: distance at which the last (logarithmic) bucket begins"},
    {"model.segments", TFM_SCHEMA_INT, OFF(model.segments), "0", 0, 1024, NULL,
     "segment (token type) embeddings, e.g. 2 for BERT's sentence A and B; encoders only"},
    {"model.emb_norm", TFM_SCHEMA_BOOL, OFF(model.emb_norm), "false", 0, 0, NULL,
     "layer norm over the embedding sum, before the first block (BERT)"},
    {"model.emb_scale", TFM_SCHEMA_BOOL, OFF(model.emb_scale), "false", 0, 0, NULL,
     "token embeddings times sqrt(n_embd) before the positions are added (the original "
     "Transformer)"},
    {"model.head_scale", TFM_SCHEMA_BOOL, OFF(model.head_scale), "false", 0, 0, NULL,
     "the final hidden states times n_embd^-0.5 before the LM head (T5 with tied "
     "embeddings)"},
    {"model.head_bias", TFM_SCHEMA_BOOL, OFF(model.head_bias), "false", 0, 0, NULL,
     "the LM head adds a bias of its own to the logits, final_logits_bias [vocab_size] "
     "(HuggingFace BART's)"},
    {"model.decoder_start", TFM_SCHEMA_INT, OFF(model.decoder_start), "-1", -1, 16777215,
     NULL, "encoder-decoder: the token a translation starts from (T5: 0, its padding); -1: "
     "the tokenizer's beginning-of-text, else end-of-text"},
    {"model.forced_bos", TFM_SCHEMA_INT, OFF(model.forced_bos), "-1", -1, 16777215, NULL,
     "encoder-decoder: the token every translation begins with, forced right after "
     "model.decoder_start (HuggingFace's forced_bos_token_id: BART's 0, <s>), and the first "
     "token of every training target; -1: none"},
    {"model.source_bos", TFM_SCHEMA_BOOL, OFF(model.source_bos), "false", 0, 0, NULL,
     "encoder-decoder: every source given as text begins with the source tokenizer's "
     "beginning-of-text token (BART's <s>, as its tokenizer adds), in training and "
     "translation"},
    {"model.init", TFM_SCHEMA_ENUM, OFF(model.init), "gpt2", 0, 0, "gpt2|xavier",
     "initialisation: gpt2 (matrices and embeddings N(0, 0.02), residual projections "
     "scaled down) or xavier (Xavier-uniform matrices, embeddings N(0, n_embd^-0.5))"},
    {"model.mlm_head", TFM_SCHEMA_BOOL, OFF(model.mlm_head), "false", 0, 0, NULL,
     "BERT's masked-LM head: dense, activation and layer norm before the (tied) LM decoder "
     "with a bias of its own; logits only at the masked positions"},
    {"model.pooler", TFM_SCHEMA_BOOL, OFF(model.pooler), "false", 0, 0, NULL,
     "BERT's pooler: dense + tanh on the pooled position before the classifier"},
    {"model.classes", TFM_SCHEMA_INT, OFF(model.classes), "0", 0, 65536, NULL,
     "classifier on the pooled position ([CLS], a decoder's last token): 0 none, 1 "
     "regression (mean squared error), 2 or more classes"},
    {"model.nsp", TFM_SCHEMA_BOOL, OFF(model.nsp), "false", 0, 0, NULL,
     "the classifier is BERT's next-sentence head (2 classes, cls.seq_relationship)"},
    {"model.tags", TFM_SCHEMA_INT, OFF(model.tags), "0", 0, 65536, NULL,
     "token tagger: tags per position (0: none)"},
    {"model.span", TFM_SCHEMA_BOOL, OFF(model.span), "false", 0, 0, NULL,
     "span head: start and end classifiers over the positions (question answering)"},

    {"data.train", TFM_SCHEMA_STRING, OFF(data.train), "", 0, 0, NULL,
     "training tokens: a .npy file of uint16 or uint32 ids"},
    {"data.val", TFM_SCHEMA_STRING, OFF(data.val), "", 0, 0, NULL,
     "validation tokens (.npy); encoder-decoders: source<TAB>target lines; mlm with "
     "data.text: text like it; classify, tag, span: examples as data.text; empty: no "
     "validation unless the training data is split "
     "(data.val_fraction)"},
    {"data.text", TFM_SCHEMA_STRING, OFF(data.text), "", 0, 0, NULL,
     "a text file to encode with data.tokenizer instead of data.train; encoder-decoders: "
     "source<TAB>target lines; classify, tag, span: the training examples (TSV, CoNLL or "
     "JSON Lines)"},
    {"data.tokenizer", TFM_SCHEMA_STRING, OFF(data.tokenizer), "", 0, 0, NULL,
     "tokenizer (tokenizer.json, ...) stored in the model file; required with data.text "
     "(classify, tag, span: empty takes train.init's)"},
    {"data.val_fraction", TFM_SCHEMA_FLOAT, OFF(data.val_fraction), "0.1", 0, 0.9, NULL,
     "with data.text: the last fraction of the tokens (encoder-decoders: of the pairs; mlm: "
     "of the documents) used for validation when no validation data is named"},
    {"data.source", TFM_SCHEMA_STRING, OFF(data.source), "", 0, 0, NULL,
     "encoder-decoders: source sentences, one a line, line-aligned with data.target "
     "(instead of data.text's source<TAB>target lines)"},
    {"data.target", TFM_SCHEMA_STRING, OFF(data.target), "", 0, 0, NULL,
     "encoder-decoders: the target sentences of data.source"},
    {"data.val_source", TFM_SCHEMA_STRING, OFF(data.val_source), "", 0, 0, NULL,
     "encoder-decoders: validation sources, line-aligned with data.val_target (or data.val: "
     "source<TAB>target lines)"},
    {"data.val_target", TFM_SCHEMA_STRING, OFF(data.val_target), "", 0, 0, NULL,
     "encoder-decoders: the validation targets"},
    {"data.source_tokenizer", TFM_SCHEMA_STRING, OFF(data.source_tokenizer), "", 0, 0, NULL,
     "encoder-decoders: a second tokenizer for the source side (stored in the model file; "
     "needs model.tie_source false); empty: data.tokenizer encodes both sides"},
    {"data.truncate", TFM_SCHEMA_ENUM, OFF(data.truncate), "head", 0, 0, "head|error",
     "encoder-decoders: a side longer than model.block_size - 1 tokens is cut to its head "
     "(counted and reported) or is an error naming its line; classify, tag, span: likewise "
     "an example longer than model.block_size (span: a context that needs windows)"},
    {"data.packing", TFM_SCHEMA_BOOL, OFF(data.packing), "false", 0, 0, NULL,
     "decoders: documents (split after each end-of-text token) attend only within "
     "themselves and their positions restart, instead of attending across boundaries"},
    {"data.cls_id", TFM_SCHEMA_INT, OFF(data.cls_id), "-1", -1, 16777215, NULL,
     "mlm: the id of [CLS]; -1: the tokenizer's"},
    {"data.sep_id", TFM_SCHEMA_INT, OFF(data.sep_id), "-1", -1, 16777215, NULL,
     "mlm: the id of [SEP]; -1: the tokenizer's"},
    {"data.mask_id", TFM_SCHEMA_INT, OFF(data.mask_id), "-1", -1, 16777215, NULL,
     "mlm: the id of [MASK]; -1: the tokenizer's"},
    {"data.n_special", TFM_SCHEMA_INT, OFF(data.n_special), "0", 0, 16777215, NULL,
     "mlm: ids below this are special too and never drawn as random tokens (besides "
     "[CLS], [SEP], [MASK] and the tokenizer's specials)"},
    {"data.documents", TFM_SCHEMA_ENUM, OFF(data.documents), "blank-line", 0, 0,
     "blank-line|line",
     "mlm with data.text: blank-line (a segment a line, documents separated by blank lines: "
     "BERT's pre-training text) or line (a document a line)"},
    {"data.symmetric", TFM_SCHEMA_BOOL, OFF(data.symmetric), "false", 0, 0, NULL,
     "classify on a decoder: each pair is also read in the other order (GPT's similarity "
     "tasks): two training rows, and a prediction averages their probabilities"},
    {"data.doc_stride", TFM_SCHEMA_INT, OFF(data.doc_stride), "128", 1, 1 << 24, NULL,
     "span: a context longer than its window is read in windows starting this many tokens "
     "apart (at most the window's length)"},
    {"data.prefix", TFM_SCHEMA_STRING, OFF(data.prefix), "", 0, 0, NULL,
     "encoder-decoders and prefix-lm pairs: a task prefix (T5's \"translate English to "
     "German: \") prepended to every source or input, in training and validation; stored "
     "in the model file, so tfm-generate prepends it too"},

    {"optim.type", TFM_SCHEMA_ENUM, OFF(optim.type), "adamw", 0, 0, "adamw|adam",
     "adamw (decoupled weight decay) or adam (weight decay added to the gradient)"},
    {"optim.lr", TFM_SCHEMA_FLOAT, OFF(optim.lr), "0.001", 0, 1e6, NULL,
     "peak learning rate (for inverse_sqrt: a multiplier of the schedule)"},
    {"optim.beta1", TFM_SCHEMA_FLOAT, OFF(optim.beta1), "0.9", 0, 0.999999, NULL,
     "Adam first-moment decay"},
    {"optim.beta2", TFM_SCHEMA_FLOAT, OFF(optim.beta2), "0.999", 0, 0.999999999, NULL,
     "Adam second-moment decay"},
    {"optim.eps", TFM_SCHEMA_FLOAT, OFF(optim.eps), "1e-08", 0, 1, NULL,
     "Adam epsilon"},
    {"optim.weight_decay", TFM_SCHEMA_FLOAT, OFF(optim.weight_decay), "0", 0, 10, NULL,
     "weight decay, applied to matrices only (not biases, norms)"},
    {"optim.grad_clip", TFM_SCHEMA_FLOAT, OFF(optim.grad_clip), "1", 0, 1e9, NULL,
     "clip the global gradient norm to this value; 0 disables"},

    {"schedule.warmup", TFM_SCHEMA_INT, OFF(schedule.warmup), "0", 0, I64, NULL,
     "steps of linear warmup from 0 to optim.lr"},
    {"schedule.decay", TFM_SCHEMA_ENUM, OFF(schedule.decay), "cosine", 0, 0,
     "cosine|linear|constant|inverse_sqrt",
     "after warmup: cosine or linear to min_lr at max_steps, constant, or inverse_sqrt"},
    {"schedule.min_lr", TFM_SCHEMA_FLOAT, OFF(schedule.min_lr), "0", 0, 1e6, NULL,
     "final learning rate of cosine and linear decay"},

    {"train.batch_size", TFM_SCHEMA_INT, OFF(train.batch_size), "12", 1, 1048576, NULL,
     "sequences per micro-batch"},
    {"train.grad_accum", TFM_SCHEMA_INT, OFF(train.grad_accum), "1", 1, 65536, NULL,
     "micro-batches accumulated per optimizer step"},
    {"train.max_steps", TFM_SCHEMA_INT, OFF(train.max_steps), "1000", 0, I64, NULL,
     "optimizer steps in the whole run"},
    {"train.eval_interval", TFM_SCHEMA_INT, OFF(train.eval_interval), "200", 0, I64, NULL,
     "evaluate on the validation set every N steps (and at the end); 0: only at the end"},
    {"train.eval_batches", TFM_SCHEMA_INT, OFF(train.eval_batches), "20", 1, 1000000, NULL,
     "validation batches per evaluation (the same batches every time); encoder-decoders "
     "evaluate every validation pair"},
    {"train.checkpoint_interval", TFM_SCHEMA_INT, OFF(train.checkpoint_interval), "0", 0, I64,
     NULL, "save a checkpoint every N steps; 0: every train.eval_interval steps"},
    {"train.log_interval", TFM_SCHEMA_INT, OFF(train.log_interval), "10", 1, I64, NULL,
     "write a log.tsv line every N steps"},
    {"train.patience", TFM_SCHEMA_INT, OFF(train.patience), "0", 0, I64, NULL,
     "stop after N evaluations without a new best validation loss; 0: never"},
    {"train.seed", TFM_SCHEMA_INT, OFF(train.seed), "1337", -1, I64, NULL,
     "random seed for initialisation, batches and dropout; -1: from the clock (printed "
     "without -q, and kept in the run's configuration: tfm-train -o RUN --dump-config)"},
    {"train.threads", TFM_SCHEMA_INT, OFF(train.threads), "0", 0, 4096, NULL,
     "threads; 0: --threads, TFM_NUM_THREADS or the CPUs usable"},
    {"train.label_smoothing", TFM_SCHEMA_FLOAT, OFF(train.label_smoothing), "0", 0, 0.999,
     NULL, "label smoothing of the cross-entropy loss"},
    {"train.max_tokens", TFM_SCHEMA_INT, OFF(train.max_tokens), "0", 0, 1 << 30, NULL,
     "encoder-decoders: a micro-batch is a run of pairs of similar length (sorted) whose "
     "padded size, pairs x longest side, stays within N tokens; 0: train.batch_size pairs "
     "drawn at random"},
    {"train.bucket_mb", TFM_SCHEMA_FLOAT, OFF(train.bucket_mb), "25", 0, 1e6, NULL,
     "MPI ranks: the gradients are summed in buckets of whole tensors from the top of the "
     "model down, each at least this many MiB (0: a bucket a tensor) but the one that holds "
     "the blocks' bottom and the last, the embeddings"},
    {"train.overlap", TFM_SCHEMA_BOOL, OFF(train.overlap), "true", 0, 0, NULL,
     "MPI ranks: each bucket's all-reduce starts as soon as backward has finished its "
     "gradients, overlapping the rest of backward; false: all of them after backward (the "
     "same sums, bit for bit)"},
    {"train.eval_bleu", TFM_SCHEMA_BOOL, OFF(train.eval_bleu), "false", 0, 0, NULL,
     "encoder-decoders: each evaluation also translates validation sources greedily and "
     "scores corpus BLEU against their targets"},
    {"train.bleu_sentences", TFM_SCHEMA_INT, OFF(train.bleu_sentences), "500", 1, I64, NULL,
     "with train.eval_bleu: the first N validation pairs are translated"},
    {"train.best_by", TFM_SCHEMA_ENUM, OFF(train.best_by), "loss", 0, 0,
     "loss|bleu|masked_accuracy|nsp_accuracy|accuracy|macro_f1|pearson|entity_f1|"
     "token_accuracy|squad_f1|squad_em",
     "best.safetensors keeps the evaluation of the best value of this validation metric: "
     "the lowest loss, the highest of the others; the task must report it (a log.tsv "
     "column val_<metric>): bleu (seq2seq, needs train.eval_bleu), masked_accuracy "
     "(mlm), nsp_accuracy (mlm+nsp), accuracy and macro_f1 (classify), pearson "
     "(classify, regression), entity_f1 (tag, chunk tags) and token_accuracy (tag), "
     "squad_f1 and squad_em (span)"},
    {"train.init", TFM_SCHEMA_STRING, OFF(train.init), "", 0, 0, NULL,
     "a model file (or HuggingFace BERT checkpoint) that starts the run (fine-tuning): "
     "model keys left out take its shape, one that contradicts it is an error; new heads "
     "are initialised, and the start report names them"},
    {"train.lora.r", TFM_SCHEMA_INT, OFF(train.lora.r), "0", 0, 65536, NULL,
     "LoRA rank: with r > 0 the base weights are frozen and each targeted projection gains "
     "an adapter (alpha/r)·B·A, saved in PEFT's layout; 0: train every weight"},
    {"train.lora.alpha", TFM_SCHEMA_FLOAT, OFF(train.lora.alpha), "8", 1e-6, 1e6, NULL,
     "LoRA's alpha: the adapters' output is scaled by alpha/r"},
    {"train.lora.dropout", TFM_SCHEMA_FLOAT, OFF(train.lora.dropout), "0", 0, 0.999, NULL,
     "dropout on each adapter's input"},
    {"train.lora.targets", TFM_SCHEMA_STRING, OFF(train.lora.targets), "q, v", 0, 0, NULL,
     "the projections LoRA adapts, a list of q, k, v, o (attention output), fc (the "
     "feed-forward's input; gated: both), proj (its output); HF names are accepted: "
     "q_proj/query, k_proj/key, v_proj/value, o_proj/out_proj/dense, c_attn (q, k, v), "
     "c_fc/fc1/wi/wi_0/wi_1/intermediate, c_proj, fc2/wo/output"},
    {"train.task", TFM_SCHEMA_ENUM, OFF(train.task), "lm", 0, 0,
     "lm|mlm|mlm+nsp|classify|tag|span|span-corruption|denoise|prefix-lm",
     "what the model learns: lm (next token), mlm (BERT's masked tokens in [CLS] A [SEP] B "
     "[SEP]: segments of data.text's documents, or windows of a token file; needs "
     "model.mlm_head and 2 segments), mlm+nsp (and whether B follows A, on model.pooler "
     "with model.nsp); fine-tuning on the examples of data.text: classify (a label or a "
     "number per text or pair), tag (a tag per word), span (the answer's span in a context); "
     "encoder-decoders: lm (pairs of sentences), span-corruption (T5's pre-training: noise "
     "spans of data.text replaced by sentinels <extra_id_N> in the source, the target "
     "spelling them out; train.noise), denoise (BART's pre-training: data.text with its "
     "sentences shuffled and Poisson spans each replaced by one <mask> in the source, the "
     "original text the target); decoders: prefix-lm (full attention over a prefix, causal "
     "after, the loss on the rest only; train.prefix_from)"},
    {"train.prefix_from", TFM_SCHEMA_ENUM, OFF(train.prefix_from), "random", 0, 0,
     "random|pairs",
     "prefix-lm: random (each window of block_size + 1 tokens of the text or token stream "
     "is split after a prefix of P tokens, P uniform in [1, block_size]) or pairs (data.text "
     "and data.val are input<TAB>target lines: the input and end-of-text are the prefix, the "
     "target and end-of-text the rest)"},
    {"train.noise_density", TFM_SCHEMA_FLOAT, OFF(train.noise_density), "0.15", 0.001, 0.999,
     NULL, "span-corruption: the share of a window's tokens in noise spans (round(density x "
     "length), at least 1, at most length - 1)"},
    {"train.mean_span", TFM_SCHEMA_FLOAT, OFF(train.mean_span), "3", 1, 1e6, NULL,
     "span-corruption: the mean noise span length (round(noise tokens / mean_span) spans, at "
     "least 1)"},
    {"train.noise", TFM_SCHEMA_ENUM, OFF(train.noise), "spans", 0, 0, "spans|iid|drop|bert",
     "span-corruption: the T5 study's objective: spans (random noise spans, a sentinel "
     "each), or each token noise with probability noise_density and iid (a sentinel per run "
     "of noise), drop (noise tokens dropped from the source, the target the dropped tokens) "
     "or bert (noise tokens become <extra_id_0>, random_token_prob of them a random token; "
     "the target the whole text)"},
    {"train.mask_ratio", TFM_SCHEMA_FLOAT, OFF(train.mask_ratio), "0.3", 0, 1, NULL,
     "denoise: the share of tokens planned in noise spans (ceil(ratio x length))"},
    {"train.poisson_lambda", TFM_SCHEMA_FLOAT, OFF(train.poisson_lambda), "3", 0.01, 50, NULL,
     "denoise: the mean of the Poisson span lengths; a length-0 span inserts a <mask>"},
    {"train.permute_sentences", TFM_SCHEMA_BOOL, OFF(train.permute_sentences), "true", 0, 0,
     NULL, "denoise: shuffle the sentences of each window (ends: . ! ? and line breaks)"},
    {"train.mask_prob", TFM_SCHEMA_FLOAT, OFF(train.mask_prob), "0.15", 0.001, 1, NULL,
     "mlm: the share of content positions chosen (round(p x length), at least 1)"},
    {"train.mask_token_prob", TFM_SCHEMA_FLOAT, OFF(train.mask_token_prob), "0.8", 0, 1, NULL,
     "mlm: a chosen position becomes [MASK] with this probability"},
    {"train.random_token_prob", TFM_SCHEMA_FLOAT, OFF(train.random_token_prob), "0.1", 0, 1,
     NULL, "mlm: a chosen position becomes a random non-special token with this probability "
     "(else it stays unchanged); denoise and span-corruption's noise bert: a noise span or "
     "token becomes one instead of the mask"},
    {"train.short_seq_prob", TFM_SCHEMA_FLOAT, OFF(train.short_seq_prob), "0.1", 0, 1, NULL,
     "mlm: with this probability a sequence aims at a uniform length in [2, block_size - 3] "
     "content tokens instead of filling the context, the rest padding (BERT's short "
     "sequences)"},
    {"train.whole_word_mask", TFM_SCHEMA_BOOL, OFF(train.whole_word_mask), "false", 0, 0, NULL,
     "mlm: choose whole words (a WordPiece token and its ## continuations; for BPE, from a "
     "token that starts with a space to the next), not single tokens; needs data.tokenizer"},
    {"train.lm_weight", TFM_SCHEMA_FLOAT, OFF(train.lm_weight), "0.5", 0, 100, NULL,
     "classify on a decoder: the weight of the language-model loss on the examples' text "
     "added to the classifier's (GPT's lambda); 0: none"},
};

#define NKEYS (sizeof keys / sizeof keys[0])
_Static_assert(NKEYS <= TFM_CONFIG_MAX_KEYS, "raise TFM_CONFIG_MAX_KEYS");

static const tfm_schema_alias aliases[] = {
    {"learning_rate", "optim.lr"}, {"layers", "model.n_layer"},
    {"heads", "model.n_head"},     {"d_model", "model.n_embd"},
    {"context", "model.block_size"}, {"seq_len", "model.block_size"},
    {"clip", "optim.grad_clip"},   {"steps", "train.max_steps"},
    {"warmup_steps", "schedule.warmup"}, {"epsilon", "optim.eps"},
};

static const tfm_schema schema = {
    keys, NKEYS, sizeof(tfm_config), offsetof(tfm_config, given),
    "model, data, optim, schedule or train", aliases, sizeof aliases / sizeof aliases[0],
};

const tfm_schema *tfm_config_schema(void)
{
    return &schema;
}

const tfm_schema_key *tfm_config_keys(size_t *n)
{
    *n = NKEYS;
    return keys;
}

const tfm_schema_key *tfm_config_find(const char *path)
{
    return tfm_schema_find(&schema, path);
}

void tfm_config_defaults(tfm_config *c)
{
    tfm_schema_defaults(&schema, c);
}

int tfm_config_apply_yaml(tfm_config *c, const char *text, size_t len, const char *name,
                          tfm_err *err)
{
    return tfm_schema_apply_yaml(&schema, c, text, len, name, err);
}

int tfm_config_load_yaml(tfm_config *c, const char *path, tfm_err *err)
{
    return tfm_schema_load_yaml(&schema, c, path, err);
}

int tfm_config_set(tfm_config *c, const char *assignment, tfm_err *err)
{
    return tfm_schema_set(&schema, c, assignment, err);
}

void tfm_config_dump(const tfm_config *c, int comments, tfm_buf *out)
{
    tfm_schema_dump(&schema, c, comments, out);
}

int tfm_config_given(const tfm_config *c, const char *path)
{
    return tfm_schema_given(&schema, c, path);
}

const char *tfm_config_suggest(const char *path)
{
    return tfm_schema_suggest(&schema, path);
}

const char *tfm_config_choice_name(const char *path, int value, char *buf, size_t size)
{
    return tfm_schema_choice_name(&schema, path, value, buf, size);
}

int tfm_config_validate(const tfm_config *c, tfm_err *err)
{
    if (!c->model.head_dim && c->model.n_embd % c->model.n_head)
        return tfm_err_set(err, "model.n_embd (%lld) must be divisible by model.n_head (%lld), "
                           "or model.head_dim set", (long long)c->model.n_embd,
                           (long long)c->model.n_head);
    long long hs = c->model.head_dim ? (long long)c->model.head_dim
                                     : (long long)(c->model.n_embd / c->model.n_head);
    int dec = c->model.kind == TFM_CONFIG_KIND_DECODER;
    if (c->model.positions == TFM_CONFIG_POS_ROPE && hs % 2)
        return tfm_err_set(err, "model.positions rope needs an even head size, not %lld "
                           "(model.head_dim, or model.n_embd / model.n_head)", hs);
    if (c->model.positions == TFM_CONFIG_POS_SINUSOIDAL && c->model.n_embd % 2)
        return tfm_err_set(err, "model.positions sinusoidal needs an even model.n_embd (%lld)",
                           (long long)c->model.n_embd);
    /* (the default, gelu, stands in every stored configuration: not an error) */
    if (c->model.ffn && c->model.activation != TFM_CONFIG_ACT_GELU && !c->model.mlm_head) {
        char act[32], ffn[32];
        tfm_config_choice_name("model.activation", c->model.activation, act, sizeof act);
        tfm_config_choice_name("model.ffn", c->model.ffn, ffn, sizeof ffn);
        return tfm_err_set(err, "model.activation %s with model.ffn %s: a gated feed-forward "
                           "has its own activation (geglu: GELU-tanh, swiglu: SiLU); leave "
                           "model.activation out, or use model.ffn plain", act, ffn);
    }
    int ed = c->model.kind == TFM_CONFIG_KIND_ENCODER_DECODER;
    const char *kind = dec ? "decoder" : ed ? "encoder-decoder" : "encoder";
    if (!ed && (c->model.n_enc_layer || !c->model.tie_source || c->model.src_vocab_size ||
                c->model.forced_bos >= 0 || c->model.source_bos)) {
        char keys[128] = "";
        if (c->model.n_enc_layer)
            strcat(keys, ", model.n_enc_layer");
        if (!c->model.tie_source)
            strcat(keys, ", model.tie_source");
        if (c->model.src_vocab_size)
            strcat(keys, ", model.src_vocab_size");
        if (c->model.forced_bos >= 0)
            strcat(keys, ", model.forced_bos");
        if (c->model.source_bos)
            strcat(keys, ", model.source_bos");
        return tfm_err_set(err, "%s with model.kind %s: these keys are for an "
                           "encoder-decoder", keys + 2, kind);
    }
    if (ed && c->model.tie_source && c->model.src_vocab_size && c->model.vocab_size &&
        c->model.src_vocab_size != c->model.vocab_size)
        return tfm_err_set(err, "model.src_vocab_size (%lld) with model.tie_source true: a "
                           "shared embedding has one vocabulary (set model.tie_source false)",
                           (long long)c->model.src_vocab_size);
    if (!(c->model.kind == TFM_CONFIG_KIND_ENCODER) && c->model.segments)
        return tfm_err_set(err, "model.segments (%lld) with model.kind %s: segment "
                           "embeddings are for encoders", (long long)c->model.segments, kind);
    if (!dec && c->data.packing)
        return tfm_err_set(err, "data.packing with model.kind %s: packing is for decoders",
                           kind);
    int pairs = c->data.source[0] || c->data.target[0] || c->data.val_source[0] ||
                c->data.val_target[0] || c->data.source_tokenizer[0];
    if (!ed && pairs)
        return tfm_err_set(err, "data.source/target/val_source/val_target/source_tokenizer with "
                           "model.kind %s: "
                           "parallel data is for encoder-decoders (use data.text or data.train)",
                           kind);
    if (!ed && (c->train.max_tokens || c->train.eval_bleu ||
                c->train.best_by == TFM_CONFIG_BEST_BLEU))
        return tfm_err_set(err, "train.max_tokens, train.eval_bleu and train.best_by bleu are "
                           "for encoder-decoders, not model.kind %s", kind);
    /* the pre-training tasks of encoder-decoders: raw text corrupted */
    int sc = c->train.task == TFM_CONFIG_TASK_SPAN_CORRUPTION ||
             c->train.task == TFM_CONFIG_TASK_DENOISE;
    const char *scn = c->train.task == TFM_CONFIG_TASK_DENOISE ? "denoise" : "span-corruption";
    if (sc && !ed)
        return tfm_err_set(err, "train.task %s needs model.kind encoder-decoder, not %s", scn,
                           kind);
    if (sc && (pairs || c->train.eval_bleu))
        return tfm_err_set(err, "train.task %s reads raw text (data.text, data.val): data."
                           "source/target/val_source/val_target/source_tokenizer and "
                           "train.eval_bleu are for train.task lm", scn);
    /* prefix-lm: the prefix mask of a causal stack */
    int plm = c->train.task == TFM_CONFIG_TASK_PREFIX_LM;
    if (plm && !dec)
        return tfm_err_set(err, "train.task prefix-lm needs model.kind decoder (full attention "
                           "over a prefix of a causal stack), not %s%s", kind,
                           ed ? " (its encoder reads the whole source already: use lm on "
                           "pairs, or span-corruption)" : "");
    if (plm && c->data.packing)
        return tfm_err_set(err, "data.packing with train.task prefix-lm: a row is one prefix "
                                "and its continuation, not packed documents");
    if (!plm && c->train.prefix_from != TFM_CONFIG_PREFIX_RANDOM)
        return tfm_err_set(err, "train.prefix_from is for train.task prefix-lm");
    if (plm && c->train.prefix_from == TFM_CONFIG_PREFIX_PAIRS && !c->data.text[0])
        return tfm_err_set(err, "train.prefix_from pairs reads input<TAB>target lines from "
                                "data.text (with data.tokenizer), not token ids");
    /* a task prefix is text put before each pair's source or input */
    if (c->data.prefix[0] && !(ed && c->train.task == TFM_CONFIG_TASK_LM) &&
        !(plm && c->train.prefix_from == TFM_CONFIG_PREFIX_PAIRS))
        return tfm_err_set(err, "data.prefix is for pairs: model.kind encoder-decoder with "
                                "train.task lm, or train.task prefix-lm with train.prefix_from "
                                "pairs");
    if ((c->train.task == TFM_CONFIG_TASK_LM || sc || plm) &&
        (c->train.whole_word_mask || c->data.documents != TFM_CONFIG_DOCS_BLANK_LINE))
        return tfm_err_set(err, "train.whole_word_mask and data.documents are for train.task "
                                "mlm and mlm+nsp");
    if (c->train.best_by == TFM_CONFIG_BEST_BLEU && !c->train.eval_bleu)
        return tfm_err_set(err, "train.best_by bleu needs train.eval_bleu true");
    if (ed) {
        if (c->data.train[0] && sc)
            return tfm_err_set(err, "data.train with train.task %s: give the raw text as "
                               "data.text (with data.tokenizer)", scn);
        if (c->data.train[0])
            return tfm_err_set(err, "data.train with model.kind encoder-decoder: give pairs as "
                               "data.text (source<TAB>target lines) or data.source and "
                               "data.target");
        if (!c->data.tokenizer[0])
            return tfm_err_set(err, "model.kind encoder-decoder needs data.tokenizer (one "
                               "tokenizer for both sides, with an end-of-text token)");
        if (c->data.source_tokenizer[0] && c->model.tie_source)
            return tfm_err_set(err, "data.source_tokenizer with model.tie_source true: a "
                               "source vocabulary of its own needs its own embedding (set "
                               "model.tie_source false)");
        if (!!c->data.source[0] != !!c->data.target[0])
            return tfm_err_set(err, "data.source and data.target go together");
        if (!!c->data.val_source[0] != !!c->data.val_target[0])
            return tfm_err_set(err, "data.val_source and data.val_target go together");
        if (c->data.source[0] && c->data.text[0])
            return tfm_err_set(err, "data.text and data.source/data.target are exclusive: "
                               "set one of them");
        if (c->data.val_source[0] && c->data.val[0])
            return tfm_err_set(err, "data.val and data.val_source/data.val_target are "
                               "exclusive: set one of them");
        if (!c->data.text[0] && !c->data.source[0])
            return tfm_err_set(err, sc ? "no training data: set data.text (the text to "
                               "corrupt)" : "no training data: set data.text (source<TAB>target "
                               "lines) or data.source and data.target");
    }
    int ft = c->train.task == TFM_CONFIG_TASK_CLASSIFY || c->train.task == TFM_CONFIG_TASK_TAG ||
             c->train.task == TFM_CONFIG_TASK_SPAN;
    if (ft) {
        char task[16];
        tfm_config_choice_name("train.task", c->train.task, task, sizeof task);
        if (ed)
            return tfm_err_set(err, "train.task %s with model.kind encoder-decoder: fine-tuning "
                               "is for encoders%s", task,
                               c->train.task == TFM_CONFIG_TASK_CLASSIFY ? " and decoders" : "");
        if (c->train.task != TFM_CONFIG_TASK_CLASSIFY && dec)
            return tfm_err_set(err, "train.task %s with model.kind decoder: it needs an encoder "
                               "(every position sees the whole text)", task);
        if (c->data.train[0])
            return tfm_err_set(err, "data.train with train.task %s: give the examples as "
                               "data.text (data.train holds token ids)", task);
        if (!c->data.text[0])
            return tfm_err_set(err, "no training data: set data.text (the examples of train.task "
                               "%s)", task);
        if (!c->data.tokenizer[0] && !c->train.init[0])
            return tfm_err_set(err, "train.task %s needs a tokenizer: data.tokenizer, or "
                               "train.init's", task);
    }
    if (!ed && !c->data.train[0] && !c->data.text[0])
        return tfm_err_set(err, "no training data: set data.train (a .npy token file) or "
                                "data.text with data.tokenizer");
    if (c->data.train[0] && c->data.text[0])
        return tfm_err_set(err, "data.train and data.text are exclusive: set one of them");
    if (c->data.text[0] && !c->data.tokenizer[0] && !ft)
        return tfm_err_set(err, "data.text needs data.tokenizer");
    if (c->schedule.decay != TFM_CONFIG_DECAY_INVERSE_SQRT &&
        c->schedule.min_lr > c->optim.lr)
        return tfm_err_set(err, "schedule.min_lr (%g) is above optim.lr (%g)", c->schedule.min_lr,
                           c->optim.lr);
    if (c->schedule.decay == TFM_CONFIG_DECAY_INVERSE_SQRT && c->schedule.warmup == 0)
        return tfm_err_set(err, "schedule.decay inverse_sqrt needs schedule.warmup > 0");
    return 0;
}

