/* sentencepiece's .model file: a protobuf ModelProto, read by hand.
 *
 * Only what encoding needs is read; every other field is skipped by its
 * wire type.  The file is untrusted: a varint longer than 10 bytes, a length
 * past the end of its message, an unknown wire type, a piece that is not
 * valid (empty, twice, a non-finite score) fail with the file's name and
 * the byte offset.
 *
 *   ModelProto:     1 pieces (repeated), 2 trainer_spec, 3 normalizer_spec,
 *                   5 denormalizer_spec (a NormalizerSpec)
 *   SentencePiece:  1 piece, 2 score (float), 3 type (default NORMAL)
 *   TrainerSpec:    3 model_type (1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR),
 *                   24 treat_whitespace_as_suffix, 35 byte_fallback,
 *                   44 unk_surface
 *   NormalizerSpec: 2 precompiled_charsmap, 3 add_dummy_prefix,
 *                   4 remove_extra_whitespaces, 5 escape_whitespaces
 *                   (all three default true) */
#include "config.h"

#include <math.h>
#include <string.h>

#include "text/unigram.h"

typedef struct pb {
    const unsigned char *base, *p, *end;
    const char *name;
} pb;

typedef struct pb_field {
    uint32_t num;
    int wt;
    uint64_t v;                /* varint, fixed32, fixed64 */
    const unsigned char *data; /* length-delimited */
    size_t len;
} pb_field;

static int pb_fail(const pb *b, const char *what, tfm_err *err)
{
    return tfm_err_set(err, "%s: not a valid sentencepiece model: %s at byte %zu", b->name,
                       what, (size_t)(b->p - b->base));
}

static int pb_varint(pb *b, uint64_t *v, tfm_err *err)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (b->p >= b->end)
            return pb_fail(b, "truncated varint", err);
        unsigned char c = *b->p++;
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return pb_fail(b, "varint longer than 10 bytes", err);
}

/* The next field, or 1 at the end of the message. */
static int pb_next(pb *b, pb_field *f, tfm_err *err)
{
    if (b->p >= b->end)
        return 1;
    uint64_t key = 0;
    if (pb_varint(b, &key, err))
        return -1;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    if (key >> 3 == 0 || key >> 32)
        return pb_fail(b, "bad field number", err);
    switch (f->wt) {
    case 0:
        return pb_varint(b, &f->v, err);
    case 1:
    case 5: {
        size_t k = f->wt == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < k)
            return pb_fail(b, "truncated fixed-size field", err);
        f->v = 0;
        for (size_t i = 0; i < k; i++)
            f->v |= (uint64_t)b->p[i] << (8 * i);
        b->p += k;
        return 0;
    }
    case 2: {
        uint64_t n = 0;
        if (pb_varint(b, &n, err))
            return -1;
        if (n > (uint64_t)(b->end - b->p))
            return pb_fail(b, "length past the end", err);
        f->data = b->p;
        f->len = (size_t)n;
        b->p += n;
        return 0;
    }
    default:
        return pb_fail(b, "unsupported wire type", err);
    }
}

static pb pb_sub(const pb *b, const pb_field *f)
{
    return (pb){b->base, f->data, f->data + f->len, b->name};
}

static int want(const pb *b, const pb_field *f, int wt, const char *what, tfm_err *err)
{
    if (f->wt == wt)
        return 0;
    char m[96];
    snprintf(m, sizeof m, "%s has the wrong wire type", what);
    return pb_fail(b, m, err);
}

typedef struct spm_info {
    int model_type, byte_fallback, ws_suffix;
    tfm_uni_norm_spec norm, denorm;
    int have_norm;
    const unsigned char *unk_surface; /* NULL: the default */
    size_t unk_surface_len;
} spm_info;

static int read_trainer(pb b, spm_info *in, tfm_err *err)
{
    pb_field f = {0}; /* GCC 14 cannot see that pb_next fills it */
    int rc;
    while ((rc = pb_next(&b, &f, err)) == 0) {
        if (f.num == 44) {
            if (want(&b, &f, 2, "unk_surface", err))
                return -1;
            in->unk_surface = f.data;
            in->unk_surface_len = f.len;
        } else if (f.num == 3 || f.num == 24 || f.num == 35) {
            if (want(&b, &f, 0, "a trainer_spec field", err))
                return -1;
            if (f.num == 3)
                in->model_type = (int)f.v;
            else if (f.num == 24)
                in->ws_suffix = f.v != 0;
            else
                in->byte_fallback = f.v != 0;
        }
    }
    return rc < 0 ? -1 : 0;
}

static int read_spec(pb b, tfm_uni_norm_spec *n, tfm_err *err)
{
    pb_field f = {0}; /* GCC 14 cannot see that pb_next fills it */
    int rc;
    while ((rc = pb_next(&b, &f, err)) == 0) {
        if (f.num == 2) {
            if (want(&b, &f, 2, "precompiled_charsmap", err))
                return -1;
            n->charsmap = f.data;
            n->charsmap_len = f.len;
        } else if (f.num >= 3 && f.num <= 5) {
            if (want(&b, &f, 0, "a normalizer_spec flag", err))
                return -1;
            int v = f.v != 0;
            if (f.num == 3)
                n->add_dummy_prefix = v;
            else if (f.num == 4)
                n->remove_extra_whitespaces = v;
            else
                n->escape_whitespaces = v;
        }
    }
    return rc < 0 ? -1 : 0;
}

static int read_normalizer(pb b, spm_info *in, tfm_err *err)
{
    in->have_norm = 1;
    return read_spec(b, &in->norm, err);
}

static int read_piece(pb b, tfm_unigram *u, tfm_err *err)
{
    pb_field f = {0}; /* GCC 14 cannot see that pb_next fills it */
    int rc;
    const unsigned char *piece = NULL;
    size_t len = 0;
    float score = 0;
    int type = TFM_UNI_NORMAL;
    while ((rc = pb_next(&b, &f, err)) == 0) {
        if (f.num == 1) {
            if (want(&b, &f, 2, "a piece", err))
                return -1;
            piece = f.data;
            len = f.len;
        } else if (f.num == 2) {
            if (want(&b, &f, 5, "a score", err))
                return -1;
            uint32_t w = (uint32_t)f.v;
            memcpy(&score, &w, sizeof score);
        } else if (f.num == 3) {
            if (want(&b, &f, 0, "a piece type", err))
                return -1;
            type = f.v >= TFM_UNI_NORMAL && f.v <= TFM_UNI_BYTE ? (int)f.v : 0;
        }
    }
    if (rc < 0)
        return -1;
    if (!type)
        return pb_fail(&b, "unknown piece type", err);
    return tfm_unigram_add(u, (const char *)piece, len, score, (tfm_uni_type)type, b.name, err);
}

int tfm_unigram_from_spm(tfm_unigram **out, const unsigned char *data, size_t len,
                         const char *name, tfm_err *err)
{
    *out = NULL;
    pb b = {data, data, data + len, name};
    spm_info in = {.model_type = 1,
                   .norm = {.add_dummy_prefix = 1, .remove_extra_whitespaces = 1,
                            .escape_whitespaces = 1},
                   .denorm = {.add_dummy_prefix = 1, .remove_extra_whitespaces = 1,
                              .escape_whitespaces = 1}};
    pb_field f = {0}; /* GCC 14 cannot see that pb_next fills it */
    int rc;
    size_t n_pieces = 0;
    /* the specs first: the normalizer is needed to build the model */
    while ((rc = pb_next(&b, &f, err)) == 0) {
        if (f.num == 1) {
            if (want(&b, &f, 2, "a piece entry", err))
                return -1;
            n_pieces++;
        } else if (f.num == 5) {
            if (want(&b, &f, 2, "denormalizer_spec", err) ||
                read_spec(pb_sub(&b, &f), &in.denorm, err))
                return -1;
        } else if (f.num == 2 || f.num == 3) {
            if (want(&b, &f, 2, f.num == 2 ? "trainer_spec" : "normalizer_spec", err))
                return -1;
            if ((f.num == 2 ? read_trainer : read_normalizer)(pb_sub(&b, &f), &in, err))
                return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (n_pieces == 0)
        return tfm_err_set(err, "%s: not a sentencepiece model (no pieces)", name);
    if (in.model_type != 1 && in.model_type != 2)
        return tfm_err_set(err, "%s: a sentencepiece model of type %s: only unigram and bpe "
                                "models are supported", name,
                           in.model_type == 3 ? "word" : in.model_type == 4 ? "char"
                                                                            : "unknown");
    if (in.ws_suffix)
        return tfm_err_set(err, "%s: treat_whitespace_as_suffix is not supported", name);
    tfm_unigram *u;
    if (tfm_unigram_new(&u, &in.norm, name, err))
        return -1;
    tfm_unigram_set_bpe(u, in.model_type == 2);
    b.p = data;
    while ((rc = pb_next(&b, &f, err)) == 0)
        if (f.num == 1 && read_piece(pb_sub(&b, &f), u, err)) {
            rc = -1;
            break;
        }
    if (in.unk_surface)
        tfm_unigram_set_unk_surface(u, (const char *)in.unk_surface, in.unk_surface_len);
    /* spm_decode applies a denormalizer only when it has rules */
    if (rc >= 0 && in.denorm.charsmap_len &&
        tfm_unigram_set_denormalizer(u, &in.denorm, name, err))
        rc = -1;
    if (rc < 0 || tfm_unigram_finish(u, in.byte_fallback, name, err)) {
        tfm_unigram_free(u);
        return -1;
    }
    *out = u;
    return 0;
}
