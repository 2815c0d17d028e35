/* The data section's keys: see data/data_keys.h. */
#include "data/data_keys.h"

#include "config.h"

#include "model/file.h"

#define OFF(f) offsetof(tfm_data_keys, f)

static const tfm_schema_key keys[] = {
    {"data.train", TFM_SCHEMA_STRING, OFF(train), "", 0, 0, NULL,
     "training tokens: a .npy file of uint16 or uint32 ids"},
    {"data.val", TFM_SCHEMA_STRING, OFF(val), "", 0, 0, NULL,
     "validation tokens (.npy); encoder-decoders: source<TAB>target lines; mlm with "
     "data.text: text like it; classify, tag, span: examples as data.text; empty: no "
     "validation unless the training data is split "
     "(data.val_fraction)"},
    {"data.text", TFM_SCHEMA_STRING, OFF(text), "", 0, 0, NULL,
     "a text file to encode with data.tokenizer instead of data.train; encoder-decoders: "
     "source<TAB>target lines; classify, tag, span: the training examples (TSV, CoNLL or "
     "JSON Lines)"},
    {"data.tokenizer", TFM_SCHEMA_STRING, OFF(tokenizer), "", 0, 0, NULL,
     "tokenizer (tokenizer.json, ...) stored in the model file; required with data.text "
     "(empty with train.init: the file's; another vocabulary than the file's is an error)"},
    {"data.val_fraction", TFM_SCHEMA_FLOAT, OFF(val_fraction), "0.1", 0, 0.9, NULL,
     "with data.text: the last fraction of the tokens (encoder-decoders: of the pairs; mlm: "
     "of the documents) used for validation when no validation data is named"},
    {"data.source", TFM_SCHEMA_STRING, OFF(source), "", 0, 0, NULL,
     "encoder-decoders: source sentences, one a line, line-aligned with data.target "
     "(instead of data.text's source<TAB>target lines)"},
    {"data.target", TFM_SCHEMA_STRING, OFF(target), "", 0, 0, NULL,
     "encoder-decoders: the target sentences of data.source"},
    {"data.val_source", TFM_SCHEMA_STRING, OFF(val_source), "", 0, 0, NULL,
     "encoder-decoders: validation sources, line-aligned with data.val_target (or data.val: "
     "source<TAB>target lines)"},
    {"data.val_target", TFM_SCHEMA_STRING, OFF(val_target), "", 0, 0, NULL,
     "encoder-decoders: the validation targets"},
    {"data.source_tokenizer", TFM_SCHEMA_STRING, OFF(source_tokenizer), "", 0, 0, NULL,
     "encoder-decoders: a second tokenizer for the source side (stored in the model file; "
     "needs model.tie_source false); empty: data.tokenizer encodes both sides (with "
     "train.init: the file's source tokenizer, when it has one)"},
    {"data.truncate", TFM_SCHEMA_ENUM, OFF(truncate), "head", 0, 0, "head|error",
     "encoder-decoders: a side longer than model.block_size - 1 tokens is cut to its head "
     "(counted and reported) or is an error naming its line; classify, tag, span: likewise "
     "an example longer than model.block_size (span: a context that needs windows)"},
    {"data.packing", TFM_SCHEMA_BOOL, OFF(packing), "false", 0, 0, NULL,
     "decoders: documents (split after each end-of-text token) attend only within "
     "themselves and their positions restart, instead of attending across boundaries"},
    {"data.cls_id", TFM_SCHEMA_INT, OFF(cls_id), "-1", -1, 16777215, NULL,
     "mlm: the id of [CLS]; -1: the tokenizer's"},
    {"data.sep_id", TFM_SCHEMA_INT, OFF(sep_id), "-1", -1, 16777215, NULL,
     "mlm: the id of [SEP]; -1: the tokenizer's"},
    {"data.mask_id", TFM_SCHEMA_INT, OFF(mask_id), "-1", -1, 16777215, NULL,
     "mlm: the id of [MASK]; -1: the tokenizer's"},
    {"data.n_special", TFM_SCHEMA_INT, OFF(n_special), "0", 0, 16777215, NULL,
     "mlm: ids below this are special too and never drawn as random tokens (besides "
     "[CLS], [SEP], [MASK] and the tokenizer's specials)"},
    {"data.documents", TFM_SCHEMA_ENUM, OFF(documents), "blank-line", 0, 0,
     "blank-line|line",
     "mlm with data.text: blank-line (a segment a line, documents separated by blank lines: "
     "BERT's pre-training text) or line (a document a line)"},
    {"data.symmetric", TFM_SCHEMA_BOOL, OFF(symmetric), "false", 0, 0, NULL,
     "classify on a decoder: each pair is also read in the other order (GPT's similarity "
     "tasks): two training rows, and a prediction averages their probabilities"},
    {"data.doc_stride", TFM_SCHEMA_INT, OFF(doc_stride), "128", 1, 1 << 24, NULL,
     "span: a context longer than its window is read in windows starting this many tokens "
     "apart (at most the window's length)"},
    {"data.prefix", TFM_SCHEMA_STRING, OFF(prefix), "", 0, 0, NULL,
     "encoder-decoders and prefix-lm pairs: a task prefix (T5's \"translate English to "
     "German: \") prepended to every source or input, in training and validation; stored "
     "in the model file, so tfm-generate prepends it too"},
};

#define NKEYS (sizeof keys / sizeof keys[0])

const tfm_schema_key *tfm_data_keys_table(size_t *n)
{
    *n = NKEYS;
    return keys;
}

/* A model file's data section: the table with its own given flags. */
typedef struct file_data {
    tfm_data_keys d;
    unsigned char given[NKEYS];
} file_data;

static const tfm_schema file_schema = {keys, NKEYS, sizeof(file_data),
                                       offsetof(file_data, given), "data", NULL, 0, 1};

void tfm_data_keys_defaults(tfm_data_keys *d)
{
    file_data f;
    tfm_schema_defaults(&file_schema, &f);
    *d = f.d;
}

int tfm_data_keys_of_file(const char *path, tfm_data_keys *d, tfm_err *err)
{
    file_data f;
    tfm_schema_defaults(&file_schema, &f);
    if (tfm_model_file_apply_config(path, &file_schema, &f, err) < 0)
        return -1;
    *d = f.d;
    return 0;
}
