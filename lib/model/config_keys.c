/* The model's keys and their checks: see model/config_keys.h. */
#include "model/config_keys.h"

#include "config.h"

#include <pthread.h>
#include <string.h>

#define OFF(f) offsetof(tfm_model_keys, f)

/* The schema engine stores an ENUM key as an int, its choice's index: the
 * choices below list each enumeration's names in the order of its values. */
_Static_assert(sizeof(tfm_kind) == sizeof(int) && sizeof(tfm_pos) == sizeof(int) &&
                   sizeof(tfm_ln_place) == sizeof(int) && sizeof(tfm_act) == sizeof(int) &&
                   sizeof(tfm_norm_kind) == sizeof(int) && sizeof(tfm_ffn_kind) == sizeof(int) &&
                   sizeof(tfm_init) == sizeof(int) && sizeof(tfm_rope_scaling) == sizeof(int),
               "enumerations stored as int");

static const tfm_schema_key keys[] = {
    {"model.kind", TFM_SCHEMA_ENUM, OFF(kind), "decoder", 0, 0,
     "decoder|encoder|encoder-decoder",
     "decoder: causal self-attention (GPT); encoder: full self-attention over the "
     "unpadded positions (BERT); encoder-decoder: an encoder over the source, then "
     "decoder blocks with cross-attention to it (the original Transformer)"},
    {"model.positions", TFM_SCHEMA_ENUM, OFF(positions), "learned", 0, 0,
     "learned|sinusoidal|rope|alibi|t5",
     "position scheme: a learned table (up to block_size), the original Transformer's "
     "sinusoids, rotary q/k (rope), linear score biases (alibi), or T5's learned "
     "relative buckets (t5); all but learned extend past block_size at inference"},
    {"model.n_layer", TFM_SCHEMA_INT, OFF(n_layer), "4", 1, 1024, NULL,
     "number of transformer blocks (an encoder-decoder's decoder blocks)"},
    {"model.n_enc_layer", TFM_SCHEMA_INT, OFF(n_enc_layer), "0", 0, 1024, NULL,
     "encoder-decoder: the encoder's blocks; 0 means n_layer"},
    {"model.n_head", TFM_SCHEMA_INT, OFF(n_head), "4", 1, 1024, NULL,
     "attention heads per block (must divide n_embd unless model.head_dim is set)"},
    {"model.n_kv_head", TFM_SCHEMA_INT, OFF(n_kv_head), "0", 0, 1024, NULL,
     "key/value heads of each attention, dividing model.n_head: grouped-query attention, "
     "each group of n_head / n_kv_head query heads sharing one key and value head (1: "
     "multi-query); k and v, and the decoding cache, are n_kv_head x head_dim wide; 0 means "
     "n_head (every query head its own)"},
    {"model.attention_window", TFM_SCHEMA_INT, OFF(window), "0", 0, 1048576, NULL,
     "sliding-window self-attention: a decoder's position sees only the last "
     "attention_window positions, itself included (Mistral's window), an encoder's those "
     "fewer than attention_window away on either side (Longformer's); at most "
     "model.block_size; 0: every position"},
    {"model.n_embd", TFM_SCHEMA_INT, OFF(n_embd), "128", 1, 65536, NULL,
     "model width (embedding size)"},
    {"model.block_size", TFM_SCHEMA_INT, OFF(block_size), "64", 1, 1048576, NULL,
     "context length in tokens"},
    {"model.vocab_size", TFM_SCHEMA_INT, OFF(vocab_size), "0", 0, 16777216, NULL,
     "vocabulary size; 0 takes it from the tokenizer (or the largest id in the data + 1)"},
    {"model.dropout", TFM_SCHEMA_FLOAT, OFF(dropout), "0", 0, 0.99, NULL,
     "dropout probability on embeddings, attention and residual branches"},
    {"model.ffn_dropout", TFM_SCHEMA_FLOAT, OFF(ffn_dropout), "0", 0, 0.99, NULL,
     "dropout probability inside each feed-forward, on its hidden units after the activation "
     "(or the gated product), before the output projection: T5's DenseReluDense dropout "
     "(HF dropout_rate, as model.dropout) and BART's activation_dropout"},
    {"model.final_dropout", TFM_SCHEMA_FLOAT, OFF(final_dropout), "0", 0, 0.99, NULL,
     "dropout probability on each stack's output, after its final norm: the decoder's "
     "before the heads, an encoder's before cross-attention reads it (T5's stacks, at "
     "dropout_rate as model.dropout)"},
    {"model.attn_dropout", TFM_SCHEMA_FLOAT, OFF(attn_dropout), "-1", -1, 0.99, NULL,
     "dropout probability on the attention probabilities (self- and cross-attention); -1: "
     "model.dropout's (HuggingFace's attention_dropout, attention_probs_dropout_prob, "
     "attn_pdrop)"},
    {"model.emb_dropout", TFM_SCHEMA_FLOAT, OFF(emb_dropout), "-1", -1, 0.99, NULL,
     "dropout probability on the embeddings (after the embedding norm, if any); -1: "
     "model.dropout's (GPT-2's embd_pdrop)"},
    {"model.tie_embeddings", TFM_SCHEMA_BOOL, OFF(tie_embeddings), "true", 0, 0, NULL,
     "the LM head shares the token embedding matrix"},
    {"model.tie_source", TFM_SCHEMA_BOOL, OFF(tie_source), "true", 0, 0, NULL,
     "encoder-decoder: the source shares the (target) token embedding, one joint "
     "vocabulary; with tie_embeddings, the original Transformer's three-way tie"},
    {"model.src_vocab_size", TFM_SCHEMA_INT, OFF(src_vocab_size), "0", 0, 16777216,
     NULL, "encoder-decoder with tie_source false: the source vocabulary's size; 0 means "
     "vocab_size"},
    {"model.bias", TFM_SCHEMA_BOOL, OFF(bias), "true", 0, 0, NULL,
     "the linear layers of each block have biases (layer norms always keep theirs, rmsnorm "
     "has none)"},
    {"model.norm", TFM_SCHEMA_ENUM, OFF(norm), "pre", 0, 0, "pre|post",
     "layer norm placement: pre (GPT-2) or post (GPT-1, original Transformer)"},
    {"model.norm_type", TFM_SCHEMA_ENUM, OFF(norm_type), "layernorm", 0, 0,
     "layernorm|rmsnorm",
     "the norms of the blocks, the final and the embedding norm: layernorm (mean and "
     "variance, weight and bias) or rmsnorm (x / sqrt(mean(x^2) + ln_eps) times a weight, no "
     "bias: T5, LLaMA)"},
    {"model.activation", TFM_SCHEMA_ENUM, OFF(activation), "gelu", 0, 0,
     "gelu|gelu_exact|relu", "MLP activation: gelu (tanh approximation), gelu_exact (erf), relu; "
     "a gated model.ffn has its own (and the MLM head keeps this one)"},
    {"model.ffn", TFM_SCHEMA_ENUM, OFF(ffn), "plain", 0, 0, "plain|geglu|swiglu",
     "feed-forward: plain (activation(x W_fc) W_proj) or gated, (act(x W_0) * (x W_1)) W_proj "
     "with act GELU-tanh (geglu: T5 v1.1's gated-gelu) or SiLU (swiglu: LLaMA); d_ff is the "
     "width of W_0 and W_1"},
    {"model.attn_scale", TFM_SCHEMA_BOOL, OFF(attn_scale), "true", 0, 0, NULL,
     "attention scores q.k scaled by 1/sqrt(head size); false: unscaled, as T5 (whose "
     "initialisation absorbs the factor)"},
    {"model.ln_eps", TFM_SCHEMA_FLOAT, OFF(ln_eps), "1e-05", 1e-12, 1, NULL,
     "layer norm epsilon"},
    {"model.d_ff", TFM_SCHEMA_INT, OFF(d_ff), "0", 0, 1048576, NULL,
     "inner width of the MLP; 0 means 4 x n_embd"},
    {"model.head_dim", TFM_SCHEMA_INT, OFF(head_dim), "0", 0, 65536, NULL,
     "width of each attention head; 0 means n_embd / n_head.  The projections q, k, v "
     "are n_head x head_dim wide, which may differ from n_embd (T5 v1.1 small, "
     "flan-t5-small: 6 heads of 64 over d_model 512)"},
    {"model.rope_base", TFM_SCHEMA_FLOAT, OFF(rope_base), "10000", 2, 1e9, NULL,
     "rope: the base of the rotation frequencies"},
    {"model.rope_scaling", TFM_SCHEMA_ENUM, OFF(rope_scaling), "default", 0, 0,
     "default|linear|llama3",
     "rope: frequencies rescaled for a context longer than the one trained on, as "
     "transformers' rope types: linear divides every frequency by model.rope_factor; llama3 "
     "divides those of wavelengths above model.rope_original_context / "
     "model.rope_low_freq_factor, keeps those below model.rope_original_context / "
     "model.rope_high_freq_factor and blends between"},
    {"model.rope_factor", TFM_SCHEMA_FLOAT, OFF(rope_factor), "1", 1e-3, 1e6, NULL,
     "rope_scaling linear, llama3: the factor the frequencies are divided by"},
    {"model.rope_low_freq_factor", TFM_SCHEMA_FLOAT, OFF(rope_low_freq_factor), "1", 1e-6,
     1e6, NULL, "rope_scaling llama3: the low-frequency bound's divisor"},
    {"model.rope_high_freq_factor", TFM_SCHEMA_FLOAT, OFF(rope_high_freq_factor), "4", 1e-6,
     1e6, NULL, "rope_scaling llama3: the high-frequency bound's divisor (above "
     "model.rope_low_freq_factor)"},
    {"model.rope_original_context", TFM_SCHEMA_INT, OFF(rope_original_context), "8192", 1,
     1 << 30, NULL, "rope_scaling llama3: the context the frequencies were trained for"},
    {"model.t5_buckets", TFM_SCHEMA_INT, OFF(t5_buckets), "32", 2, 4096, NULL,
     "t5: relative position buckets (half per direction in encoders)"},
    {"model.t5_max_distance", TFM_SCHEMA_INT, OFF(t5_max_distance), "128", 2, 1048576,
     NULL, "t5: distance at which the last (logarithmic) bucket begins"},
    {"model.segments", TFM_SCHEMA_INT, OFF(segments), "0", 0, 1024, NULL,
     "segment (token type) embeddings, e.g. 2 for BERT's sentence A and B; encoders only"},
    {"model.emb_norm", TFM_SCHEMA_BOOL, OFF(emb_norm), "false", 0, 0, NULL,
     "layer norm over the embedding sum, before the first block (BERT)"},
    {"model.embedding_size", TFM_SCHEMA_INT, OFF(embedding_size), "0", 0, 65536, NULL,
     "encoders: the width of the token, position and segment embeddings and their norm, "
     "projected to n_embd after the embedding dropout (emb_proj: ALBERT's and ELECTRA's "
     "factorised embedding, at n_embd's width too; the MLM head maps back to it); 0: none, "
     "the tables n_embd wide"},
    {"model.emb_scale", TFM_SCHEMA_BOOL, OFF(emb_scale), "false", 0, 0, NULL,
     "token embeddings times sqrt(n_embd) before the positions are added (the original "
     "Transformer)"},
    {"model.head_scale", TFM_SCHEMA_BOOL, OFF(head_scale), "false", 0, 0, NULL,
     "the final hidden states times n_embd^-0.5 before the LM head (T5 with tied "
     "embeddings)"},
    {"model.head_bias", TFM_SCHEMA_BOOL, OFF(head_bias), "false", 0, 0, NULL,
     "the LM head adds a bias of its own to the logits, final_logits_bias [vocab_size] "
     "(HuggingFace BART's)"},
    {"model.decoder_start", TFM_SCHEMA_INT, OFF(decoder_start), "-1", -1, 16777215,
     NULL, "encoder-decoder: the token a translation starts from (T5: 0, its padding); -1: "
     "the tokenizer's beginning-of-text, else end-of-text"},
    {"model.forced_bos", TFM_SCHEMA_INT, OFF(forced_bos), "-1", -1, 16777215, NULL,
     "encoder-decoder: the token every translation begins with, forced right after "
     "model.decoder_start (HuggingFace's forced_bos_token_id: BART's 0, <s>), and the first "
     "token of every training target; -1: none"},
    {"model.forced_eos", TFM_SCHEMA_INT, OFF(forced_eos), "-1", -1, 16777215, NULL,
     "the token a generation that reaches its length limit ends with: the last new token "
     "allowed is forced to be it (HuggingFace's forced_eos_token_id: BART's 2, </s>); -1: "
     "none"},
    {"model.source_bos", TFM_SCHEMA_BOOL, OFF(source_bos), "false", 0, 0, NULL,
     "encoder-decoder: every source given as text begins with the source tokenizer's "
     "beginning-of-text token (BART's <s>, as its tokenizer adds), in training and "
     "translation"},
    {"model.init", TFM_SCHEMA_ENUM, OFF(init), "gpt2", 0, 0, "gpt2|xavier",
     "initialisation: gpt2 (matrices and embeddings N(0, 0.02), residual projections "
     "scaled down) or xavier (Xavier-uniform matrices, embeddings N(0, n_embd^-0.5))"},
    {"model.mlm_head", TFM_SCHEMA_BOOL, OFF(mlm_head), "false", 0, 0, NULL,
     "BERT's masked-LM head: dense, activation and layer norm before the (tied) LM decoder "
     "with a bias of its own; logits only at the masked positions"},
    {"model.pooler", TFM_SCHEMA_BOOL, OFF(pooler), "false", 0, 0, NULL,
     "BERT's pooler: dense + tanh on the pooled position before the classifier"},
    {"model.pooler_activation", TFM_SCHEMA_ENUM, OFF(pooler_act), "tanh", 0, 0,
     "tanh|relu|gelu_exact",
     "the pooler's activation: tanh (BERT), relu (DistilBERT's pre_classifier), gelu_exact "
     "(ELECTRA's classification head)"},
    {"model.pooling", TFM_SCHEMA_ENUM, OFF(pooling), "token", 0, 0, "token|mean",
     "what the classifier (and model.pooler) reads: token, the pooled position (an "
     "encoder's first token, [CLS]; a decoder's last); mean, the mean of the hidden states "
     "up to it (an encoder's every unpadded position, as sentence-transformers pools)"},
    {"model.classes", TFM_SCHEMA_INT, OFF(classes), "0", 0, 65536, NULL,
     "classifier on the pooled position ([CLS], a decoder's last token): 0 none, 1 "
     "regression (mean squared error), 2 or more classes"},
    {"model.nsp", TFM_SCHEMA_BOOL, OFF(nsp), "false", 0, 0, NULL,
     "the classifier is BERT's next-sentence head (2 classes, cls.seq_relationship)"},
    {"model.tags", TFM_SCHEMA_INT, OFF(tags), "0", 0, 65536, NULL,
     "token tagger: tags per position (0: none)"},
    {"model.span", TFM_SCHEMA_BOOL, OFF(span), "false", 0, 0, NULL,
     "span head: start and end classifiers over the positions (question answering)"},
};

#define NKEYS (sizeof keys / sizeof keys[0])

/* The table on its own, for the choices' names in messages. */
static const tfm_schema schema = {keys, NKEYS, sizeof(tfm_model_keys), 0, "model", NULL, 0,
                                   0};

const tfm_schema_key *tfm_model_keys_table(size_t *n)
{
    *n = NKEYS;
    return keys;
}

int tfm_model_keys_check(const tfm_model_keys *k, tfm_err *err)
{
    /* -1 stands for model.dropout's rate; other negatives mean nothing */
    if (k->attn_dropout < 0 && k->attn_dropout != -1)
        return tfm_err_set(err, "model.attn_dropout %g: -1 (model.dropout's) or a probability "
                           "in [0, 0.99]", k->attn_dropout);
    if (k->emb_dropout < 0 && k->emb_dropout != -1)
        return tfm_err_set(err, "model.emb_dropout %g: -1 (model.dropout's) or a probability "
                           "in [0, 0.99]", k->emb_dropout);
    if (!k->head_dim && k->n_embd % k->n_head)
        return tfm_err_set(err, "model.n_embd (%lld) must be divisible by model.n_head (%lld), "
                           "or model.head_dim set", (long long)k->n_embd, (long long)k->n_head);
    if (k->n_kv_head > k->n_head || (k->n_kv_head && k->n_head % k->n_kv_head))
        return tfm_err_set(err, "model.n_kv_head (%lld) must divide model.n_head (%lld)",
                           (long long)k->n_kv_head, (long long)k->n_head);
    if (k->window > k->block_size)
        return tfm_err_set(err, "model.attention_window (%lld) is larger than the context, "
                           "model.block_size (%lld)", (long long)k->window,
                           (long long)k->block_size);
    long long hs = k->head_dim ? (long long)k->head_dim : (long long)(k->n_embd / k->n_head);
    int dec = k->kind == TFM_KIND_DECODER;
    if (k->positions == TFM_POS_ROPE && hs % 2)
        return tfm_err_set(err, "model.positions rope needs an even head size, not %lld "
                           "(model.head_dim, or model.n_embd / model.n_head)", hs);
    if (k->rope_scaling == TFM_ROPE_LLAMA3 &&
        !(k->rope_high_freq_factor > k->rope_low_freq_factor))
        return tfm_err_set(err, "model.rope_high_freq_factor (%g) must be above "
                           "model.rope_low_freq_factor (%g)", k->rope_high_freq_factor,
                           k->rope_low_freq_factor);
    if (k->positions == TFM_POS_SINUSOIDAL && k->n_embd % 2)
        return tfm_err_set(err, "model.positions sinusoidal needs an even model.n_embd (%lld)",
                           (long long)k->n_embd);
    /* (the default, gelu, stands in every stored configuration: not an error) */
    if (k->ffn != TFM_FFN_PLAIN && k->activation != TFM_ACT_GELU_TANH && !k->mlm_head) {
        char act[32], ffn[32];
        tfm_schema_choice_name(&schema, "model.activation", k->activation, act, sizeof act);
        tfm_schema_choice_name(&schema, "model.ffn", k->ffn, ffn, sizeof ffn);
        return tfm_err_set(err, "model.activation %s with model.ffn %s: a gated feed-forward "
                           "has its own activation (geglu: GELU-tanh, swiglu: SiLU); leave "
                           "model.activation out, or use model.ffn plain", act, ffn);
    }
    int ed = k->kind == TFM_KIND_ENCODER_DECODER;
    const char *kind = dec ? "decoder" : ed ? "encoder-decoder" : "encoder";
    if (!ed && (k->n_enc_layer || !k->tie_source || k->src_vocab_size ||
                k->forced_bos >= 0 || k->source_bos)) {
        char list[128] = "";
        if (k->n_enc_layer)
            strcat(list, ", model.n_enc_layer");
        if (!k->tie_source)
            strcat(list, ", model.tie_source");
        if (k->src_vocab_size)
            strcat(list, ", model.src_vocab_size");
        if (k->forced_bos >= 0)
            strcat(list, ", model.forced_bos");
        if (k->source_bos)
            strcat(list, ", model.source_bos");
        return tfm_err_set(err, "%s with model.kind %s: these keys are for an "
                           "encoder-decoder", list + 2, kind);
    }
    if (ed && k->tie_source && k->src_vocab_size && k->vocab_size &&
        k->src_vocab_size != k->vocab_size)
        return tfm_err_set(err, "model.src_vocab_size (%lld) with model.tie_source true: a "
                           "shared embedding has one vocabulary (set model.tie_source false)",
                           (long long)k->src_vocab_size);
    if (k->kind != TFM_KIND_ENCODER && k->segments)
        return tfm_err_set(err, "model.segments (%lld) with model.kind %s: segment "
                           "embeddings are for encoders", (long long)k->segments, kind);
    return 0;
}

/* ---- the run keys opening a model file needs ------------------------ */

#define OFF_LORA(f) offsetof(tfm_lora_keys, f)

static const tfm_schema_key lora_keys[] = {
    {"train.lora.r", TFM_SCHEMA_INT, OFF_LORA(r), "0", 0, 65536, NULL,
     "LoRA rank: with r > 0 the base weights are frozen and each targeted projection gains "
     "an adapter (alpha/r)·B·A, saved in PEFT's layout; 0: train every weight"},
    {"train.lora.alpha", TFM_SCHEMA_FLOAT, OFF_LORA(alpha), "8", 1e-6, 1e6, NULL,
     "LoRA's alpha: the adapters' output is scaled by alpha/r"},
    {"train.lora.dropout", TFM_SCHEMA_FLOAT, OFF_LORA(dropout), "0", 0, 0.999, NULL,
     "dropout on each adapter's input"},
    {"train.lora.targets", TFM_SCHEMA_STRING, OFF_LORA(targets), "q, v", 0, 0, NULL,
     "the projections LoRA adapts, a list of q, k, v, o (attention output), fc (the "
     "feed-forward's input; gated: both), proj (its output); HF names are accepted: "
     "q_proj/query, k_proj/key, v_proj/value, o_proj/out_proj/dense, c_attn (q, k, v), "
     "c_fc/fc1/wi/wi_0/wi_1/intermediate, c_proj, fc2/wo/output"},
};

static const tfm_schema_key task_key[] = {
    {"train.task", TFM_SCHEMA_ENUM, 0, "lm", 0, 0,
     "lm|mlm|mlm+nsp|classify|tag|span|span-corruption|denoise|prefix-lm|sft|dpo|reward|ppo",
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
     "after, the loss on the rest only; train.prefix_from), sft (instruction tuning on "
     "data.text's JSON Lines, TRL's prompt/completion or messages, the loss on the "
     "completion's tokens only; the ChatML template), dpo (direct preference optimisation "
     "on data.text's {prompt, chosen, rejected} JSON Lines against a frozen reference, "
     "train.beta, train.reference), reward (a reward model: the classifier's one output "
     "on the last token, trained on the same pairs with -log sigmoid(r_chosen - "
     "r_rejected)), ppo (InstructGPT's PPO: answers sampled for data.text's {prompt} "
     "JSON Lines, scored by train.reward_model, a KL penalty to train.reference, a "
     "value head, model.tags 1, on the policy; train.kl_coef and the other PPO keys))"},
};

static const tfm_schema_key prefix_from_key[] = {
    {"train.prefix_from", TFM_SCHEMA_ENUM, 0, "random", 0, 0,
     "random|pairs",
     "prefix-lm: random (each window of block_size + 1 tokens of the text or token stream "
     "is split after a prefix of P tokens, P uniform in [1, block_size]) or pairs (data.text "
     "and data.val are input<TAB>target lines: the input and end-of-text are the prefix, the "
     "target and end-of-text the rest)"},
};

#define NLORA (sizeof lora_keys / sizeof lora_keys[0])

const tfm_schema_key *tfm_lora_keys_table(size_t *n)
{
    *n = NLORA;
    return lora_keys;
}

const tfm_schema_key *tfm_task_key(void)
{
    return task_key;
}

const tfm_schema_key *tfm_prefix_from_key(void)
{
    return prefix_from_key;
}

/* The model file's view: these keys and the model's, other keys skipped. */
static tfm_schema_key file_keys[TFM_MODEL_FILE_MAX_KEYS];
static tfm_schema file_schema;
static pthread_once_t file_once = PTHREAD_ONCE_INIT;

static void file_schema_init(void)
{
    const tfm_schema_part parts[] = {
        {keys, NKEYS, offsetof(tfm_model_file_keys, model)},
        {lora_keys, NLORA, offsetof(tfm_model_file_keys, lora)},
        {task_key, 1, offsetof(tfm_model_file_keys, task)},
        {prefix_from_key, 1, offsetof(tfm_model_file_keys, prefix_from)},
    };
    size_t n = tfm_schema_join(file_keys, TFM_MODEL_FILE_MAX_KEYS, parts, 4);
    file_schema = (tfm_schema){file_keys, n, sizeof(tfm_model_file_keys),
                               offsetof(tfm_model_file_keys, given), "model or train", NULL, 0,
                               1};
}

const tfm_schema *tfm_model_file_keys_schema(void)
{
    pthread_once(&file_once, file_schema_init);
    return &file_schema;
}

void tfm_model_file_keys_defaults(tfm_model_file_keys *k)
{
    tfm_schema_defaults(tfm_model_file_keys_schema(), k);
}
