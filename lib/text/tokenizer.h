/* The tokenizer every program uses, whatever its kind.
 *
 * A tokenizer comes from a HuggingFace tokenizer.json, from GPT-2's
 * vocab.json + merges.txt (or encoder.json + vocab.bpe) in a directory, from
 * BERT's vocab.txt, or from the JSON text stored in a model file.  Once built
 * it is read-only: encode/decode may be called from several threads at once
 * (per-call scratch lives in a tfm_tok_scratch the caller owns).
 *
 * Ownership: tfm_tokenizer_load/_from_json/training return a tokenizer the
 * caller frees with tfm_tokenizer_free. */
#ifndef TFM_TEXT_TOKENIZER_H
#define TFM_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

typedef enum tfm_tok_kind {
    TFM_TOK_BPE,       /* byte-level BPE, GPT-2 style */
    TFM_TOK_WORDPIECE, /* BERT style */
    TFM_TOK_CHAR,      /* one token per Unicode character */
    TFM_TOK_UNIGRAM,   /* SentencePiece Unigram (T5, ALBERT, XLNet) */
} tfm_tok_kind;

typedef struct tfm_tokenizer tfm_tokenizer;
/* Per-thread encoding scratch (e.g. the BPE word cache) for one tokenizer
 * (passing it with another is a programming error); NULL is allowed and
 * means "no cache" (slower, still correct). */
typedef struct tfm_tok_scratch tfm_tok_scratch;

/* path: tokenizer.json, a directory with tokenizer.json /
 * vocab.json+merges.txt / encoder.json+vocab.bpe / vocab.txt / spiece.model,
 * a vocab.txt, a sentencepiece *.model (Unigram), or a model file
 * (*.safetensors) whose __metadata__ holds "tokenizer". */
int tfm_tokenizer_load(tfm_tokenizer **out, const char *path, tfm_err *err);
/* From tokenizer.json text (name is used in messages). */
int tfm_tokenizer_from_json(tfm_tokenizer **out, const char *json, size_t len,
                            const char *name, tfm_err *err);
void tfm_tokenizer_free(tfm_tokenizer *tok);
/* Serialises as a tokenizer.json that HuggingFace tokenizers loads. */
void tfm_tokenizer_to_json(const tfm_tokenizer *tok, tfm_buf *out);

tfm_tok_kind tfm_tokenizer_kind(const tfm_tokenizer *tok);
uint32_t tfm_tokenizer_vocab_size(const tfm_tokenizer *tok);
/* The token's text as stored in the vocabulary (GPT-2's byte alphabet for
 * byte-level BPE, "##" prefixes for WordPiece); NULL for an unknown id. */
const char *tfm_tokenizer_piece(const tfm_tokenizer *tok, uint32_t id, size_t *len);
/* Id of a vocabulary entry or special token, -1 if absent. */
int64_t tfm_tokenizer_token_id(const tfm_tokenizer *tok, const char *piece, size_t len);

/* Rank of the merge that produced a byte-level BPE token (0 = the first
 * merge); -1 for base bytes, added tokens, other kinds and unknown ids. */
int64_t tfm_tokenizer_merge_rank(const tfm_tokenizer *tok, uint32_t id);

/* Well-known special tokens; -1 when the tokenizer has none.
 * eos: <|endoftext|> for GPT-2, [SEP] for BERT; bos: <|endoftext|> / [CLS]. */
typedef struct tfm_tok_specials {
    int64_t unk, pad, bos, eos, cls, sep, mask;
    /* the token tokenizer.json's post-processor puts before a text
     * (TemplateProcessing's single [SpecialToken, A]: Llama 3's
     * <|begin_of_text|>, Llama 2's <s>), which decoders' prompts and
     * evaluated texts start with; -1: none */
    int64_t prefix;
} tfm_tok_specials;
const tfm_tok_specials *tfm_tokenizer_specials(const tfm_tokenizer *tok);

tfm_tok_scratch *tfm_tok_scratch_new(const tfm_tokenizer *tok);
void tfm_tok_scratch_free(tfm_tok_scratch *s);

/* Appends the ids of text[0..len) to out.  With split_special != 0 the text
 * of an added token ("<|endoftext|>", "[MASK]"; tokenizer.json's
 * added_tokens, longest match first, matched on the raw text) becomes its
 * id and the text between is encoded piece by piece, as HuggingFace does;
 * otherwise it is ordinary text.  An added token with lstrip/rstrip also
 * takes the whitespace on its left/right; one with single_word matches only
 * with no word character (regex \w) right before or after it.  No
 * [CLS]/[SEP] are added
 * here.  Byte-level BPE: decode(encode(x)) == x for any bytes. */
void tfm_tokenizer_encode(const tfm_tokenizer *tok, tfm_tok_scratch *scratch,
                          const char *text, size_t len, int split_special,
                          tfm_ids *out);
/* The same, also appending to start and end each id's byte span [start,
 * end) in text[0..len): the original characters it came from, through
 * every normalization (lowercasing, even where it changes a character's
 * length; NFD and accent stripping; dropped control characters; CJK
 * spacing), as HuggingFace's offsets but in bytes.  An added token spans its
 * text; an [UNK] word its word.  start and end have out's length on entry. */
void tfm_tokenizer_encode_spans(const tfm_tokenizer *tok, tfm_tok_scratch *scratch,
                                const char *text, size_t len, int split_special,
                                tfm_ids *out, tfm_ids *start, tfm_ids *end);
/* The characters of text[0..len) that encoding drops: a char model without
 * an unknown token has no id for a character outside its vocabulary (nor
 * for an invalid UTF-8 byte), and drops it as HuggingFace does; every
 * other model keeps all text (unknown pieces become its unknown token).
 * *first (may be NULL): the byte offset of the first, when there is one. */
size_t tfm_tokenizer_dropped(const tfm_tokenizer *tok, const char *text, size_t len,
                             size_t *first);
/* An error naming the first such character (for text that must reach the
 * model whole: prompts, sources); 0 when encoding keeps all of it. */
int tfm_tokenizer_check_kept(const tfm_tokenizer *tok, const char *text, size_t len,
                             tfm_err *err);
/* "'A' (U+0041)", or "byte 0xFF" for an invalid UTF-8 byte, of the
 * character at text[0..len) (len > 0), into buf[64]. */
const char *tfm_tok_describe_char(const char *text, size_t len, char buf[64]);
/* Appends the text of ids to out; an id outside the vocabulary is an error
 * naming it.  skip_special drops special tokens from the text. */
int tfm_tokenizer_decode(const tfm_tokenizer *tok, const uint32_t *ids, size_t n,
                         int skip_special, tfm_buf *out, tfm_err *err);

/* Subword regularization (Unigram tokenizers only; any other kind is an
 * error saying so).  Added tokens are not split out here.
 * sample: a segmentation drawn with probability proportional to
 * exp(alpha x its log-probability) (Kudo 2018; alpha 0 is uniform over the
 * segmentations, large alpha approaches the best one).
 * nbest: the nbest best segmentations, best first: segmentation k is
 * out[off[k]..off[k+1]) (off receives one more entry than segmentations,
 * the first being out's length on entry); fewer if the text has fewer.
 * A sentencepiece BPE model samples by BPE-dropout (alpha: the probability
 * of skipping each merge, at most 1, else an error) and has no n-best (an
 * error). */
struct tfm_rng;
int tfm_tokenizer_encode_sample(const tfm_tokenizer *tok, const char *text, size_t len,
                                float alpha, struct tfm_rng *rng, tfm_ids *out, tfm_err *err);
int tfm_tokenizer_encode_nbest(const tfm_tokenizer *tok, const char *text, size_t len,
                               size_t nbest, tfm_ids *out, tfm_ids *off, tfm_err *err);

/* Longest-first truncation of a pair of token sequences of na and nb
 * tokens to at most max together, as BERT's truncate_seq_pair and
 * HuggingFace's longest_first do: while the pair is too long, the last
 * token of the longer one goes (of the second when they tie).  Sets *keep_a
 * and *keep_b; returns 1 if anything was cut. */
int tfm_tok_pair_truncate(size_t na, size_t nb, size_t max, size_t *keep_a, size_t *keep_b);

/* Training. */
typedef struct tfm_tok_train_opts {
    tfm_tok_kind kind;
    uint32_t vocab_size;     /* target, specials and base alphabet included */
    uint64_t min_frequency;  /* pairs/words seen fewer times are not merged */
    const char **specials;   /* NULL: the kind's defaults */
    size_t n_specials;
    int lowercase;           /* -1: the kind's default (WordPiece: yes) */
    int threads;
    /* Unigram only (see text/unigram_train.h); zero: the defaults. */
    double character_coverage;  /* 0: 0.9995 */
    int byte_fallback;
    const char **user_symbols;
    size_t n_user_symbols;
    uint32_t extra_ids;         /* T5's <extra_id_N> at the top */
    uint32_t max_sentence_length; /* lines longer (bytes) are skipped; 0: 4192 */
    const char *source;         /* the input's name, for messages (NULL: "the input") */
} tfm_tok_train_opts;

/* Streaming word counter: feed text in any number of pieces (each a complete
 * line or document; never split inside a word), then train.
 *
 * Byte-level BPE: GPT-2's pre-tokenization; ids are the specials (default
 * "<|endoftext|>"), the 256 bytes, then one token per merge; the most
 * frequent pair is merged first, equal counts going to the smaller
 * (left id, right id); merging stops at vocab_size (0: when no pair is seen
 * min_frequency times).  The result depends only on the word counts: the
 * same for any thread count.  Char: the specials (default "<unk>", the unknown
 * token), then the characters seen, most frequent first, ties by code point;
 * vocab_size 0 keeps them all.  lowercase = 1 adds a Lowercase normalizer
 * (BPE, char).  WordPiece: see text/wordpiece.h.  Unigram: see
 * text/unigram_train.h. */
typedef struct tfm_tok_trainer tfm_tok_trainer;
tfm_tok_trainer *tfm_tok_trainer_new(const tfm_tok_train_opts *opts);
void tfm_tok_trainer_feed(tfm_tok_trainer *t, const char *text, size_t len);
int tfm_tok_trainer_finish(tfm_tok_trainer *t, tfm_tokenizer **out, tfm_err *err);
/* Where HuggingFace tokenizers will not give the ids tfm gives with the
 * tokenizer.json tfm_tokenizer_to_json writes (a sentence), or NULL. */
const char *tfm_tokenizer_hf_caveat(const tfm_tokenizer *tok);
/* The lines (and their bytes) fed but not trained on: Unigram's over
 * max_sentence_length; 0 for the other kinds. */
uint64_t tfm_tok_trainer_skipped(const tfm_tok_trainer *t, uint64_t *bytes);
void tfm_tok_trainer_free(tfm_tok_trainer *t);

/* HuggingFace tokenizer_config.json's settings for the tokenizers that have
 * no tokenizer.json (convert/hf_tokenizer.c reads that file): a WordPiece
 * tokenizer's BertNormalizer do_lower_case, strip_accents (-1: null, as
 * lowercase) and tokenize_chinese_chars; -1 for another kind. */
int tfm_tokenizer_set_bert_case(tfm_tokenizer *tok, int lowercase, int strip_accents,
                                int chinese_chars);
/* The tokens a single text is wrapped in (specials cls and sep: embedding
 * and fill-mask put cls first and sep last), as a model's tokenizer
 * post-processor says (RoBERTa's <s> ... </s>: convert/roberta.c); each
 * must be a token id.  tokenizer.json as tfm writes it does not record
 * them. */
int tfm_tokenizer_set_wrap(tfm_tokenizer *tok, int64_t cls, int64_t sep);
/* transformers 5's LlamaTokenizer (a folder's tokenizer_class) keeps only
 * tokenizer.json's vocab and merges and builds its own pipeline around
 * them: no normalizer, Metaspace with prepend_scheme scheme ("first",
 * "always" or "never") and no split.  Makes a sentencepiece-BPE tok (HF's
 * BPE under Metaspace, or under the older Prepend/Replace normalizer) so;
 * -1 for another kind or a normalizer that is more than spaces (a
 * charsmap, NFKC, nmt rules). */
int tfm_tokenizer_set_llama_metaspace(tfm_tokenizer *tok, const char *scheme);
/* T5Tokenizer's extra_ids: <extra_id_0> .. <extra_id_{n-1}> as special
 * added tokens at the next n ids, <extra_id_0> the last (as HF numbers
 * them); one already in the vocabulary must have that id. */
int tfm_tokenizer_add_extra_ids(tfm_tokenizer *tok, uint32_t n, const char *what, tfm_err *err);

#endif
