/* The model's keys and their checks: see model/config_keys.h. */
#include "model/config_keys.h"

#include "config.h"

#include <string.h>

#define OFF(f) offsetof(tfm_model_keys, f)

/* The schema engine stores an ENUM key as an int, its choice's index: the
 * choices below list each enumeration's names in the order of its values. */
_Static_assert(sizeof(tfm_kind) == sizeof(int) && sizeof(tfm_pos) == sizeof(int) &&
                   sizeof(tfm_ln_place) == sizeof(int) && sizeof(tfm_act) == sizeof(int) &&
                   sizeof(tfm_norm_kind) == sizeof(int) && sizeof(tfm_ffn_kind) == sizeof(int) &&
                   sizeof(tfm_init) == sizeof(int),
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
    {"model.t5_buckets", TFM_SCHEMA_INT, OFF(t5_buckets), "32", 2, 4096, NULL,
     "t5: relative position buckets (half per direction in encoders)"},
    {"model.t5_max_distance", TFM_SCHEMA_INT, OFF(t5_max_distance), "128", 2, 1048576,
     NULL, "t5: distance at which the last (logarithmic) bucket begins"},
    {"model.segments", TFM_SCHEMA_INT, OFF(segments), "0", 0, 1024, NULL,
     "segment (token type) embeddings, e.g. 2 for BERT's sentence A and B; encoders only"},
    {"model.emb_norm", TFM_SCHEMA_BOOL, OFF(emb_norm), "false", 0, 0, NULL,
     "layer norm over the embedding sum, before the first block (BERT)"},
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
static const tfm_schema schema = {keys, NKEYS, sizeof(tfm_model_keys), 0, "model", NULL, 0};

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
    long long hs = k->head_dim ? (long long)k->head_dim : (long long)(k->n_embd / k->n_head);
    int dec = k->kind == TFM_KIND_DECODER;
    if (k->positions == TFM_POS_ROPE && hs % 2)
        return tfm_err_set(err, "model.positions rope needs an even head size, not %lld "
                           "(model.head_dim, or model.n_embd / model.n_head)", hs);
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
