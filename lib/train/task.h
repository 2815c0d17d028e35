/* What a training run learns from: a task turns the configured data into
 * batches and scores the model on held-out data.  The training loop
 * (train/train.h) knows nothing else about the data.
 *
 *     tfm_task *t;
 *     if (tfm_task_open(&t, &cfg, tok, &err) < 0) ...   // reads the data,
 *                                              // may set cfg.model.vocab_size
 *     tfm_batch b;  size_t n;
 *     tfm_task_next(t, &rng, &b, &n, &err);    // the next training batch
 *     tfm_task_score s;
 *     tfm_task_evaluate(t, &model, seed, &s, &err);
 *     tfm_task_free(t);
 *
 * Tasks, chosen from the configuration:
 *   lm       decoders: random windows of a token stream (train/data.h),
 *            documents packed with data.packing.
 *   seq2seq  encoder-decoders: pairs of sentences (train/parallel.h).
 *   span-corruption  encoder-decoders: T5's noise spans of a token stream
 *            replaced by sentinels (task_spancorrupt.c, train/spancorrupt.h);
 *            train.noise: the T5 study's i.i.d. variants.
 *   denoise  encoder-decoders: BART's text infilling and sentence
 *            permutation of a token stream (task_denoise.c, train/denoise.h).
 *   prefix-lm  decoders: full attention over a prefix, the loss on the rest:
 *            random splits of a token stream, or input<TAB>target pairs
 *            (task_prefixlm.c; the batch's prefix_len).
 *   dpo      decoders: direct preference optimisation on prompt, chosen,
 *            rejected JSON Lines against a frozen reference (task_dpo.c;
 *            tfm_task_step).
 *   reward   decoders: a reward model, the classifier's one output on the
 *            last token, trained on the same pairs (task_reward.c,
 *            data/reward.h; tfm_task_step).
 *   ppo      decoders: PPO against a frozen reward model, answers sampled
 *            by the policy (tfm_task_set_rollout), a value head on it
 *            (task_ppo.c; tfm_task_step).
 *   sft      decoders: instruction tuning on JSON Lines (data/chat.h), the
 *            loss on the completion tokens only; packed with doc_start
 *            (task_sft.c).
 *   mlm      encoders (train.task mlm, mlm+nsp): BERT's masked tokens (and
 *            next-sentence labels) in [CLS] A [SEP] B [SEP]: segments of
 *            text documents (train/data.h tfm_docs) or windows of a token
 *            stream (task_mlm.c); the score's metric is the masked tokens'
 *            accuracy.
 *   classify, tag, span  fine-tuning on labelled examples (data/ftdata.h):
 *            a class or number per text or pair, a tag per word, an
 *            answer's span in a context (task_classify.c, task_tag.c,
 *            task_span.c); the score's metric is data/predict.h's
 *            tfm_ft_metric.  Their label sets go into the model file
 *            (tfm_task_meta).
 *
 * A task is a part of its own (its data, its batches, its validation); a
 * new one adds a file and an entry in task.c, never a branch in the loop.
 *
 * Reproducibility: every batch is drawn from the rng passed in, which is the
 * whole data position (saved in the training state); validation is drawn
 * from the seed passed in, so every evaluation sees the same batches.
 *
 * Ownership: the task owns its data and the arrays tfm_task_next points the
 * batch into (valid until the next call or tfm_task_free). */
#ifndef TFM_TRAIN_TASK_H
#define TFM_TRAIN_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h"
#include "model/decode.h"
#include "train/run_config.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

typedef struct tfm_task tfm_task;

#define TFM_TASK_METRICS_MAX 4

/* A validation result.  metric is the task's own quality score (BLEU for
 * seq2seq when enabled), NAN when it has none; values[] are all the metrics
 * the task reports besides the loss, in tfm_task_metrics' order (values[0]
 * is metric). */
typedef struct tfm_task_score {
    double loss;
    double metric;
    const char *metric_name;  /* "bleu", "masked_accuracy", tfm_ft_metric's, or NULL */
    double values[TFM_TASK_METRICS_MAX];
} tfm_task_score;

/* Reads the data cfg names.  tok: data.tokenizer (NULL when token files are
 * given); src_tok: data.source_tokenizer (encoder-decoders; NULL: tok
 * encodes both sides).  Sets cfg->model.vocab_size (and src_vocab_size)
 * when 0 from the tokenizers or the data; errors name the file (and line). */
int tfm_task_open(tfm_task **out, tfm_config *cfg, const tfm_tokenizer *tok,
                  const tfm_tokenizer *src_tok, tfm_err *err);
void tfm_task_free(tfm_task *t);

/* "lm", "seq2seq". */
const char *tfm_task_name(const tfm_task *t);
/* A sentence for the start report: "4.2M training tokens, 0.5M validation
 * tokens". */
void tfm_task_describe(const tfm_task *t, char *buf, size_t size);
/* What the model file keeps of the task besides the weights: JSON for its
 * "task" metadata (a fine-tuned model's labels), or NULL.  Owned by the
 * task. */
const char *tfm_task_meta(const tfm_task *t);
/* The names of the validation metrics each evaluation reports besides the
 * loss, the first the task's own (tfm_task_score.metric): "bleu" (seq2seq
 * with train.eval_bleu), "masked_accuracy" and "nsp_accuracy" (mlm, mlm+nsp),
 * "accuracy" and "macro_f1" or "pearson" (classify), "entity_f1" and
 * "token_accuracy" (tag), "squad_f1" and "squad_em" (span); static strings.
 * Returns their number (at most TFM_TASK_METRICS_MAX). */
int tfm_task_metrics(const tfm_task *t, const char **names);
/* Whether a larger value of the metric name is better (all but losses). */
int tfm_task_metric_higher_better(const char *name);
/* Greedy translations of src[0..n) into out[0..n) for seq2seq's validation
 * BLEU, as infer/translate.h's tfm_translate_greedy (which has this type).
 * Decoding is infer/'s and train/ does not use infer/: the caller hands it
 * in (tfm_train_opts.translate, tfm_task_set_translate). */
typedef int (*tfm_translate_fn)(const tfm_model_config *cfg, const tfm_weights *w,
                                int64_t start, uint32_t eos, const tfm_ids *src, size_t n,
                                int batch, double max_len_a, int max_len_b, tfm_ids *out,
                                tfm_err *err);
/* The translator of a task that reports BLEU (seq2seq with train.eval_bleu);
 * other tasks ignore it.  Without one, such a task's evaluation is an
 * error. */
void tfm_task_set_translate(tfm_task *t, tfm_translate_fn translate);

/* PPO's answers: sampling is infer/'s, handed in as the translator is
 * (tfm_train_opts.sample; infer/generate.h's tfm_gen_sample_answers has
 * this type).  out[i]: the ids sampled after prompts[i] from the weights
 * w, prompt i from seed + i, at most max_new, ending with eos when the
 * answer stopped there. */
typedef int (*tfm_sample_fn)(const tfm_model_config *cfg, const tfm_weights *w, uint32_t eos,
                             const tfm_ids *prompts, size_t n, int max_new, double temperature,
                             int top_k, uint64_t seed, tfm_ids *out, tfm_err *err);
/* The sampler of a task that samples (ppo), and the file its samples go
 * to (samples.tsv in the run directory; NULL: none); others ignore them.
 * Without a sampler, such a task's step is an error. */
void tfm_task_set_rollout(tfm_task *t, tfm_sample_fn sample, const char *samples_path);

/* Whether the task computes each batch's loss and gradients itself (dpo:
 * a loss that couples rows, on the whole batch in one model, never split
 * among replicas or ranks), and that computation: grads += scale ·
 * d(loss)/d(params) of the batch tfm_task_next gave last, *loss its loss.
 * The loop runs the model's own forward and backward for the others. */
int tfm_task_has_step(const tfm_task *t);
int tfm_task_step(tfm_task *t, tfm_model *m, const tfm_batch *b, float scale, float *loss,
                  tfm_err *err);

/* Whether there is validation data. */
int tfm_task_has_val(const tfm_task *t);

/* The next training batch from rng into *b (arrays owned by the task);
 * *n_tokens = the positions that count in the loss. */
int tfm_task_next(tfm_task *t, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err);

/* Scores m on the validation data (evaluation mode, restored after). */
int tfm_task_evaluate(tfm_task *t, tfm_model *m, uint64_t seed, tfm_task_score *s,
                      tfm_err *err);

#endif
