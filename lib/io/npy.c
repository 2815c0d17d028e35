#include "io/npy.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "base/buf.h"

/* Streaming writers reserve a header of this size so that the final shape
 * (two 20-digit numbers at most) can be patched in place. */
#define STREAM_HEADER 128

static const struct {
    const char *descr;
    size_t size;
} dtypes[] = {
    [TFM_NPY_U8] = {"|u1", 1},  [TFM_NPY_U16] = {"<u2", 2}, [TFM_NPY_U32] = {"<u4", 4},
    [TFM_NPY_U64] = {"<u8", 8}, [TFM_NPY_I8] = {"|i1", 1},  [TFM_NPY_I16] = {"<i2", 2},
    [TFM_NPY_I32] = {"<i4", 4}, [TFM_NPY_I64] = {"<i8", 8}, [TFM_NPY_F16] = {"<f2", 2},
    [TFM_NPY_F32] = {"<f4", 4}, [TFM_NPY_F64] = {"<f8", 8}, [TFM_NPY_BOOL] = {"|b1", 1},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

size_t tfm_npy_dtype_size(tfm_npy_dtype t)
{
    return (unsigned)t < N_DTYPES ? dtypes[t].size : 0;
}

const char *tfm_npy_dtype_descr(tfm_npy_dtype t)
{
    return (unsigned)t < N_DTYPES ? dtypes[t].descr : "?";
}

/* ---- reading -------------------------------------------------------- */

typedef struct hdr {
    const char *p, *end;
} hdr;

static void hdr_ws(hdr *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

/* A Python string literal (no escapes are needed for the keys we know). */
static int hdr_string(hdr *h, char *out, size_t cap)
{
    hdr_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return -1;
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (n + 1 >= cap || *h->p == '\\')
            return -1;
        out[n++] = *h->p++;
    }
    if (h->p >= h->end)
        return -1;
    h->p++;
    out[n] = 0;
    return 0;
}

static int hdr_word(hdr *h, const char *w)
{
    hdr_ws(h);
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) >= n && memcmp(h->p, w, n) == 0) {
        h->p += n;
        return 1;
    }
    return 0;
}

int tfm_npy_parse(tfm_npy *a, const void *image, size_t size, const char *name,
                  tfm_err *err)
{
    memset(a, 0, sizeof *a);
    const unsigned char *b = image;
    if (size < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return tfm_err_set(err, "%s: not a .npy file (no \\x93NUMPY magic)", name);
    unsigned major = b[6], minor = b[7];
    if (major < 1 || major > 3 || minor != 0)
        return tfm_err_set(err, "%s: unsupported .npy version %u.%u", name, major, minor);
    size_t pre = major == 1 ? 10 : 12;
    if (size < pre)
        return tfm_err_set(err, "%s: truncated .npy header", name);
    size_t hlen = major == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                             : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
                                   (size_t)b[11] << 24;
    if (hlen > size - pre)
        return tfm_err_set(err, "%s: truncated .npy header (%zu bytes announced, %zu present)",
                           name, hlen, size - pre);
    hdr h = {(const char *)b + pre, (const char *)b + pre + hlen};
    char descr[16] = "", key[32];
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0;
    const char *bad = NULL;
    hdr_ws(&h);
    if (h.p >= h.end || *h.p++ != '{') {
        bad = "header is not a dict";
        goto bad;
    }
    for (;;) {
        hdr_ws(&h);
        if (h.p < h.end && *h.p == '}') {
            h.p++;
            break;
        }
        if (hdr_string(&h, key, sizeof key) < 0) {
            bad = "expected a quoted key";
            goto bad;
        }
        hdr_ws(&h);
        if (h.p >= h.end || *h.p++ != ':') {
            bad = "expected ':'";
            goto bad;
        }
        if (!strcmp(key, "descr")) {
            if (hdr_string(&h, descr, sizeof descr) < 0) {
                bad = "'descr' must be a simple dtype string";
                goto bad;
            }
            have_descr = 1;
        } else if (!strcmp(key, "fortran_order")) {
            if (hdr_word(&h, "True"))
                fortran = 1;
            else if (hdr_word(&h, "False"))
                fortran = 0;
            else {
                bad = "'fortran_order' must be True or False";
                goto bad;
            }
            have_order = 1;
        } else if (!strcmp(key, "shape")) {
            hdr_ws(&h);
            if (h.p >= h.end || *h.p++ != '(') {
                bad = "'shape' must be a tuple";
                goto bad;
            }
            for (;;) {
                hdr_ws(&h);
                if (h.p < h.end && *h.p == ')') {
                    h.p++;
                    break;
                }
                if (a->ndim == TFM_NPY_MAX_DIMS) {
                    bad = "more than 8 dimensions";
                    goto bad;
                }
                if (h.p >= h.end || !isdigit((unsigned char)*h.p)) {
                    bad = "'shape' must hold non-negative integers";
                    goto bad;
                }
                size_t v = 0;
                while (h.p < h.end && isdigit((unsigned char)*h.p)) {
                    if (__builtin_mul_overflow(v, 10, &v) ||
                        __builtin_add_overflow(v, (size_t)(*h.p - '0'), &v)) {
                        bad = "dimension too large";
                        goto bad;
                    }
                    h.p++;
                }
                if (h.p < h.end && *h.p == 'L') /* Python 2 longs */
                    h.p++;
                a->shape[a->ndim++] = v;
                hdr_ws(&h);
                if (h.p < h.end && *h.p == ',')
                    h.p++;
                else if (!(h.p < h.end && *h.p == ')')) {
                    bad = "malformed 'shape' tuple";
                    goto bad;
                }
            }
            have_shape = 1;
        } else {
            tfm_err_set(err, "%s: bad .npy header: unknown key '%s'", name, key);
            return -1;
        }
        hdr_ws(&h);
        if (h.p < h.end && *h.p == ',')
            h.p++;
        else if (!(h.p < h.end && *h.p == '}')) {
            bad = "expected ',' or '}'";
            goto bad;
        }
    }
    hdr_ws(&h);
    if (h.p != h.end) {
        bad = "junk after the dict";
        goto bad;
    }
    if (!have_descr || !have_order || !have_shape) {
        bad = !have_descr ? "no 'descr'" : !have_order ? "no 'fortran_order'" : "no 'shape'";
        goto bad;
    }
    /* 1-byte types may be written with any byte order mark */
    if ((descr[0] == '<' || descr[0] == '=') && (descr[1] == 'u' || descr[1] == 'i' || descr[1] == 'b') &&
        descr[2] == '1' && descr[3] == 0)
        descr[0] = '|';
    int found = -1;
    for (size_t i = 0; i < N_DTYPES; i++)
        if (!strcmp(descr, dtypes[i].descr))
            found = (int)i;
    if (found < 0) {
        if (descr[0] == '>')
            return tfm_err_set(err, "%s: big-endian dtype '%s' is not supported", name, descr);
        return tfm_err_set(err, "%s: unsupported dtype '%s'", name, descr);
    }
    a->dtype = (tfm_npy_dtype)found;
    size_t count = 1, nonunit = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (__builtin_mul_overflow(count, a->shape[i], &count))
            return tfm_err_set(err, "%s: shape too large", name);
        nonunit += a->shape[i] > 1;
    }
    if (fortran && nonunit > 1)
        return tfm_err_set(err, "%s: Fortran-order arrays are not supported", name);
    size_t bytes;
    if (__builtin_mul_overflow(count, dtypes[found].size, &bytes))
        return tfm_err_set(err, "%s: shape too large", name);
    size_t off = pre + hlen;
    if (size - off != bytes)
        return tfm_err_set(err, "%s: %s: %zu bytes of data, expected %zu for %zu elements of %s",
                           name, size - off < bytes ? "truncated" : "trailing bytes",
                           size - off, bytes, count, descr);
    a->count = count;
    a->data = b + off;
    if ((uintptr_t)a->data % dtypes[found].size) {
        a->copy = tfm_aligned_alloc(bytes ? bytes : 1);
        memcpy(a->copy, a->data, bytes);
        a->data = a->copy;
    }
    return 0;
bad:
    return tfm_err_set(err, "%s: bad .npy header: %s", name, bad);
}

int tfm_npy_open(tfm_npy *a, const char *path, tfm_err *err)
{
    memset(a, 0, sizeof *a);
    tfm_map m;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    if (tfm_npy_parse(a, m.data, m.size, name, err) < 0) {
        tfm_map_close(&m);
        return -1;
    }
    a->map = m;
    return 0;
}

void tfm_npy_close(tfm_npy *a)
{
    if (a->map.data)
        tfm_map_close(&a->map);
    free(a->copy);
    memset(a, 0, sizeof *a);
}

/* ---- writing -------------------------------------------------------- */

/* Builds a version 1.0 header; total size is the smallest multiple of 64
 * that fits, but at least min_total. */
static void build_header(tfm_buf *out, tfm_npy_dtype dtype, int ndim,
                         const uint64_t *shape, size_t min_total)
{
    tfm_buf d = {0};
    tfm_buf_printf(&d, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   tfm_npy_dtype_descr(dtype));
    for (int i = 0; i < ndim; i++)
        tfm_buf_printf(&d, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    tfm_buf_puts(&d, ndim == 1 ? ",), }" : "), }");
    size_t total = 10 + d.len + 1;
    total = (total + 63) / 64 * 64;
    if (total < min_total)
        total = min_total;
    size_t hlen = total - 10;
    while (d.len < hlen - 1)
        tfm_buf_putc(&d, ' ');
    tfm_buf_putc(&d, '\n');
    TFM_ASSERT(d.len == hlen && hlen <= 0xffff);
    tfm_buf_append(out, "\x93NUMPY\x01\x00", 8);
    tfm_buf_putc(out, (char)(hlen & 0xff));
    tfm_buf_putc(out, (char)(hlen >> 8));
    tfm_buf_append(out, d.data, d.len);
    tfm_buf_free(&d);
}

int tfm_npy_write(const char *path, tfm_npy_dtype dtype, int ndim,
                  const size_t *shape, const void *data, tfm_err *err)
{
    TFM_ASSERT(ndim >= 0 && ndim <= TFM_NPY_MAX_DIMS && (unsigned)dtype < N_DTYPES);
    const char *name = path && strcmp(path, "-") ? path : "<stdout>";
    uint64_t sh[TFM_NPY_MAX_DIMS];
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        sh[i] = shape[i];
        if (__builtin_mul_overflow(count, shape[i], &count))
            return tfm_err_set(err, "%s: array too large", name);
    }
    size_t bytes;
    if (__builtin_mul_overflow(count, tfm_npy_dtype_size(dtype), &bytes))
        return tfm_err_set(err, "%s: array too large", name);
    tfm_buf h = {0};
    build_header(&h, dtype, ndim, sh, 0);
    tfm_out o;
    if (tfm_out_open(&o, path, err) < 0) {
        tfm_buf_free(&h);
        return -1;
    }
    int ok = fwrite(h.data, 1, h.len, o.fp) == h.len &&
             (bytes == 0 || fwrite(data, 1, bytes, o.fp) == bytes);
    tfm_buf_free(&h);
    if (!ok) {
        tfm_err_errno(err, "%s: write error", name);
        if (o.tmp)
            tfm_out_abort(&o);
        return -1;
    }
    return tfm_out_commit(&o, err);
}

int tfm_npy_writer_open(tfm_npy_writer *w, const char *path, tfm_npy_dtype dtype,
                        size_t row_len, tfm_err *err)
{
    TFM_ASSERT((unsigned)dtype < N_DTYPES);
    memset(w, 0, sizeof *w);
    w->dtype = dtype;
    w->row_len = row_len;
    int to_stdout = !path || !strcmp(path, "-");
    w->name = tfm_strdup(to_stdout ? "<stdout>" : path);
    if (tfm_out_open(&w->out, path, err) < 0) {
        free(w->name);
        w->name = NULL;
        return -1;
    }
    if (to_stdout) {
        /* stdout may be a pipe that cannot be rewound for the final shape:
         * spool the data and send header + data at commit. */
        w->data_fp = tmpfile();
        if (!w->data_fp) {
            tfm_err_errno(err, "%s: cannot create a spool file", w->name);
            tfm_npy_writer_abort(w);
            return -1;
        }
        return 0;
    }
    static const char zeros[STREAM_HEADER];
    if (fwrite(zeros, 1, sizeof zeros, w->out.fp) != sizeof zeros) {
        tfm_err_errno(err, "%s: write error", w->name);
        tfm_npy_writer_abort(w);
        return -1;
    }
    return 0;
}

int tfm_npy_writer_append(tfm_npy_writer *w, const void *elems, size_t n, tfm_err *err)
{
    TFM_ASSERT(w->out.fp);
    FILE *fp = w->data_fp ? w->data_fp : w->out.fp;
    size_t sz = tfm_npy_dtype_size(w->dtype);
    if (n && fwrite(elems, sz, n, fp) != n)
        return tfm_err_errno(err, "%s: write error", w->name);
    w->count += n;
    return 0;
}

int tfm_npy_writer_commit(tfm_npy_writer *w, tfm_err *err)
{
    TFM_ASSERT(w->out.fp);
    int rc = -1;
    uint64_t shape[2];
    int ndim = 1;
    shape[0] = w->count;
    if (w->row_len) {
        if (w->count % w->row_len) {
            tfm_err_set(err, "%s: %llu elements do not make whole rows of %zu", w->name,
                        (unsigned long long)w->count, w->row_len);
            goto fail;
        }
        shape[0] = w->count / w->row_len;
        shape[1] = w->row_len;
        ndim = 2;
    }
    tfm_buf h = {0};
    build_header(&h, w->dtype, ndim, shape, STREAM_HEADER);
    if (w->data_fp) {
        int ok = fwrite(h.data, 1, h.len, w->out.fp) == h.len && fflush(w->data_fp) == 0 &&
                 fseek(w->data_fp, 0, SEEK_SET) == 0;
        char buf[1 << 16];
        size_t k;
        while (ok && (k = fread(buf, 1, sizeof buf, w->data_fp)) > 0)
            ok = fwrite(buf, 1, k, w->out.fp) == k;
        ok = ok && !ferror(w->data_fp);
        fclose(w->data_fp);
        w->data_fp = NULL;
        tfm_buf_free(&h);
        if (!ok) {
            tfm_err_errno(err, "%s: write error", w->name);
            goto fail;
        }
    } else {
        TFM_ASSERT(h.len == STREAM_HEADER);
        int ok = fflush(w->out.fp) == 0 && fseek(w->out.fp, 0, SEEK_SET) == 0 &&
                 fwrite(h.data, 1, h.len, w->out.fp) == h.len;
        tfm_buf_free(&h);
        if (!ok) {
            tfm_err_errno(err, "%s: write error", w->name);
            goto fail;
        }
    }
    rc = tfm_out_commit(&w->out, err);
    free(w->name);
    memset(w, 0, sizeof *w);
    return rc;
fail:
    tfm_npy_writer_abort(w);
    return rc;
}

void tfm_npy_writer_abort(tfm_npy_writer *w)
{
    if (w->data_fp)
        fclose(w->data_fp);
    if (w->out.fp) {
        if (w->out.tmp)
            tfm_out_abort(&w->out);
        else
            fflush(w->out.fp);
    }
    free(w->name);
    memset(w, 0, sizeof *w);
}

int tfm_npy_ids_check(const tfm_npy *a, const char *name, tfm_err *err)
{
    if (a->ndim != 1)
        return tfm_err_set(err, "%s: token ids are a 1-D array, not %d-D", name, a->ndim);
    switch (a->dtype) {
    case TFM_NPY_U8: case TFM_NPY_U16: case TFM_NPY_U32: case TFM_NPY_U64:
    case TFM_NPY_I8: case TFM_NPY_I16: case TFM_NPY_I32: case TFM_NPY_I64:
        return 0;
    default:
        return tfm_err_set(err, "%s: token ids are integers, not %s", name,
                           tfm_npy_dtype_descr(a->dtype));
    }
}

int tfm_npy_ids(const tfm_npy *a, const char *name, uint64_t limit, uint32_t *out,
                tfm_err *err)
{
    if (tfm_npy_ids_check(a, name, err) < 0)
        return -1;
    if (limit > (uint64_t)UINT32_MAX + 1)
        limit = (uint64_t)UINT32_MAX + 1;
    const int is_signed = a->dtype >= TFM_NPY_I8 && a->dtype <= TFM_NPY_I64;
    for (size_t i = 0; i < a->count; i++) {
        uint64_t u = 0;
        int64_t s = 0;
        switch (a->dtype) {
        case TFM_NPY_U8: u = ((const uint8_t *)a->data)[i]; break;
        case TFM_NPY_U16: u = ((const uint16_t *)a->data)[i]; break;
        case TFM_NPY_U32: u = ((const uint32_t *)a->data)[i]; break;
        case TFM_NPY_U64: u = ((const uint64_t *)a->data)[i]; break;
        case TFM_NPY_I8: s = ((const int8_t *)a->data)[i]; break;
        case TFM_NPY_I16: s = ((const int16_t *)a->data)[i]; break;
        case TFM_NPY_I32: s = ((const int32_t *)a->data)[i]; break;
        case TFM_NPY_I64: s = ((const int64_t *)a->data)[i]; break;
        default: break;
        }
        if (is_signed && s < 0)
            return tfm_err_set(err, "%s: element %zu: token id %lld is outside the vocabulary "
                                    "(size %llu)", name, i, (long long)s,
                               (unsigned long long)limit);
        if (is_signed)
            u = (uint64_t)s;
        if (u >= limit)
            return tfm_err_set(err, "%s: element %zu: token id %llu is outside the vocabulary "
                                    "(size %llu)", name, i, (unsigned long long)u,
                               (unsigned long long)limit);
        out[i] = (uint32_t)u;
    }
    return 0;
}
