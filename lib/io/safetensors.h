/* safetensors files: model weights, training state.
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON (an object
 * name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional
 * "__metadata__" object of strings), then the data buffer; offsets are
 * relative to the buffer.
 *
 * The reader maps the file and trusts nothing: before any tensor is exposed
 * it checks the header length (<= 100 MB and within the file), the JSON,
 * every dtype, shape and offset pair (size = product(shape) * dtype size,
 * without overflow), that the tensors cover the data buffer exactly with no
 * holes or overlaps, that names are unique, and that the metadata maps
 * strings to strings.  Errors name the file (and line:col in the header).
 *
 *     tfm_safetensors st;
 *     if (tfm_safetensors_open(&st, "model.safetensors", &err) < 0) ...
 *     const tfm_st_tensor *t = tfm_safetensors_find(&st, "wte.weight");
 *     if (t && t->dtype == TFM_ST_F32 && t->ndim == 2) use((const float *)t->data);
 *     const char *cfg = tfm_safetensors_meta(&st, "config", NULL);
 *     tfm_safetensors_close(&st);
 *
 * The writer collects tensors (borrowing their data) and metadata, then
 * writes the file atomically (temporary file, fsync, rename), streaming each
 * tensor's data with one fwrite:
 *
 *     tfm_safetensors_writer w;
 *     tfm_safetensors_writer_init(&w);
 *     tfm_safetensors_writer_meta(&w, "format", "tfm-gpt");
 *     tfm_safetensors_writer_add(&w, "wte.weight", TFM_ST_F32, 2, shape, wte);
 *     rc = tfm_safetensors_writer_write(&w, "run/model.safetensors", &err);
 *     tfm_safetensors_writer_free(&w);
 */
#ifndef TFM_IO_SAFETENSORS_H
#define TFM_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/file.h"
#include "base/half.h"
#include "io/json.h"

typedef enum tfm_st_dtype {
    TFM_ST_F64,
    TFM_ST_F32,
    TFM_ST_F16,
    TFM_ST_BF16,
    TFM_ST_I64,
    TFM_ST_I32,
    TFM_ST_I16,
    TFM_ST_I8,
    TFM_ST_U64,
    TFM_ST_U32,
    TFM_ST_U16,
    TFM_ST_U8,
    TFM_ST_BOOL,
} tfm_st_dtype;

size_t tfm_st_dtype_size(tfm_st_dtype t);
/* "F32", "I64", ... */
const char *tfm_st_dtype_name(tfm_st_dtype t);

#define TFM_ST_MAX_DIMS 8
/* Header length limit, as in the reference implementation. */
#define TFM_ST_MAX_HEADER (100u * 1000 * 1000)

typedef struct tfm_st_tensor {
    const char *name;   /* NUL-terminated (names holding NUL are refused) */
    tfm_st_dtype dtype;
    int ndim;
    size_t shape[TFM_ST_MAX_DIMS];
    size_t count;       /* product of shape */
    size_t nbytes;
    const void *data;   /* aligned to the element size (copied when the file
                           puts it at an odd offset); valid until close */
} tfm_st_tensor;

typedef struct tfm_st_meta {
    const char *key, *value; /* NUL-terminated; value_len counts its bytes */
    size_t value_len;
} tfm_st_meta;

typedef struct tfm_safetensors {
    const char *name;        /* for messages (owned) */
    size_t n_tensors;
    tfm_st_tensor *tensors;  /* in header order */
    size_t n_meta;
    tfm_st_meta *meta;
    /* private */
    tfm_map map;
    tfm_json_doc doc;
    void **copies;
    size_t n_copies;
    struct tfm_safetensors *shards; /* a sharded view's files */
    size_t n_shards;
} tfm_safetensors;

/* Opens path; when it does not exist but PATH.index.json does (HuggingFace's
 * save_pretrained with max_shard_size: "weight_map" names each tensor's
 * shard, a file in the index's folder), the shards as one view named after
 * the index: every tensor of the weight_map must be in its shard and every
 * shard's tensor in the weight_map, once; the metadata is the first
 * shard's.  A missing model.safetensors beside PyTorch's pickle
 * (pytorch_model.bin) says that format is not read. */
int tfm_safetensors_open(tfm_safetensors *st, const char *path, tfm_err *err);
/* Validates an in-memory image (borrowed: it must outlive st). */
int tfm_safetensors_parse(tfm_safetensors *st, const void *image, size_t size,
                          const char *name, tfm_err *err);
/* tfm_safetensors_parse of an image st takes over (freed by close, also
 * on failure): a view made of another format's file (convert/gguf.h). */
int tfm_safetensors_view(tfm_safetensors *st, void *image, size_t size, const char *name,
                         tfm_err *err);
void tfm_safetensors_close(tfm_safetensors *st);

/* Gives tensor t (one of st's) new contents: dtype, shape and data, an
 * allocation st takes over (freed by close).  For readers that widen a
 * stored dtype to the one they compute in, after checking the checksum
 * (model/file.h). */
void tfm_safetensors_replace(tfm_safetensors *st, tfm_st_tensor *t, tfm_st_dtype dtype,
                             int ndim, const size_t *shape, void *data);

/* (16-bit float conversions: base/half.h, included above) */

/* Tensor by name, or NULL. */
const tfm_st_tensor *tfm_safetensors_find(const tfm_safetensors *st, const char *name);
/* Metadata value by key, or NULL; *len (if len) gets its length. */
const char *tfm_safetensors_meta(const tfm_safetensors *st, const char *key, size_t *len);

typedef struct tfm_st_entry {
    char *name;
    tfm_st_dtype dtype;
    int ndim;
    size_t shape[TFM_ST_MAX_DIMS];
    const void *data; /* borrowed */
    size_t nbytes;
} tfm_st_entry;

typedef struct tfm_safetensors_writer {
    tfm_st_entry *entries;
    size_t n, cap;
    char **meta;      /* key, value, key, value, ... (owned copies) */
    size_t *meta_len; /* value lengths */
    size_t n_meta, cap_meta;
} tfm_safetensors_writer;

void tfm_safetensors_writer_init(tfm_safetensors_writer *w);
/* Adds a tensor; `data` (product(shape) * dtype size bytes) is borrowed until
 * write returns.  The name is copied.  Tensors are stored in the order
 * added. */
void tfm_safetensors_writer_add(tfm_safetensors_writer *w, const char *name,
                                tfm_st_dtype dtype, int ndim, const size_t *shape,
                                const void *data);
/* Adds a metadata string (copied; a later value for the same key wins).
 * Invalid UTF-8 in key or value is written as U+FFFD (JSON cannot carry it). */
void tfm_safetensors_writer_meta(tfm_safetensors_writer *w, const char *key,
                                 const char *value);
void tfm_safetensors_writer_meta_n(tfm_safetensors_writer *w, const char *key,
                                   const char *value, size_t len);
/* Writes everything to path atomically ("-": stdout).  Fails on duplicate
 * names. */
int tfm_safetensors_writer_write(const tfm_safetensors_writer *w, const char *path,
                                 tfm_err *err);
/* The same file as an image in memory (*image malloc'd, *size bytes; name
 * for messages): what tfm_safetensors_view reads.  A tensor added with
 * NULL data is zeros, for the caller to fill in the view. */
int tfm_safetensors_writer_image(const tfm_safetensors_writer *w, const char *name,
                                 void **image, size_t *size, tfm_err *err);
void tfm_safetensors_writer_free(tfm_safetensors_writer *w);

#endif
