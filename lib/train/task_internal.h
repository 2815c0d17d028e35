/* How a task plugs in (train/task.h): an ops table and its state.  Each
 * task's open function fills both; task.c picks one from the config. */
#ifndef TFM_TRAIN_TASK_INTERNAL_H
#define TFM_TRAIN_TASK_INTERNAL_H

#include "train/task.h"

typedef struct tfm_task_ops {
    const char *name;
    void (*describe)(void *impl, char *buf, size_t size);
    int (*has_val)(void *impl);
    int (*next)(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err);
    int (*evaluate)(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err);
    void (*free)(void *impl);
    /* optional: the names of the metrics evaluate reports (task.h
     * tfm_task_metrics); none without it */
    int (*metrics)(void *impl, const char **names);
    /* optional: the model file's "task" metadata (JSON), or NULL */
    const char *(*meta)(void *impl);
    /* optional: takes the translator (task.h tfm_task_set_translate) */
    void (*set_translate)(void *impl, tfm_translate_fn translate);
    /* optional: takes the sampler (task.h tfm_task_set_rollout) */
    void (*set_rollout)(void *impl, tfm_sample_fn sample, const char *samples_path);
    /* optional: the batch's loss and gradients computed by the task (task.h
     * tfm_task_step) */
    int (*step)(void *impl, tfm_model *m, const tfm_batch *b, float scale, float *loss,
                tfm_err *err);
} tfm_task_ops;

struct tfm_task {
    const tfm_task_ops *ops;
    void *impl;
};

#include "train/data.h"

/* The decoder's first token of an encoder-decoder: the model's
 * decoder_start when it names one (T5: pad, 0), else the tokenizer's bos,
 * else its eos; tfm-generate starts from the same token. */
static inline int64_t tfm_task_decoder_start(const tfm_config *cfg, const tfm_tok_specials *sp)
{
    return cfg->model.decoder_start >= 0 ? cfg->model.decoder_start
                                         : sp->bos >= 0 ? sp->bos : sp->eos;
}

int tfm_task_lm_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
int tfm_task_seq2seq_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok,
                          const tfm_tokenizer *src_tok, tfm_err *err);
int tfm_task_spancorrupt_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok,
                              tfm_err *err);
int tfm_task_denoise_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
int tfm_task_prefixlm_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok,
                           tfm_err *err);
int tfm_task_reward_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok,
                         tfm_err *err);
int tfm_task_ppo_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
/* The model keys a reference (path, named by key) must share with the
 * policy p; else an error naming the key (task_dpo.c; ppo's too). */
int tfm_task_same_architecture(const tfm_model_config *p, const tfm_model_config *r,
                               const char *key, const char *path, tfm_err *err);
int tfm_task_dpo_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
int tfm_task_sft_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
int tfm_task_mlm_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
int tfm_task_classify_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
int tfm_task_tag_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);
int tfm_task_span_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);

/* The fine-tuning tasks' shared part (task_finetune.c): reads the examples,
 * builds the label set, calls prepare to check the model and size its head
 * from the labels (setting cfg->model's head keys), encodes the rows. */
#include "data/ftdata.h"
typedef int (*tfm_ft_prepare)(tfm_config *cfg, const tfm_ft_labels *labels, tfm_err *err);
int tfm_task_ft_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_ft_task kind,
                     tfm_ft_prepare prepare, tfm_err *err);

/* A token stream's training and validation parts from data.text (with tok)
 * or data.train/data.val; sets cfg->model.vocab_size when 0 and checks the
 * ids against it (task_lm.c). */
int tfm_task_load_stream(tfm_tokens *train, tfm_tokens *val, tfm_config *cfg,
                         const tfm_tokenizer *tok, tfm_err *err);
/* Its second half: sets cfg->model.vocab_size when 0 (from tok, else the
 * largest id) and checks the ids of both against it. */
int tfm_task_check_vocab(const tfm_tokens *train, const tfm_tokens *val, tfm_config *cfg,
                         const tfm_tokenizer *tok, tfm_err *err);
/* Its tokenizer rule, which every task with a tokenizer follows:
 * cfg->model.vocab_size from tok when 0, an error when it is set smaller
 * than tok's vocabulary. */
int tfm_task_vocab_from_tokenizer(tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err);

#include "base/buf.h"

/* Pairs of text (task_seq2seq.c): seq2seq's, and prefix-lm's with
 * train.prefix_from pairs. */
typedef struct tfm_pair {
    size_t src, tgt;        /* offsets into ids */
    uint32_t src_len;       /* with EOS */
    uint32_t tgt_len;       /* without BOS/EOS */
    uint32_t line;          /* 1-based, for messages */
    size_t ref, ref_len;    /* the target's text in pairs.text (BLEU) */
} tfm_pair;
typedef struct tfm_pairs {
    tfm_ids ids;
    tfm_buf text;           /* target texts, kept when keep_text */
    tfm_pair *p;
    size_t n, cap;
    size_t *order;          /* by length (seq2seq's max_tokens batching), or NULL */
    char name[TFM_CONFIG_PATH_MAX + 32];
} tfm_pairs;
void tfm_pairs_free(tfm_pairs *P);
/* Reads cfg's training pairs (data.text's source<TAB>target lines, or
 * data.source and data.target) and validation pairs (data.val, or
 * data.val_source and data.val_target, else data.val_fraction of the
 * training pairs): a source as data/source.h's tfm_translate_source
 * encodes it with src_tok (else tok), ending with its EOS; a target with
 * tok, without EOS; each side cut to max_len tokens (besides the source's
 * EOS) or an error naming the line, as data.truncate says, *truncated
 * counting the cuts; keep_text keeps the targets' text.  Errors name the
 * file and line. */
int tfm_task_pairs_read(tfm_pairs *train, tfm_pairs *val, const tfm_config *cfg,
                        const tfm_tokenizer *tok, const tfm_tokenizer *src_tok, int max_len,
                        int keep_text, size_t *truncated, tfm_err *err);

/* The pre-training tasks of encoder-decoders on raw text (span-corruption,
 * denoise; task_text.c).  tfm_task_text_open: data.text's token stream
 * (and data.val's, or data.text's last data.val_fraction), the vocabulary
 * checked, each part at least `window` tokens. */
int tfm_task_text_open(tfm_tokens *train, tfm_tokens *val, tfm_config *cfg,
                       const tfm_tokenizer *tok, size_t window, tfm_err *err);
/* A window of n tokens at a uniform offset of data into out (prefix-lm's
 * windows too). */
void tfm_task_text_window(const tfm_tokens *data, size_t n, tfm_rng *rng, int32_t *out);
/* A batch of B rows, each a source and labels (EOS included) of at most S
 * and T ids, padded to the longest of the batch: the source with pad,
 * the decoder input (BOS + labels) with pad, the labels with -1. */
typedef struct tfm_text_batch {
    int B, S, T;
    int32_t bos, pad;
    int32_t *rows_s, *rows_y;  /* [B, S], [B, T]: the rows, filled by the task */
    int *src_len, *tgt_len;    /* [B]: their lengths, filled by the task */
    int32_t *src, *x, *y;      /* the padded batch */
} tfm_text_batch;
void tfm_text_batch_init(tfm_text_batch *tb, int B, int S, int T, int32_t bos, int32_t pad);
void tfm_text_batch_free(tfm_text_batch *tb);
/* Pads the rows into *b; returns the number of labels. */
size_t tfm_text_batch_finish(tfm_text_batch *tb, tfm_batch *b);
/* The mean loss per label over n_batches batches that draw(impl, val, rng,
 * b) makes from an rng seeded with seed (prefix-lm's too). */
typedef void (*tfm_text_draw)(void *impl, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b);
int tfm_task_text_loss(void *impl, tfm_text_draw draw, const tfm_tokens *val, int64_t n_batches,
                       tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err);

/* prefix-lm (task_prefixlm.c), exposed for the tests.  The length of the
 * prefix of a window of T + 1 tokens: uniform in [1, T]. */
int tfm_prefixlm_draw(tfm_rng *rng, int T);
/* The row of window w[0..T] with a prefix of P tokens: x = w[0..T), y =
 * w[1..T] but y[t] = -1 for t < P - 1 (positions that would predict a
 * prefix token): T + 1 - P targets scored. */
void tfm_prefixlm_row(const int32_t *w, int T, int P, int32_t *x, int32_t *y);
/* The row of a pair in T positions: r = s[0..ns) (the input, ending with
 * EOS: the prefix) ++ tg[0..nt) ++ eos; x = r[0..L-1), y = r[1..L) but -1
 * for t < ns - 1, both padded (pad, -1) to T ≥ ns + nt.  Returns the
 * targets scored, nt + 1. */
int tfm_prefixlm_pair_row(const uint32_t *s, int ns, const uint32_t *tg, int nt, int32_t eos,
                          int32_t pad, int T, int32_t *x, int32_t *y);

#endif
