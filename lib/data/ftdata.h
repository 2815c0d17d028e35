/* lib/data, the layer: examples that training (train/) and evaluation
 * (infer/, tfm-eval) both read, so that neither reaches into the other.
 * Layers, each using only those before it:
 *     base  io  text  tensor  nn  model  metrics  data  train  infer
 * data/ sits above model/ and metrics/ for one file: predict.h runs a
 * fine-tuned model over encoded examples and scores its predictions, the
 * same code for training's validation and tfm-eval classify|tag|span.  The
 * readers themselves (taskdata.h: label, tag and answer files, the one
 * CoNLL reader; ftdata.h; spans.h; source.h) use only base/, io/ and
 * text/.  Decoding (greedy translation for validation BLEU) stays in
 * infer/: train/ receives it as a function (train/task.h tfm_translate_fn).
 *
 * Fine-tuning data: the examples of the classify, tag and span tasks read
 * from their files, and encoded as the model reads them.  Training
 * (train/task_classify.c, task_tag.c, task_span.c) and prediction
 * (data/predict.h, tfm-eval classify|tag|span) share this one encoding.
 *
 *     tfm_ft_data d;
 *     tfm_ft_read(&d, TFM_FT_CLASSIFY, text, len, "train.tsv", &ro, &err);
 *     tfm_ft_labels l;   tfm_ft_labels_from_data(&l, &d, 0, d.n);
 *     tfm_ft_set s;
 *     tfm_ft_encode(&s, &d, 0, d.n, tok, &l, &eo, &err);   // rows of ids
 *     ...  tfm_ft_set_free(&s); tfm_ft_labels_free(&l); tfm_ft_data_free(&d);
 *
 * Files (a file is JSON Lines when its first non-blank byte is '{'; blank
 * lines are skipped; every error names file:line):
 *   classify  TSV: label<TAB>text or label<TAB>text_a<TAB>text_b; JSONL:
 *             {"label": L, "text": T} or {"label": L, "text_a": A,
 *             "text_b": B}, L a string or a number.  Without gold labels
 *             (prediction) the same without the label.
 *   tag       CoNLL: word<TAB>tag lines (whitespace-separated columns, the
 *             word first, the tag last), a blank line between sentences;
 *             JSONL: {"tokens": [...], "tags": [...]}.  Without gold: words
 *             alone (one column; no "tags").
 *   span      JSONL (SQuAD's fields): {"context": C, "question": Q,
 *             "answers": {"text": [...], "answer_start": [...]}} or
 *             "answers": [{"text": ..., "answer_start": ...}, ...]; an
 *             optional "id" is kept.  answer_start counts characters
 *             (Unicode code points) as SQuAD's Python does, and the context
 *             must hold the answer's text there.  Without gold: no
 *             "answers".
 * Within a file every example has gold or none does (a mix is an error).
 *
 * Encoding (one example gives one row, or more):
 *   encoder classify  [CLS] a [SEP] (b [SEP]), segments 0 then 1; the
 *                     pooled position 0.
 *   decoder classify  a [E] (b [E]) with [E] the end-of-text token, as GPT's
 *                     delimiter and extract tokens; the classifier reads the
 *                     last position.  With both_orders a pair gives a second
 *                     row, b [E] a [E] (GPT's similarity tasks).
 *   tag               [CLS] w1 w2 ... [SEP], each word encoded alone (byte-
 *                     level BPE: with its leading space after the first);
 *                     a word's first sub-token carries its tag, the others
 *                     and the specials -1.
 *   span              [CLS] q [SEP] c [SEP] with c a window of the context's
 *                     tokens: windows start doc_stride tokens apart until
 *                     one reaches the context's end; the question keeps at
 *                     most max_len / 2 tokens.  Gold start and end are the
 *                     first answer's first and last tokens, or 0 and 0 ([CLS])
 *                     in a window that does not hold it whole.
 * A row longer than max_len is cut (data.truncate head: the classify text's
 * tail, a pair longest-first by text/tokenizer.h's tfm_tok_pair_truncate,
 * or the last words, keeping the final special token; counted in
 * truncated) or is an error naming its line (truncate_error).
 *
 * Ownership: each struct owns its arrays; the _free functions release them.
 * A set borrows nothing from its data once encoded. */
#ifndef TFM_DATA_FTDATA_H
#define TFM_DATA_FTDATA_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "text/tokenizer.h"

typedef enum tfm_ft_task {
    TFM_FT_CLASSIFY,
    TFM_FT_TAG,
    TFM_FT_SPAN,
} tfm_ft_task;

typedef struct tfm_ft_answer {
    const char *text;
    size_t len;
    size_t start;          /* byte offset in the context */
} tfm_ft_answer;

typedef struct tfm_ft_example {
    long line;             /* 1-based line of the file (CoNLL: the first word's) */
    const char *label;     /* classify: the gold label, NULL without */
    const char *a, *b;     /* classify: the text (text_a) and text_b (NULL for
                              one text); span: the context and the question */
    size_t na, nb;
    size_t word0, n_words; /* tag: words [word0, word0 + n_words) of the data */
    size_t ans0, n_ans;    /* span: gold answers [ans0, ans0 + n_ans) */
    const char *id;        /* span: the JSON "id", or NULL */
} tfm_ft_example;

typedef struct tfm_ft_data {
    tfm_ft_task task;
    char name[1100];       /* the file, for messages */
    size_t n;
    tfm_ft_example *ex;
    int gold;              /* the examples have labels, tags or answers */
    int pairs;             /* classify: the examples have two texts */
    int jsonl;
    const char **word, **tag; /* tag: every word and its gold tag (NULL without) */
    long *word_line;
    size_t n_word;
    tfm_ft_answer *ans;
    size_t n_ans;
    void *arena;           /* private: the strings */
} tfm_ft_data;

typedef struct tfm_ft_read_opts {
    int need_gold;         /* training: an example without gold is an error */
    int pairs;             /* classify TSV without need_gold: -1 unknown, else
                              whether the model reads pairs (so that the
                              column count tells whether a label is there) */
} tfm_ft_read_opts;

int tfm_ft_read(tfm_ft_data *d, tfm_ft_task task, const char *text, size_t len,
                const char *name, const tfm_ft_read_opts *o, tfm_err *err);
/* The file at path ("-": stdin). */
int tfm_ft_read_file(tfm_ft_data *d, tfm_ft_task task, const char *path,
                     const tfm_ft_read_opts *o, tfm_err *err);
void tfm_ft_data_free(tfm_ft_data *d);

/* ---- label sets --------------------------------------------------------- */

/* Class labels or tags, sorted bytewise (ids are indices), or regression. */
typedef struct tfm_ft_labels {
    size_t n;
    char **name;
    int regression;        /* classify: one number per example */
    int pairs;             /* classify: the model reads two texts */
} tfm_ft_labels;

/* The distinct gold labels (classify) or tags (tag) of every example of
 * the data d[0..nd) (training and validation), sorted.  Classify labels make a
 * regression when `regression` is 1, or when it is -1 (auto) and every
 * label is a number and one of them is written with a '.' or an exponent
 * ("3.8", "1e-2"): then every label must be a number (an error names the
 * line).  Tag sets are never regression. */
int tfm_ft_labels_from_data(tfm_ft_labels *l, const tfm_ft_data *const *d, size_t nd,
                            int regression, tfm_err *err);
/* Index of name, or -1. */
long tfm_ft_label_id(const tfm_ft_labels *l, const char *name);
/* As JSON for the model file's "task" metadata: {"labels": [...], "pairs":
 * bool} (classify), {"regression": true, "pairs": bool}, {"tags": [...]},
 * {} (span). */
void tfm_ft_labels_json(const tfm_ft_labels *l, tfm_ft_task task, tfm_buf *out);
/* From that JSON (name: where it came from, for messages). */
int tfm_ft_labels_parse(tfm_ft_labels *l, tfm_ft_task task, const char *json, size_t len,
                        const char *name, tfm_err *err);
void tfm_ft_labels_free(tfm_ft_labels *l);

/* ---- encoding ----------------------------------------------------------- */

typedef struct tfm_ft_enc_opts {
    int decoder;           /* the model is a decoder (GPT) */
    int max_len;           /* positions of a row (model.block_size) */
    int segments;          /* the model has segment embeddings */
    int truncate_error;    /* a row longer than max_len is an error */
    int64_t cls, sep;      /* encoders: [CLS] and [SEP] */
    int64_t eos;           /* decoders: the delimiter and extract token */
    int both_orders;       /* decoder pairs: also b [E] a [E] */
    int doc_stride;        /* span: tokens between window starts */
} tfm_ft_enc_opts;

typedef struct tfm_ft_row {
    size_t off;            /* first position in the set's arrays */
    int len;
    int cls_pos;           /* classify: the pooled position */
    int32_t label;         /* classify: gold class id; -1 none */
    float value;           /* regression: gold value */
    int32_t start, end;    /* span: gold positions (0, 0: not in this window);
                              -1 without gold */
    int ctx_pos;           /* span: row position of the first context token */
    int ctx_len;           /* span: context tokens in the row */
    size_t ctx_tok;        /* span: that token's index in the example's context */
    size_t ex;             /* the example (index into the data) */
} tfm_ft_row;

typedef struct tfm_ft_set {
    tfm_ft_task task;
    int decoder, has_gold, has_seg;
    size_t n_rows, n_ex;
    tfm_ft_row *row;
    size_t ex0;            /* the data's first example encoded */
    size_t *ex_row;        /* [n_ex + 1]: example e's rows [ex_row[e], ex_row[e+1]) */
    tfm_ids ids;           /* every row's tokens, one after another */
    uint8_t *seg;          /* segment ids at the same places (has_seg) */
    int32_t *tag;          /* tag: gold tag id at each position, -1 elsewhere */
    long *word_pos;        /* tag: per word of the encoded examples (in
                              order), its first sub-token's position in its
                              row, -1 when cut off or empty */
    size_t *ex_word;       /* tag: [n_ex + 1] example e's words in word_pos */
    long *tok_start, *tok_end; /* span: byte span in the context of every
                                  context token of every example */
    size_t *ex_tok;        /* span: [n_ex + 1] example e's tokens in tok_* */
    char *context;         /* span: a copy of every example's context, one
                              after another, which a predicted span is
                              widened to whole words in (predict.h) */
    size_t *ex_context;    /* span: [n_ex + 1] example e's context is
                              context[ex_context[e] .. ex_context[e + 1]) */
    size_t truncated;      /* examples cut to max_len */
    size_t rows_cap, seg_cap, tag_cap, word_cap, tok_cap, context_cap;
} tfm_ft_set;

/* Encodes examples [first, first + count) of d with tok.  labels (not NULL
 * when d has gold) maps gold labels and tags to ids: a label or tag not in
 * it is an error naming its line.  Errors also: a row that cannot hold its
 * content (a span question leaving no room for the context), a row over
 * max_len with truncate_error. */
int tfm_ft_encode(tfm_ft_set *s, const tfm_ft_data *d, size_t first, size_t count,
                  const tfm_tokenizer *tok, const tfm_ft_labels *labels,
                  const tfm_ft_enc_opts *o, tfm_err *err);
void tfm_ft_set_free(tfm_ft_set *s);

/* Byte spans [start[i], end[i]) of tokens ids[0..n) of text[0..len)
 * (encoded without specials), every token given one: those data/spans.h's
 * tfm_token_spans finds, and for the others (unknown tokens, text that
 * normalisation changed) the text between their found neighbours, without
 * its surrounding whitespace. */
void tfm_ft_token_offsets(const tfm_tokenizer *tok, const char *text, size_t len,
                          const uint32_t *ids, size_t n, long *start, long *end);

#endif
