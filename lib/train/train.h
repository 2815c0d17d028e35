/* The training loop: config in, run directory out.
 *
 *     tfm_train_opts o = {.rundir = "run"};
 *     tfm_train_result r;
 *     if (tfm_train_run(&cfg, &o, &r, &err) < 0) ... err.msg ...
 *
 * A run directory that already holds state.safetensors is resumed: weights,
 * Adam moments, step, schedule position, data and dropout RNGs continue
 * exactly where the last checkpoint left them (same thread count → same bits).
 * Each step draws train.grad_accum micro-batches of batch_size × block_size
 * tokens, clips the gradient norm, and steps Adam(W) at the scheduled
 * learning rate.  log.tsv gets a line every log_interval steps and at each
 * evaluation.  The loop checks *stop between steps (a signal handler sets it)
 * and then saves and returns normally (before the first step there is
 * nothing to save: a start stopped or failed before its first checkpoint
 * removes what it created).  The run directory and its parents are created;
 * it is locked (flock) for the whole call, so a second writer is refused.  A NaN or infinite loss or gradient
 * stops the run without saving: the previous checkpoint stays the last one.
 *
 * The library prints nothing itself except the progress bar (stderr, TTY
 * only); messages worth showing go to opts->message. */
#ifndef TFM_TRAIN_TRAIN_H
#define TFM_TRAIN_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "train/run_config.h"
#include "train/task.h"

/* How the threads share a step (tfm-train --data-parallel). */
typedef enum tfm_data_parallel {
    TFM_DP_AUTO,  /* replicas while one more gradient array per thread costs
                     at most 64 MiB, else split products */
    TFM_DP_YES,   /* one replica a thread, each a share of the batch */
    TFM_DP_NO,    /* one model, each matrix product split across the threads */
} tfm_data_parallel;

typedef struct tfm_train_opts {
    const char *rundir;
    int quiet;                     /* no progress bar */
    int64_t run_steps;             /* > 0: at most this many steps in this call */
    int fresh_optimizer;           /* resume from model.safetensors' weights and
                                      step with a new optimizer state (when
                                      state.safetensors is damaged) */
    volatile sig_atomic_t *stop;   /* may be NULL */
    void (*message)(void *ctx, const char *msg); /* may be NULL */
    void *ctx;
    tfm_data_parallel data_parallel;
    tfm_translate_fn translate;    /* seq2seq's validation BLEU decodes with it
                                      (train/task.h; tfm-train passes
                                      infer/translate.h's tfm_translate_greedy) */
    tfm_sample_fn sample;          /* ppo's answers (train/task.h; tfm-train
                                      passes infer/generate.h's
                                      tfm_gen_sample_answers) */
} tfm_train_opts;

typedef enum tfm_train_end {
    TFM_TRAIN_DONE,      /* reached train.max_steps */
    TFM_TRAIN_STOPPED,   /* *stop was set */
    TFM_TRAIN_PAUSED,    /* run_steps reached */
    TFM_TRAIN_PATIENCE,  /* early stopping */
} tfm_train_end;

typedef struct tfm_train_result {
    tfm_train_end end;
    int64_t step;          /* steps done in total */
    int64_t steps_run;     /* in this call */
    double train_loss;     /* of the last step */
    double val_loss;       /* of the last evaluation (NAN if none) */
    double best_val;       /* the best value of train.best_by's metric, negated
                              when higher is better (lowest loss, or -BLEU) */
    int best_by;           /* train.best_by (tfm_config_best) */
    int best_higher;       /* whether best_val is a negated metric */
    double val_metric;     /* the task's metric at the last evaluation
                              (tfm_task_score; NAN if none) */
    const char *val_metric_name;
    double ms_per_step;    /* median over this call's steps */
    uint64_t seed;
} tfm_train_result;

/* The configuration a run directory holds (its state file, or with fresh
 * its model file), applied over *c: resuming without -c.  A damaged state
 * file's message says so and, with the model file there, offers
 * --fresh-optimizer. */
int tfm_train_run_config(const char *rundir, int fresh, tfm_config *c, tfm_err *err);

int tfm_train_run(const tfm_config *c, const tfm_train_opts *o, tfm_train_result *r,
                  tfm_err *err);

/* tfm-train --dump-batches: the first n training sequences of the task c
 * configures, as a new run with c's train.seed would draw them, appended to
 * out as JSON lines: {"input_ids": [...], "input": text, "target_ids":
 * [...], "target": text} (and "prefix_len": N for a prefix LM: input_ids
 * below N see each other).  input_ids are what the encoder reads (an
 * encoder-decoder's source), else the decoder's inputs; target_ids the
 * targets, -1 where a position is not scored, trailing ones left out; the
 * texts decode the ids that are not -1 with data.tokenizer (specials
 * kept), null without one.  Writes nothing else. */
int tfm_train_dump_batches(const tfm_config *c, int64_t n, tfm_buf *out, tfm_err *err);

#endif
