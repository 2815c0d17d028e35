/* Checkpoints of a training run, as safetensors files.
 *
 * RUNDIR/model.safetensors  the weights (F32, tfm_model's names) and in
 *                           __metadata__: "format" = "tfm-gpt", "config" = the
 *                           effective YAML configuration, "tokenizer" = the
 *                           tokenizer.json text (when the run had one), "step".
 *                           Self-sufficient for tfm-generate and tfm-eval.
 * RUNDIR/best.safetensors   the same, at the lowest validation loss so far.
 * RUNDIR/state.safetensors  everything needed to resume bit for bit: the
 *                           weights again (so that one file is one consistent
 *                           snapshot: files are renamed one at a time), the Adam
 *                           moments "adam.m.<name>", "adam.v.<name>", and the
 *                           step, RNG states, best loss and the log's open
 *                           interval ("log_interval": sum:n:tokens:seconds,
 *                           absent in older files: an empty one) in
 *                           __metadata__.
 *
 * Every file carries "checksum": a 64-bit hash of the tensors (names, dtypes,
 * shapes, bytes) and the other metadata, so that a flipped byte anywhere is an
 * error on load, not a silently different model.  Files are written to a temporary name and
 * renamed (base/file.h), so a kill at any moment leaves the previous
 * checkpoint intact. */
#ifndef TFM_TRAIN_CHECKPOINT_H
#define TFM_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h"
#include "io/safetensors.h"
#include "train/run_config.h"
#include "model/transformer.h"
#include "text/tokenizer.h"
#include "train/optim.h"

/* The scalars of a run that are not tensors. */
typedef struct tfm_train_state {
    int64_t step;          /* optimizer steps done */
    tfm_rng data_rng;      /* next training batch */
    double best_val;       /* lowest validation loss, or train.best_by's metric
                              negated when higher is better (-BLEU),
                              INFINITY before the first */
    int64_t best_step;
    int64_t evals_since_best;
    double elapsed;        /* seconds of training so far (all sessions) */
    uint64_t seed;
    /* log.tsv's interval not yet logged (a pause or a signal mid-interval):
     * its steps' loss sum, their count, tokens and seconds, so that the
     * resumed run's next line averages the whole interval */
    double log_loss, log_tokens, log_time;
    int64_t log_n;
} tfm_train_state;

int tfm_checkpoint_save_state(const char *path, const tfm_model *m, const tfm_adam *o,
                              const tfm_train_state *s, const char *config_yaml,
                              tfm_err *err);

/* Restores weights, moments, dropout RNG and state into an m and o already
 * built for the same configuration; any missing tensor or other shape is an
 * error naming the file (e.g. a run directory from another model). */
int tfm_checkpoint_load_state(const char *path, tfm_model *m, tfm_adam *o, tfm_train_state *s,
                              tfm_err *err);

#endif
