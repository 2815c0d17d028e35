/* SentencePiece's Unigram model (Kudo 2018): the pieces with their
 * log-probabilities, the normalizer that runs before them, and the
 * segmentations of a text: the best (Viterbi), the n best, and a sample
 * (subword regularization).
 *
 * Encoding follows sentencepiece (spm_encode) exactly:
 *   1. normalize: user-defined symbols pass unchanged; otherwise the
 *      longest rule of the precompiled charsmap (e.g. nmt_nfkc) applies;
 *      an invalid UTF-8 byte becomes U+FFFD.  Leading, trailing and
 *      repeated spaces go (remove_extra_whitespaces), "▁" (U+2581) is
 *      prepended (add_dummy_prefix) and every space becomes "▁"
 *      (escape_whitespaces);
 *   2. Viterbi over the lattice of pieces (normal and user-defined; unused
 *      ones never match) with the pieces' scores; a user-defined symbol
 *      scores length x max_score - 0.1 so that it always wins; a character
 *      no piece starts with becomes the unknown piece with score
 *      min_score - 10;
 *   3. unknown characters: each run becomes one unknown id, or, with
 *      byte_fallback, the <0xXX> pieces of its UTF-8 bytes.
 * Control symbols (<s>, </s>) and byte pieces never match text.
 *
 * Decoding is spm_decode's: it concatenates the pieces, byte pieces as their
 * bytes (an invalid UTF-8 sequence as U+FFFD), "▁" as a space, control
 * symbols as nothing and the unknown piece as unk_surface (" ⁇ " unless the
 * model says otherwise); with add_dummy_prefix or remove_extra_whitespaces
 * the first piece's leading "▁" is dropped (the dummy prefix), and with
 * remove_extra_whitespaces every "▁" before the first character: the exact
 * inverse of encoding on normalized text that holds no unknown character.
 * A model's denormalizer (its rules) then applies to the decoded text.
 *
 * A tfm_unigram is read-only once built: several threads may encode with
 * it at once.  Ownership: tfm_unigram_new/_from_spm return a model freed
 * with tfm_unigram_free. */
#ifndef TFM_TEXT_UNIGRAM_H
#define TFM_TEXT_UNIGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/rng.h"

/* sentencepiece's ModelProto.SentencePiece.Type values. */
typedef enum tfm_uni_type {
    TFM_UNI_NORMAL = 1,
    TFM_UNI_UNKNOWN = 2,
    TFM_UNI_CONTROL = 3,
    TFM_UNI_USER = 4, /* user-defined: matched before normalization */
    TFM_UNI_UNUSED = 5,
    TFM_UNI_BYTE = 6, /* <0xXX>, for byte fallback */
} tfm_uni_type;

/* The normalizer spec.  charsmap: sentencepiece's precompiled_charsmap
 * blob (uint32 LE trie size, a Darts double-array of that many bytes,
 * then the NUL-separated replacement strings); may be empty.
 * Without a charsmap, the same normalization computed instead of looked up
 * (what tfm's Unigram trainer writes, as tokenizer.json's Replace + NFKC):
 * nmt: sentencepiece's nmt rules on the input's code points: TAB, LF, FF,
 * CR, U+1680, U+200B, U+200C, U+200E, U+200F, U+2028, U+2029, U+2581,
 * U+FEFF and U+FFFD become a space; U+0001-0008, 000B, 000E-001F, 007F,
 * 008F, 009F are dropped; nfkc: then NFKC (utf8proc), one grapheme cluster
 * at a time.  (sentencepiece's nmt_nfkc charsmap also keeps U+FF5E; this
 * maps it to "~", as HF's NFKC does.) */
typedef struct tfm_uni_norm_spec {
    const unsigned char *charsmap;
    size_t charsmap_len;
    int add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
    int nmt, nfkc;
    /* HF's Metaspace prepend_scheme "always" (read from a tokenizer.json):
     * the dummy prefix only when the normalized text does not already start
     * with "\xe2\x96\x81"; sentencepiece's add_dummy_prefix adds it anyway */
    int prefix_unless_space;
    /* HF's Metaspace split: each "\xe2\x96\x81" starts a pre-token that is
     * segmented on its own (encoding only; sampling and n-best see the
     * whole text) */
    int split_spaces;
    /* HF's prepend_scheme "first": no dummy prefix on text that follows an
     * added token (tfm_unigram_encode_after) */
    int prefix_first;
    /* AlbertTokenizer's normalizers before the charsmap, in this order:
     * quotes: "``" and "''" become '"'; nfkd: NFKD; strip_accents: then
     * nonspacing marks (Mn) dropped; lowercase: HF's Lowercase */
    int quotes, nfkd, strip_accents, lowercase;
} tfm_uni_norm_spec;

typedef struct tfm_unigram tfm_unigram;

/* An empty model with the normalizer spec (the charsmap is copied and
 * checked: a trie that points outside itself or at no string fails, with
 * `what`, e.g. the file name, in the message). */
int tfm_unigram_new(tfm_unigram **out, const tfm_uni_norm_spec *spec, const char *what,
                    tfm_err *err);
/* Appends piece id n (ids are given in order from 0).  Fails on an empty
 * or duplicate piece, a non-finite score, a second unknown piece, or a byte
 * piece that is not <0x00>..<0xFF>. */
int tfm_unigram_add(tfm_unigram *u, const char *piece, size_t len, float score,
                    tfm_uni_type type, const char *what, tfm_err *err);
/* After the last add: builds the lookup tries.  byte_fallback needs all
 * 256 byte pieces; a model needs an unknown piece. */
int tfm_unigram_finish(tfm_unigram *u, int byte_fallback, const char *what, tfm_err *err);
void tfm_unigram_free(tfm_unigram *u);

/* A sentencepiece .model file's bytes (a ModelProto; untrusted: every
 * varint, length and the charsmap's trie are checked).  name: for
 * messages.  model_type UNIGRAM and BPE are accepted. */
int tfm_unigram_from_spm(tfm_unigram **out, const unsigned char *data, size_t len,
                         const char *name, tfm_err *err);

/* sentencepiece's BPE model type (spm_train --model_type=bpe): the same
 * pieces, normalizer, unknown and byte pieces, and decoding, but encoding
 * merges adjacent symbols by the merged piece's score (see unigram.c);
 * sampling is BPE-dropout (alpha: the probability of skipping a merge);
 * n-best is not defined.  Set before encoding. */
void tfm_unigram_set_bpe(tfm_unigram *u, int bpe);
int tfm_unigram_is_bpe(const tfm_unigram *u);

uint32_t tfm_unigram_size(const tfm_unigram *u);
const char *tfm_unigram_piece(const tfm_unigram *u, uint32_t id, size_t *len);
float tfm_unigram_score(const tfm_unigram *u, uint32_t id);
tfm_uni_type tfm_unigram_type(const tfm_unigram *u, uint32_t id);
int64_t tfm_unigram_unk_id(const tfm_unigram *u);
int tfm_unigram_byte_fallback(const tfm_unigram *u);
const tfm_uni_norm_spec *tfm_unigram_norm_spec(const tfm_unigram *u);

/* Appends the normalized text of s[0..n) (step 1 above) to out; with src,
 * also for each byte appended the offset in s of the input it came from. */
void tfm_unigram_normalize(const tfm_unigram *u, const char *s, size_t n, tfm_buf *out,
                           tfm_ids *src);

/* Appends the ids of s[0..n) (steps 1-3).  With start/end (both or
 * neither), also each id's byte span in s. */
void tfm_unigram_encode(const tfm_unigram *u, const char *s, size_t n, tfm_ids *out,
                        tfm_ids *start, tfm_ids *end);
/* The same with buffers kept from call to call (one per thread): no
 * allocation per line once they have grown. */
typedef struct tfm_uni_work tfm_uni_work;
tfm_uni_work *tfm_uni_work_new(void);
void tfm_uni_work_free(tfm_uni_work *w);
void tfm_unigram_encode_with(const tfm_unigram *u, tfm_uni_work *w, const char *s, size_t n,
                             tfm_ids *out, tfm_ids *start, tfm_ids *end);
/* As tfm_unigram_encode_with (w may be NULL) for text that follows an
 * added token: without the dummy prefix when the spec's prefix_first says
 * so. */
void tfm_unigram_encode_after(const tfm_unigram *u, tfm_uni_work *w, const char *s, size_t n,
                              tfm_ids *out, tfm_ids *start, tfm_ids *end);
/* A segmentation drawn from the lattice with probability proportional to
 * exp(alpha x its score) (forward-filtering backward-sampling, as
 * sentencepiece's SampleEncode with nbest_size -1). */
void tfm_unigram_sample(const tfm_unigram *u, const char *s, size_t n, float alpha,
                        tfm_rng *rng, tfm_ids *out);
/* The nbest best segmentations, best first: segmentation k is
 * out[off[k]..off[k+1]) (off gets k+1 entries, starting with out's length);
 * fewer when the lattice has fewer paths.  Returns how many. */
size_t tfm_unigram_nbest(const tfm_unigram *u, const char *s, size_t n, size_t nbest,
                         tfm_ids *out, tfm_ids *off);

/* Appends the text of ids[0..n) (all < tfm_unigram_size). */
void tfm_unigram_decode(const tfm_unigram *u, const uint32_t *ids, size_t n, tfm_buf *out);
/* The same for a part of a sequence: at_start says no text precedes it
 * (the dummy prefix is only dropped there). */
void tfm_unigram_decode_part(const tfm_unigram *u, const uint32_t *ids, size_t n, int at_start,
                             tfm_buf *out);
/* What the unknown piece decodes to (sentencepiece's trainer_spec
 * unk_surface; default " \xe2\x81\x87 "). */
void tfm_unigram_set_unk_surface(tfm_unigram *u, const char *s, size_t n);
/* A normalizer that decoding applies to its text (sentencepiece's
 * denormalizer_spec, spm_train --denormalization_rule_tsv). */
int tfm_unigram_set_denormalizer(tfm_unigram *u, const tfm_uni_norm_spec *spec, const char *what,
                                 tfm_err *err);

#endif
