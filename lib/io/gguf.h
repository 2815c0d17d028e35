/* GGUF files (llama.cpp's format, versions 2 and 3), read.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64
 * metadata count; the metadata, each a key (u64 length + UTF-8 bytes), a
 * u32 value type and the value (numbers, bool, string, or an array: u32
 * element type, u64 count, the elements); the tensor infos, each a name,
 * u32 dimension count (<= 4), u64 dimensions innermost first (ggml's ne[0]
 * is the contiguous one: a row-major [rows, cols] is ne {cols, rows}), u32
 * ggml type and u64 offset; padding to general.alignment (u32, default
 * 32); the data, each tensor at its offset (a multiple of the alignment)
 * from the data's start.
 *
 * The reader maps the file and checks every length, count and offset
 * against the file before anything is exposed; tensors must be of a type
 * tfm reads (F32, F16, BF16, Q8_0: other ggml types are named in the
 * error).  Errors name the file and what was expected.
 *
 *     tfm_gguf g;
 *     if (tfm_gguf_open(&g, "model.gguf", &err) < 0) ...
 *     const tfm_gguf_kv *kv = tfm_gguf_get(&g, "general.architecture");
 *     const tfm_gguf_tensor *t = tfm_gguf_find(&g, "token_embd.weight");
 *     tfm_gguf_close(&g);
 */
#ifndef TFM_IO_GGUF_H
#define TFM_IO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/file.h"

/* metadata value types */
enum {
    TFM_GGUF_U8, TFM_GGUF_I8, TFM_GGUF_U16, TFM_GGUF_I16, TFM_GGUF_U32, TFM_GGUF_I32,
    TFM_GGUF_F32, TFM_GGUF_BOOL, TFM_GGUF_STRING, TFM_GGUF_ARRAY, TFM_GGUF_U64,
    TFM_GGUF_I64, TFM_GGUF_F64,
};

/* the ggml tensor types tfm reads */
enum { TFM_GGML_F32 = 0, TFM_GGML_F16 = 1, TFM_GGML_Q8_0 = 8, TFM_GGML_BF16 = 30 };
#define TFM_GGML_Q8_BLOCK 32 /* values per Q8_0 block: F16 scale, 32 int8 */
#define TFM_GGML_Q8_BYTES 34

typedef struct tfm_gguf_str {
    const char *s; /* in the mapping, not NUL-terminated */
    size_t n;
} tfm_gguf_str;

typedef struct tfm_gguf_kv {
    char *key;           /* NUL-terminated copy */
    uint32_t type;       /* TFM_GGUF_* */
    uint32_t elem;       /* an array's element type */
    uint64_t n;          /* an array's element count */
    /* numbers and bool as all three (the value's own type says which is
     * exact); a string in str; an array of strings in strs; an array of
     * numbers at data (n elements of elem, little-endian, unaligned) */
    int64_t i;
    uint64_t u;
    double f;
    tfm_gguf_str str;
    tfm_gguf_str *strs;
    const unsigned char *data;
} tfm_gguf_kv;

typedef struct tfm_gguf_tensor {
    char *name;          /* NUL-terminated copy */
    int ndim;
    uint64_t ne[4];      /* innermost first; unused ones 1 */
    uint32_t type;       /* TFM_GGML_* */
    uint64_t count;      /* product of ne */
    size_t nbytes;
    const void *data;    /* in the mapping */
} tfm_gguf_tensor;

typedef struct tfm_gguf {
    char *name;          /* the path, for messages */
    uint32_t version;
    size_t n_kv, n_tensors;
    tfm_gguf_kv *kv;
    tfm_gguf_tensor *tensors;
    size_t alignment;
    tfm_map map;
} tfm_gguf;

/* 1 when path starts with GGUF's magic (a file tfm_gguf_open reads, or
 * refuses with its own message), else 0. */
int tfm_gguf_is(const char *path);
int tfm_gguf_open(tfm_gguf *g, const char *path, tfm_err *err);
void tfm_gguf_close(tfm_gguf *g);

const tfm_gguf_kv *tfm_gguf_get(const tfm_gguf *g, const char *key);
const tfm_gguf_tensor *tfm_gguf_find(const tfm_gguf *g, const char *name);
/* "F32", "Q4_K", ...: ggml's name of a tensor type, NULL if unknown */
const char *tfm_ggml_type_name(uint32_t type);
/* "u32", "string", "array", ...: a metadata value type's name */
const char *tfm_gguf_type_name(uint32_t type);

/* A numeric key as an integer in [min, max] (absent: def, or an error when
 * def < min) / a float in (0, max) (absent: def; 0 or below: an error) /
 * a string copied into out (absent: "").  Errors name the file, the key,
 * what it holds and what was expected. */
int tfm_gguf_int(const tfm_gguf *g, const char *key, int64_t min, int64_t max, int64_t def,
                 int64_t *out, tfm_err *err);
int tfm_gguf_float(const tfm_gguf *g, const char *key, double max, double def, double *out,
                   tfm_err *err);
int tfm_gguf_string(const tfm_gguf *g, const char *key, char *out, size_t n, tfm_err *err);

#endif
