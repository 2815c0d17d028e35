/* NumPy .npy arrays: the format of token files and embeddings.
 *
 * Reading maps the file (tfm_map) and validates the whole header before
 * exposing anything: magic, version 1.0/2.0/3.0, the header dict (descr,
 * fortran_order, shape) and the data size against the file length.
 * Little-endian integer, float and bool dtypes; C order (or any 1-D array).
 *
 * Writing produces version 1.0 files whose data starts at a multiple of 64
 * bytes, atomically (written to a temporary file, renamed on commit).  Arrays
 * of unknown length are streamed: the shape in the header is patched when
 * the writer is committed.
 *
 *     tfm_npy a;
 *     if (tfm_npy_open(&a, "train.npy", &err) < 0) ...
 *     if (a.dtype == TFM_NPY_U16) { const uint16_t *ids = a.data; ... a.count }
 *     tfm_npy_close(&a);
 *
 *     tfm_npy_writer w;
 *     tfm_npy_writer_open(&w, "ids.npy", TFM_NPY_U16, 0, &err);  // 1-D
 *     tfm_npy_writer_append(&w, ids, n, &err);                    // any times
 *     tfm_npy_writer_commit(&w, &err);          // or tfm_npy_writer_abort
 */
#ifndef TFM_IO_NPY_H
#define TFM_IO_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "base/file.h"

typedef enum tfm_npy_dtype {
    TFM_NPY_U8,  /* |u1 */
    TFM_NPY_U16, /* <u2 */
    TFM_NPY_U32, /* <u4 */
    TFM_NPY_U64, /* <u8 */
    TFM_NPY_I8,  /* |i1 */
    TFM_NPY_I16, /* <i2 */
    TFM_NPY_I32, /* <i4 */
    TFM_NPY_I64, /* <i8 */
    TFM_NPY_F16, /* <f2 */
    TFM_NPY_F32, /* <f4 */
    TFM_NPY_F64, /* <f8 */
    TFM_NPY_BOOL /* |b1 */
} tfm_npy_dtype;

/* Bytes per element. */
size_t tfm_npy_dtype_size(tfm_npy_dtype t);
/* NumPy's descr string, e.g. "<u2". */
const char *tfm_npy_dtype_descr(tfm_npy_dtype t);

#define TFM_NPY_MAX_DIMS 8

typedef struct tfm_npy {
    tfm_npy_dtype dtype;
    int ndim;                        /* 0 for a scalar */
    size_t shape[TFM_NPY_MAX_DIMS];
    size_t count;                    /* product of shape */
    const void *data;                /* count elements, aligned to the element
                                        size; valid until tfm_npy_close */
    /* private */
    tfm_map map;
    void *copy; /* data copied out when the file's data offset is misaligned */
} tfm_npy;

/* Maps and validates path ("-" reads stdin).  Errors name the file. */
int tfm_npy_open(tfm_npy *a, const char *path, tfm_err *err);
/* Validates an in-memory .npy image; a->data points into it (borrowed, and
 * the image must outlive a, unless it was misaligned and copied).  `name` is
 * used in messages. */
int tfm_npy_parse(tfm_npy *a, const void *image, size_t size, const char *name,
                  tfm_err *err);
void tfm_npy_close(tfm_npy *a);

/* Token ids: one rule for every reader (training data, tfm-eval --tokens,
 * tfm-tokenize decode).  A 1-D array of integers, unsigned or signed, of any
 * width (|u1 to <u8, |i1 to <i8), each in [0, limit).  Otherwise an error
 * naming `name`, the element and its value ("x.npy: element 3: token id -1
 * is outside the vocabulary (size 50257)", "... token ids are integers, not
 * <f4", "... token ids are a 1-D array, not 2-D").
 * tfm_npy_ids_check checks the shape and dtype only; tfm_npy_ids checks
 * everything and converts to out[0..a->count). */
int tfm_npy_ids_check(const tfm_npy *a, const char *name, tfm_err *err);
int tfm_npy_ids(const tfm_npy *a, const char *name, uint64_t limit, uint32_t *out,
                tfm_err *err);

/* Writes a whole array (ndim 0..TFM_NPY_MAX_DIMS, C order) to path ("-" is
 * stdout) atomically. */
int tfm_npy_write(const char *path, tfm_npy_dtype dtype, int ndim,
                  const size_t *shape, const void *data, tfm_err *err);

/* Streaming writer of a 1-D array (row_len 0) or a 2-D array [rows, row_len]
 * whose number of rows is known only at the end. */
typedef struct tfm_npy_writer {
    tfm_out out;
    FILE *data_fp;     /* stdout only: data spooled here until commit */
    tfm_npy_dtype dtype;
    size_t row_len;    /* 0: 1-D */
    uint64_t count;    /* elements appended so far */
    char *name;        /* for messages */
} tfm_npy_writer;

int tfm_npy_writer_open(tfm_npy_writer *w, const char *path, tfm_npy_dtype dtype,
                        size_t row_len, tfm_err *err);
/* Appends n elements (for 2-D, rows are complete only at commit: the total
 * must be a multiple of row_len). */
int tfm_npy_writer_append(tfm_npy_writer *w, const void *elems, size_t n,
                          tfm_err *err);
/* Patches the shape, fsyncs and renames into place; closes in every case. */
int tfm_npy_writer_commit(tfm_npy_writer *w, tfm_err *err);
/* Discards everything written (safe after a failed commit/open too). */
void tfm_npy_writer_abort(tfm_npy_writer *w);

#endif
