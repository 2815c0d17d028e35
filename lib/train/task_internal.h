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

/* The pre-training tasks of encoder-decoders on raw text (span-corruption,
 * denoise; task_text.c).  tfm_task_text_open: data.text's token stream
 * (and data.val's, or data.text's last data.val_fraction), the vocabulary
 * checked, each part at least `window` tokens. */
int tfm_task_text_open(tfm_tokens *train, tfm_tokens *val, tfm_config *cfg,
                       const tfm_tokenizer *tok, size_t window, tfm_err *err);
/* A window of n tokens at a uniform offset of data into out. */
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
 * b) makes from an rng seeded with seed. */
typedef void (*tfm_text_draw)(void *impl, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b);
int tfm_task_text_loss(void *impl, tfm_text_draw draw, const tfm_tokens *val, int64_t n_batches,
                       tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err);

#endif
