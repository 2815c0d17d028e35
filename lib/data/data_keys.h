/* The data section's keys: data.* of tfm-config(5), declared once, beside
 * the example readers they configure.
 *
 * tfm_data_keys is the section as the user gives it; tfm-train's schema
 * (train/run_config.h) joins the table at tfm_config's data.  A model file
 * records them with the rest of its run's configuration, and inference
 * reads them back (tfm_data_keys_of_file): [CLS], [SEP] and [MASK] ids, the
 * task prefix, the fine-tuning encodings. */
#ifndef TFM_DATA_DATA_KEYS_H
#define TFM_DATA_DATA_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "io/schema.h"

typedef enum tfm_config_truncate {
    TFM_CONFIG_TRUNCATE_HEAD,
    TFM_CONFIG_TRUNCATE_ERROR,
} tfm_config_truncate;

typedef enum tfm_config_documents {
    TFM_CONFIG_DOCS_BLANK_LINE,
    TFM_CONFIG_DOCS_LINE,
} tfm_config_documents;

typedef struct tfm_data_keys {
    char train[TFM_SCHEMA_STRING_MAX];
    char val[TFM_SCHEMA_STRING_MAX];
    char text[TFM_SCHEMA_STRING_MAX];
    char tokenizer[TFM_SCHEMA_STRING_MAX];
    char source_tokenizer[TFM_SCHEMA_STRING_MAX];
    char source[TFM_SCHEMA_STRING_MAX];
    char target[TFM_SCHEMA_STRING_MAX];
    char val_source[TFM_SCHEMA_STRING_MAX];
    char val_target[TFM_SCHEMA_STRING_MAX];
    double val_fraction;
    int packing;
    int truncate;   /* tfm_config_truncate */
    int64_t cls_id, sep_id, mask_id, n_special; /* mlm; -1: the tokenizer's */
    int documents;  /* tfm_config_documents: mlm's text */
    int symmetric;      /* classify, decoders: pairs in both orders */
    int64_t doc_stride; /* span: tokens between context windows */
    char prefix[TFM_SCHEMA_STRING_MAX]; /* text-to-text: prepended to every source */
} tfm_data_keys;

/* The keys ("data.train", ...), offsets into tfm_data_keys, in the order
 * --dump-config prints them. */
const tfm_schema_key *tfm_data_keys_table(size_t *n);

void tfm_data_keys_defaults(tfm_data_keys *d);

/* The data section recorded in the model file at path (a folder: its
 * model.safetensors), over the defaults; a file that records no
 * configuration (a HuggingFace checkpoint) gives the defaults.  The
 * recorded configuration's other sections are skipped (their owners read
 * them). */
int tfm_data_keys_of_file(const char *path, tfm_data_keys *d, tfm_err *err);

#endif
