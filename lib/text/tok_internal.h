/* Inside the tokenizer facade: what a tokenizer kind (byte-level BPE, char,
 * WordPiece) plugs into.  Not for programs: they use text/tokenizer.h.
 *
 * The facade (tokenizer.c) owns what every kind shares: the id -> piece
 * table with its piece -> id hash, the added tokens (specials) and the
 * tfm_tok_specials table, splitting added tokens out of the text before the
 * kind sees it, range-checking and special-skipping in decode, and the
 * tokenizer.json envelope.  A kind owns its model data (`impl`) and supplies
 * the hooks in tfm_tok_ops. */
#ifndef TFM_TEXT_TOK_INTERNAL_H
#define TFM_TEXT_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "io/json.h"
#include "text/tokenizer.h"

/* An entry of tokenizer.json's "added_tokens". */
typedef struct tfm_tok_added {
    char *content;  /* owned, NUL-terminated */
    size_t len;
    uint32_t id;
    int special, single_word, lstrip, rstrip, normalized;
} tfm_tok_added;

typedef struct tfm_tok_ops {
    /* Encodes text that holds no added token (the facade has split them out
     * already), appending ids.  `scratch` is what scratch_new returned (may
     * be NULL). */
    void (*encode)(const tfm_tokenizer *tok, void *scratch, const char *text,
                   size_t len, tfm_ids *out);
    /* Optional: encode, also appending each id's byte span [start, end) in
     * text.  NULL: each token's decoded bytes are taken as the next bytes
     * of text (right for byte-level BPE: decode(encode(x)) == x). */
    void (*encode_spans)(const tfm_tokenizer *tok, void *scratch, const char *text,
                         size_t len, tfm_ids *out, tfm_ids *start, tfm_ids *end);
    /* Optional: encode (with spans when start is not NULL) text that
     * follows an added token, not the start of the input (HF's Metaspace
     * prepend_scheme "first" adds no dummy prefix there).  NULL: as
     * encode / encode_spans. */
    void (*encode_after)(const tfm_tokenizer *tok, void *scratch, const char *text,
                         size_t len, tfm_ids *out, tfm_ids *start, tfm_ids *end);
    /* Appends the text of ids[0..n).  Every id is < tfm_tokenizer_vocab_size
     * and has a piece (the facade checked); specials have been dropped if the
     * caller asked.  Added tokens are among the ids: tok_is_added() tells. */
    void (*decode)(const tfm_tokenizer *tok, const uint32_t *ids, size_t n,
                   tfm_buf *out);
    /* Appends the members "normalizer", "pre_tokenizer", "post_processor",
     * "decoder" and "model" of tokenizer.json, each followed by ",\n" except
     * the last (model).  The facade writes the rest. */
    void (*to_json)(const tfm_tokenizer *tok, tfm_buf *out);
    /* Per-thread scratch; both may be NULL. */
    void *(*scratch_new)(const tfm_tokenizer *tok);
    void (*scratch_free)(void *scratch);
    /* Frees impl; may be NULL. */
    void (*free)(void *impl);
} tfm_tok_ops;

struct tfm_tokenizer {
    tfm_tok_kind kind;
    const tfm_tok_ops *ops;
    void *impl; /* the kind's model, owned (ops->free) */

    /* id -> piece (NULL for a hole in the id space); owned. */
    char **pieces;
    uint32_t *piece_lens;
    uint32_t n_pieces;   /* = vocab size (max id + 1) */
    uint32_t cap_pieces;
    /* piece -> id, open addressing over a power-of-two table (UINT32_MAX: empty). */
    uint32_t *hash;
    uint32_t hash_cap;
    uint32_t hash_used;

    tfm_tok_added *added; /* sorted by id */
    size_t n_added;
    uint8_t *added_flag; /* [n_pieces]: 1 added, 2 added and special */
    size_t added_flag_cap;
    size_t max_added_len; /* longest added token */

    tfm_tok_specials specials;
    /* BPE and char: a Lowercase or NFC normalizer runs before the model
     * (the facade applies it; WordPiece normalizes by itself). */
    int lowercase, nfc;
};

struct tfm_tok_scratch {
    const tfm_tokenizer *tok;
    void *impl;
    tfm_buf norm; /* normalized text */
};

/* tokenizer.json's "normalizer" for BPE and char: null, Lowercase or NFC
 * (Qwen2's); sets tok->lowercase or tok->nfc, or fails naming the
 * position. */
int tfm_tok_normalizer_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                                 const tfm_json *root, tfm_err *err);
/* tokenizer.json's "pre_tokenizer", with a Sequence of one element taken
 * as that element (newer HF writers wrap it so); NULL if absent. */
const tfm_json *tfm_tok_pre_tokenizer(const tfm_json *root);
/* Writes the "normalizer" member with its ",\n". */
void tfm_tok_normalizer_to_json(const tfm_tokenizer *tok, tfm_buf *out);
/* Writes a post-processor, TemplateProcessing putting specials.prefix
 * before a text, and returns 1; 0 (nothing written) when there is no
 * prefix. */
int tfm_tok_prefix_to_json(const tfm_tokenizer *tok, tfm_buf *out);
/* Llama 3's and Qwen2's pre_tokenizer, Sequence [Split(their regex,
 * Isolated), ByteLevel(use_regex false)]: 1 and *digits (3 or 1) when pre
 * is one, 0 when pre is not a Sequence of Split and ByteLevel, -1 and an
 * error naming the file and what it holds otherwise (another regex). */
int tfm_bpe_split_pre_tokenizer(const tfm_json_doc *doc, const tfm_json *pre, int *digits,
                                tfm_err *err);

/* A new empty tokenizer of the kind (specials all -1). */
tfm_tokenizer *tfm_tok_new(tfm_tok_kind kind, const tfm_tok_ops *ops);

/* Token ids are below this (16M; the largest real vocabularies have ~260k),
 * so that a hostile file cannot make the id tables huge. */
#define TFM_TOK_MAX_ID ((1u << 24) - 1)
/* Longest token in bytes (piece lengths are stored in 24 bits of the
 * merges' bookkeeping); training never merges past it. */
#define TFM_TOK_MAX_LEN 0xffffffu

/* Sets vocabulary entry id to piece.  Fails (naming `what`, e.g. a file) if
 * the id is taken or the piece is already in the vocabulary with another id. */
int tfm_tok_vocab_set(tfm_tokenizer *tok, uint32_t id, const char *piece,
                      size_t len, const char *what, tfm_err *err);
/* The same, but a piece already in the vocabulary is allowed: lookups then
 * give the later id (as HF does for a vocab.txt listing a piece twice). */
int tfm_tok_vocab_set_dup(tfm_tokenizer *tok, uint32_t id, const char *piece,
                          size_t len, const char *what, tfm_err *err);
/* Appends a piece at the next free id (n_pieces); returns the id. */
uint32_t tfm_tok_vocab_push(tfm_tokenizer *tok, const char *piece, size_t len);

/* Registers an added token.  If content is in the vocabulary, the id must be
 * the same (else an error naming `what`); if not, it becomes a vocabulary
 * entry at `id`.  Call after the model's vocabulary is set. */
int tfm_tok_add_token(tfm_tokenizer *tok, const tfm_tok_added *a,
                      const char *what, tfm_err *err);

/* 1 if id is an added token, 2 if it is also special, else 0. */
static inline int tfm_tok_is_added(const tfm_tokenizer *tok, uint32_t id)
{
    return id < tok->added_flag_cap ? tok->added_flag[id] : 0;
}

/* Fills tok->specials from well-known names of the added/vocabulary tokens
 * ("<|endoftext|>", "[UNK]", "[CLS]", "<unk>", "<pad>", "<s>", "</s>", ...). */
void tfm_tok_guess_specials(tfm_tokenizer *tok);

/* Kinds.  Each fills tok's vocabulary and impl from a tokenizer.json whose
 * "model" member is of its type; the facade handles "added_tokens" after. */
extern const tfm_tok_ops tfm_bpe_ops;
extern const tfm_tok_ops tfm_char_ops;
size_t tfm_char_dropped(const tfm_tokenizer *tok, const char *text, size_t len, size_t *first);

int tfm_bpe_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                      const tfm_json *root, tfm_err *err);
/* GPT-2's files: vocab (token -> id JSON) and merges ("#version" line, then
 * "a b" per line).  Names are for messages. */
int tfm_bpe_from_gpt2_files(tfm_tokenizer *tok, const char *vocab_path,
                            const char *merges_path, tfm_err *err);
/* Builds the BPE model over tok's current vocabulary (all of it is the
 * model's) with merges in rank order (taken over, malloc'd). */
struct tfm_bpe_merge;
void tfm_bpe_attach(tfm_tokenizer *tok, struct tfm_bpe_merge *merges, size_t n);
int64_t tfm_bpe_merge_rank(const tfm_tokenizer *tok, uint32_t id);
int tfm_char_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                       const tfm_json *root, tfm_err *err);
/* WordPiece: an adapter (tok_wordpiece.c) over text/wordpiece.h. */
int tfm_tok_wordpiece_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                                const tfm_json *root, tfm_err *err);
int tfm_tok_wordpiece_from_vocab_txt(tfm_tokenizer *tok, const char *path,
                                     tfm_err *err);

/* Unigram: an adapter (tok_unigram.c) over text/unigram.h. */
int tfm_tok_unigram_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                              const tfm_json *root, tfm_err *err);
/* A sentencepiece .model file. */
int tfm_tok_unigram_from_spm(tfm_tokenizer *tok, const char *path, tfm_err *err);
/* Makes u (taken over, even on failure: freed with tok) tok's model:
 * its pieces, control and unknown pieces as special added tokens, user
 * symbols as added tokens. */
struct tfm_unigram;
int tfm_tok_unigram_adopt(tfm_tokenizer *tok, struct tfm_unigram *u, const char *name,
                          tfm_err *err);

/* Trainers: the facade's tfm_tok_trainer dispatches to the kind's. */
typedef struct tfm_tok_trainer_ops {
    void *(*create)(const tfm_tok_train_opts *opts);
    void (*feed)(void *impl, const char *text, size_t len);
    /* Builds the tokenizer (including its added specials from opts). */
    int (*finish)(void *impl, const tfm_tok_train_opts *opts,
                  tfm_tokenizer **out, tfm_err *err);
    void (*free)(void *impl);
    uint64_t (*skipped)(const void *impl, uint64_t *bytes); /* NULL: none */
} tfm_tok_trainer_ops;

extern const tfm_tok_trainer_ops tfm_bpe_trainer_ops;
extern const tfm_tok_trainer_ops tfm_char_trainer_ops;
extern const tfm_tok_trainer_ops tfm_tok_wordpiece_trainer_ops;
extern const tfm_tok_trainer_ops tfm_unigram_trainer_ops; /* unigram_train.c */

/* Adds each of specials[0..n) as a special added token at the next free id
 * (or its existing id if the piece is already in the vocabulary). */
void tfm_tok_add_specials(tfm_tokenizer *tok, const char **specials, size_t n);


#endif
