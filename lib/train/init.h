/* Starting a run from another model's weights (train.init): fine-tuning a
 * pre-trained encoder with new heads, or continuing from a checkpoint of
 * another shape. */
#ifndef TFM_TRAIN_INIT_H
#define TFM_TRAIN_INIT_H

#include <stddef.h>

#include "base/err.h"
#include "model/transformer.h"

/* Copies into m every tensor of the model file (or HuggingFace BERT
 * checkpoint) at path that has the same name and shape in m's table; the
 * others keep their initialisation.  report receives one line naming the
 * counts, m's tensors not loaded ("new: classifier.weight, ..."; a tensor of
 * another shape counts as new) and the file's tensors not used. */
int tfm_train_init_from(tfm_model *m, const char *path, char *report, size_t size,
                        tfm_err *err);

#endif
