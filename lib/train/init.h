/* Starting a run from another model's file (train.init): fine-tuning a
 * pre-trained encoder with new heads, or continuing a model with another
 * task; and the check that a resumed run is still the same model.
 *
 * The file fixes the architecture: tfm_train_init_config takes each shape
 * key the configuration did not give from the file's configuration and
 * refuses one it gave otherwise; model.forced_eos, and a HuggingFace
 * file's dropout rates (config.json's), are the file's unless the
 * configuration gives them; then tfm_train_init_from copies the weights.  Heads are the task's: new ones start from their
 * initialisation. */
#ifndef TFM_TRAIN_INIT_H
#define TFM_TRAIN_INIT_H

#include <stddef.h>

#include "base/err.h"
#include "train/run_config.h"
#include "model/transformer.h"

/* Resolves c's model section against file (the configuration of the model
 * file at path, as tfm_model_load returns it): shape keys not given in c
 * (tfm_config_given) are taken from file; a given one that differs is an
 * error naming the keys.  model.forced_eos and (when path is a HuggingFace
 * checkpoint, without a tfm configuration) the model.*dropout keys not
 * given are taken from file too; given, they win.  When c's train.task differs from the file's, the
 * heads the new task does not use are dropped (model.nsp also takes its
 * model.classes 2 along, so that a classifier is sized from the data).
 * note receives a line saying what was dropped ("" when nothing was). */
int tfm_train_init_config(tfm_config *c, const tfm_config *file, const char *path, char *note,
                          size_t size, tfm_err *err);

/* Lists in keys ("model.norm post (the run's: pre), ...") the keys that
 * decide the model's tensors and computation (with heads != 0 the heads'
 * too) and whose values differ between c and run; returns their number.
 * A 0 in c's model.vocab_size, model.classes or model.tags (still to be
 * read from the data) differs from nothing. */
int tfm_train_shape_diff(const tfm_config *c, const tfm_config *run, int heads, char *keys,
                         size_t size);

/* Copies into m every tensor of src (the model file at path, loaded) that
 * has the same name and shape in m's table (classifier.*, HF's name of both
 * the sequence classifier and the tagger, only between the same head); the
 * others keep their initialisation.  report receives one line naming the counts, m's tensors
 * not loaded ("new: classifier.weight, ...") and src's tensors not used. */
int tfm_train_init_from(tfm_model *m, const tfm_model *src, const char *path, char *report,
                        size_t size, tfm_err *err);

#endif
