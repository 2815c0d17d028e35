/* tfm-embed: contextual embeddings of text lines.
 * Options -> lines read in chunks -> tfm_embedder_run (lib/infer/embed.h)
 * -> vectors in input order (npy, TSV, JSON lines, raw float32), cosine
 * similarities, the nearest rows of stored vectors (lib/infer/search.h),
 * attention maps. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "data/spans.h"
#include "infer/embed.h"
#include "infer/search.h"
#include "io/npy.h"
#include "lm/lm.h"
#include "model/forward.h"
#include "lm/info.h"
#include "tensor/gemm.h"
#include "text/utf8.h"

static const char *prog = "tfm-embed";

static void __attribute__((noreturn)) usage(void)
{
    printf("Usage: %s -m MODEL [options] [FILE]\n"
           "Embed each line of FILE (default: stdin) with a transformer; a line \"A<TAB>B\"\n"
           "is a pair for models with segments (BERT).  Output in input order.\n"
           "\n"
           "Model:\n"
           "  -m, --model PATH       tfm model file (any kind; an encoder-decoder's encoder),\n"
           "                         or a HuggingFace BERT or GPT-2 folder / safetensors file\n"
           "                         (a BERT folder's F16 and BF16 weights are widened to\n"
           "                         float32; a GPT-2 file's must be float32)\n"
           "      --adapter DIR      a LoRA adapter (PEFT's adapter_config.json and\n"
           "                         adapter_model.safetensors, as tfm-train writes them)\n"
           "                         merged into the model's weights at load\n"
           "Layers (0 = embedding output, 1..L the blocks' outputs):\n"
           "      --layers SPEC      N (negative from the top: -1 last), first, last,\n"
           "                         second-last, sum-last-4, concat-last-4, sum-all\n"
           "                         (default: last; concat-last-4 is [L-3|L-2|L-1|L])\n"
           "      --layer-weights S0,S1,...,SL\n"
           "                         ELMo's mix of every layer: gamma * sum softmax(s)_l h_l\n"
           "      --gamma G          ELMo's scale (default 1)\n"
           "Pooling:\n"
           "      --pool P           cls, mean, max, mean-sqrt-len (sum / sqrt(tokens)),\n"
           "                         last, or none (one vector per token); a comma list\n"
           "                         (mean,max) puts the vectors side by side, k x D wide,\n"
           "                         in the order cls, max, mean, mean-sqrt-len, last\n"
           "                         (sentence-transformers'); default: the model folder's\n"
           "                         sentence-transformers setting, else mean for\n"
           "                         encoders, last for decoders\n"
           "      --normalize        scale each vector to unit length (L2; after the\n"
           "                         concatenation of several --pool modes)\n"
           "Output:\n"
           "  -o, --output FILE      write here (default: stdout); written whole or not at all\n"
           "  -f, --format F         npy (float32 [N, D]; default), tsv, jsonl or raw (float32\n"
           "                         little-endian); with -o, the default follows the\n"
           "                         extension (.npy .tsv .jsonl .f32)\n"
           "      --offsets FILE     --pool none with npy: the int64 [N + 1] array of each\n"
           "                         input's first row (default: OUTPUT with .npy made\n"
           "                         .offsets.npy: -o v.npy gives v.offsets.npy)\n"
           "      --similarity       cosine of A and B of each \"A<TAB>B\" line (one a line)\n"
           "      --matrix           the N x N cosine matrix of the inputs (holds them all)\n"
           "      --search VECS.npy  for each line, the K rows of VECS (vectors tfm-embed\n"
           "                         wrote with this model) nearest by cosine: TSV\n"
           "                         LINE<TAB>ROW<TAB>COSINE (rows from 1), or jsonl\n"
           "      --top K            rows per line for --search (default 10)\n"
           "      --search-text FILE the lines VECS was made from: each row's text as\n"
           "                         the last column\n"
           "Attention:\n"
           "      --attention FILE   float32 [layers, heads, T, T] of the input (a %%d in\n"
           "                         FILE: one file per line, %%d its line number)\n"
           "      --attention-svg FILE\n"
           "                         heat map of one layer and head, tokens on both axes\n"
           "                         (a %%d in FILE as for --attention)\n"
           "      --attention-layer N  1..L or negative from the top (default: all for\n"
           "                         --attention, -1 for the picture)\n"
           "      --attention-head H   0..heads-1 (default: all; the picture: 0)\n"
           "Input:\n"
           "      --max-len N        tokens per input at most (default: a sentence-transformers\n"
           "                         folder's max_seq_length, else the model's context)\n"
           "      --truncate MODE    head (keep the first N tokens, the count of inputs cut\n"
           "                         on stderr; default) or error\n"
           "      --skip-empty       empty lines give no output (default: embedded as an\n"
           "                         input of only the special tokens; an error for models\n"
           "                         without any)\n"
           "      --max-tokens N     tokens per forward batch (default 4096)\n"
           "      --chunk N          lines read and sorted by length at a time (default 1024)\n"
           "Other:\n"
           "      --threads N        threads (default: TFM_NUM_THREADS or the usable CPUs)\n"
           "      --q8-gemm MODE     q8_0 files' whole-sequence products: in 8 bits (on),\n"
           "                         float32 on the widened weights (off), or the faster\n"
           "                         of the two per shape by a timing (auto; default)\n"
           "  -q, --quiet            no messages on stderr\n"
           "  -h, --help             this help\n"
           "      --version          print the version\n"
           "\n"
           "Exit status: 0 success, 1 failure (messages name the input line), 2 usage.\n",
           prog);
    exit(0);
}

enum {
    OPT_LAYERS = 256, OPT_LAYER_WEIGHTS, OPT_GAMMA, OPT_POOL, OPT_NORMALIZE, OPT_OFFSETS,
    OPT_SIMILARITY, OPT_MATRIX, OPT_ATTENTION, OPT_ATTENTION_SVG, OPT_ATT_LAYER, OPT_ATT_HEAD,
    OPT_MAX_LEN, OPT_TRUNCATE, OPT_SKIP_EMPTY, OPT_MAX_TOKENS, OPT_CHUNK, OPT_THREADS,
    OPT_VERSION, OPT_ADAPTER, OPT_Q8_GEMM, OPT_SEARCH, OPT_TOP, OPT_SEARCH_TEXT,
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},
    {"adapter", required_argument, 0, OPT_ADAPTER},
    {"layers", required_argument, 0, OPT_LAYERS},
    {"layer-weights", required_argument, 0, OPT_LAYER_WEIGHTS},
    {"gamma", required_argument, 0, OPT_GAMMA},
    {"pool", required_argument, 0, OPT_POOL},
    {"normalize", no_argument, 0, OPT_NORMALIZE},
    {"output", required_argument, 0, 'o'},
    {"format", required_argument, 0, 'f'},
    {"offsets", required_argument, 0, OPT_OFFSETS},
    {"similarity", no_argument, 0, OPT_SIMILARITY},
    {"matrix", no_argument, 0, OPT_MATRIX},
    {"search", required_argument, 0, OPT_SEARCH},
    {"top", required_argument, 0, OPT_TOP},
    {"search-text", required_argument, 0, OPT_SEARCH_TEXT},
    {"attention", required_argument, 0, OPT_ATTENTION},
    {"attention-svg", required_argument, 0, OPT_ATTENTION_SVG},
    {"attention-layer", required_argument, 0, OPT_ATT_LAYER},
    {"attention-head", required_argument, 0, OPT_ATT_HEAD},
    {"max-len", required_argument, 0, OPT_MAX_LEN},
    {"truncate", required_argument, 0, OPT_TRUNCATE},
    {"skip-empty", no_argument, 0, OPT_SKIP_EMPTY},
    {"max-tokens", required_argument, 0, OPT_MAX_TOKENS},
    {"chunk", required_argument, 0, OPT_CHUNK},
    {"threads", required_argument, 0, OPT_THREADS},
    {"q8-gemm", required_argument, 0, OPT_Q8_GEMM},
    {"quiet", no_argument, 0, 'q'},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

typedef enum { FMT_NPY, FMT_TSV, FMT_JSONL, FMT_RAW } out_format;

typedef struct app {
    tfm_lm lm;
    tfm_tok_scratch *scratch;
    tfm_embedder emb;
    int D, L, NH, pairs, similarity, matrix, skip_empty, truncate_error, max_len, quiet;
    out_format fmt;
    const char *in_name, *out_path, *offsets_path;
    /* attention */
    const char *att_npy, *att_svg;
    int att_layer, att_head; /* absolute layer 1..L or 0 = all; head -1 = all */
    int att_layer_set, att_head_set;
    /* the output */
    tfm_out out;
    tfm_npy_writer npy, offs;
    int64_t rows_written;
    /* --matrix: every vector */
    float *all;
    size_t n_all;
    /* --search: the stored vectors, rows per query */
    const char *search_path;
    tfm_search search;
    int top;
    /* counts */
    long n_inputs, n_truncated, n_skipped, n_tokens;
} app;

/* One chunk of inputs: ids packed, and the text of each for token spans. */
typedef struct chunk {
    tfm_ids ids;
    tfm_buf seg;
    size_t *off;
    int *len;
    long *line;      /* input line of each input */
    char **text;     /* pool none with jsonl, attention: each input's text */
    size_t *text_len;
    int n, cap;
} chunk;

static void chunk_clear(chunk *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->text[i]);
    c->n = 0;
    tfm_ids_clear(&c->ids);
    tfm_buf_clear(&c->seg);
}

static void chunk_free(chunk *c)
{
    chunk_clear(c);
    tfm_ids_free(&c->ids);
    tfm_buf_free(&c->seg);
    free(c->off); free(c->len); free(c->line); free(c->text); free(c->text_len);
}

static void __attribute__((noreturn)) fail_line(app *a, long line, const char *fmt, const char *detail)
{
    fprintf(stderr, "%s: %s:%ld: ", prog, a->in_name, line);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
    exit(1); /* open outputs are removed at exit (base/file.h) */
}

/* Tokenizes one input into the chunk. */
static void add_input(app *a, chunk *c, long line, const char *s, size_t n, const char *b,
                      size_t nb)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->off = tfm_realloc(c->off, sizeof *c->off * c->cap);
        c->len = tfm_realloc(c->len, sizeof *c->len * c->cap);
        c->line = tfm_realloc(c->line, sizeof *c->line * c->cap);
        c->text = tfm_realloc(c->text, sizeof *c->text * c->cap);
        c->text_len = tfm_realloc(c->text_len, sizeof *c->text_len * c->cap);
    }
    size_t from = c->ids.len;
    size_t got = tfm_embed_encode(a->lm.tok, a->scratch, s, n, b, nb,
                                  a->truncate_error ? 0 : (size_t)a->max_len, &c->ids, &c->seg);
    if (got == 0)
        fail_line(a, line, "%s", "an empty input gives no tokens with this model's tokenizer "
                                 "(no special tokens); --skip-empty skips empty lines");
    if (got > (size_t)a->max_len) {
        if (a->truncate_error) {
            char msg[128];
            snprintf(msg, sizeof msg, "%zu tokens, more than the %d allowed (--max-len; "
                     "--truncate head keeps the first ones)", got, a->max_len);
            fail_line(a, line, "%s", msg);
        }
        a->n_truncated++; /* already cut */
    }
    int i = c->n++;
    c->off[i] = from;
    c->len[i] = (int)(c->ids.len - from);
    c->line[i] = line;
    c->text[i] = tfm_strndup(s, n);
    c->text_len[i] = n;
    a->n_tokens += c->len[i];
}

/* ---- writing ---- */

static void put_floats(app *a, FILE *fp, const float *v, int D, char sep)
{
    for (int i = 0; i < D; i++) {
        if (i)
            fputc(sep, fp);
        fprintf(fp, "%.9g", (double)v[i]);
    }
    (void)a;
}

static void write_vectors(app *a, const chunk *c, const float *vec)
{
    tfm_err err = {0};
    const int D = a->D, none = a->emb.o.pools == TFM_POOL_SET(TFM_POOL_NONE);
    FILE *fp = a->out.fp;
    size_t row = 0;
    for (int i = 0; i < c->n; i++) {
        const int rows = none ? c->len[i] : 1;
        const float *v = vec + row * D;
        switch (a->fmt) {
        case FMT_NPY:
            if (tfm_npy_writer_append(&a->npy, v, (size_t)rows * D, &err) < 0)
                tfm_die(prog, &err);
            if (none) {
                int64_t o = a->rows_written;
                if (tfm_npy_writer_append(&a->offs, &o, 1, &err) < 0)
                    tfm_die(prog, &err);
            }
            break;
        case FMT_RAW:
            if (fwrite(v, sizeof(float), (size_t)rows * D, fp) != (size_t)rows * D)
                tfm_fatal(prog, "%s: write error", a->out_path ? a->out_path : "stdout");
            break;
        case FMT_TSV:
            for (int t = 0; t < rows; t++) {
                if (none)
                    fprintf(fp, "%ld\t%d\t", a->n_inputs + i, t);
                put_floats(a, fp, v + (size_t)t * D, D, '\t');
                fputc('\n', fp);
            }
            break;
        case FMT_JSONL: {
            tfm_buf b = {0};
            if (!none) {
                tfm_buf_puts(&b, "{\"embedding\":[");
                for (int k = 0; k < D; k++) {
                    if (k)
                        tfm_buf_putc(&b, ',');
                    tfm_buf_put_json_double(&b, 9, v[k]);
                }
                tfm_buf_puts(&b, "]}\n");
            } else {
                long *st = tfm_malloc(sizeof(long) * rows), *en = tfm_malloc(sizeof(long) * rows);
                tfm_buf pieces = {0};
                tfm_token_spans(a->lm.tok, c->text[i], c->text_len[i],
                                c->ids.data + c->off[i], (size_t)rows, st, en, &pieces);
                tfm_buf_puts(&b, "{\"tokens\":[");
                const char *p = pieces.data;
                for (int t = 0; t < rows; t++) {
                    size_t pl = strlen(p);
                    tfm_buf_puts(&b, t ? ",{\"token\":" : "{\"token\":");
                    tfm_buf_put_json_string(&b, p, pl);
                    p += pl + 1;
                    tfm_buf_printf(&b, ",\"id\":%u,\"start\":%ld,\"end\":%ld,\"embedding\":[",
                                   c->ids.data[c->off[i] + t], st[t], en[t]);
                    for (int k = 0; k < D; k++) {
                        if (k)
                            tfm_buf_putc(&b, ',');
                        tfm_buf_put_json_double(&b, 9, v[(size_t)t * D + k]);
                    }
                    tfm_buf_puts(&b, "]}");
                }
                tfm_buf_puts(&b, "]}\n");
                tfm_buf_free(&pieces);
                free(st);
                free(en);
            }
            fwrite(b.data, 1, b.len, fp);
            tfm_buf_free(&b);
            break;
        }
        }
        a->rows_written += rows;
        row += (size_t)rows;
    }
}

/* --similarity: inputs 2k and 2k+1 are the pair of one line. */
static void write_similarity(app *a, const chunk *c, const float *vec)
{
    tfm_err err = {0};
    for (int i = 0; i + 1 < c->n; i += 2) {
        double cs = tfm_cosine(vec + (size_t)i * a->D, vec + (size_t)(i + 1) * a->D, a->D);
        if (a->fmt == FMT_NPY) {
            float f = (float)cs;
            if (tfm_npy_writer_append(&a->npy, &f, 1, &err) < 0)
                tfm_die(prog, &err);
        } else if (a->fmt == FMT_RAW) {
            float f = (float)cs;
            fwrite(&f, sizeof f, 1, a->out.fp);
        } else if (a->fmt == FMT_JSONL) {
            fprintf(a->out.fp, "{\"cosine\":%.9g}\n", cs);
        } else {
            fprintf(a->out.fp, "%.9g\n", cs);
        }
    }
}

/* --search: the nearest stored rows of each input, nearest first. */
static void write_search(app *a, const chunk *c, const float *vec)
{
    uint32_t *row = tfm_malloc(sizeof *row * (size_t)a->top);
    double *cos = tfm_malloc(sizeof *cos * (size_t)a->top);
    tfm_buf b = {0};
    for (int i = 0; i < c->n; i++) {
        int k = tfm_search_top(&a->search, vec + (size_t)i * a->D, a->top, row, cos);
        for (int r = 0; r < k; r++) {
            size_t tl = 0;
            const char *t = tfm_search_text(&a->search, row[r], &tl);
            tfm_buf_clear(&b);
            if (a->fmt == FMT_JSONL) {
                tfm_buf_printf(&b, "{\"line\":%ld,\"row\":%lu,\"cosine\":", c->line[i],
                               (unsigned long)row[r] + 1);
                tfm_buf_put_json_double(&b, 9, cos[r]);
                if (t) {
                    tfm_buf_puts(&b, ",\"text\":");
                    tfm_buf_put_json_string(&b, t, tl);
                }
                tfm_buf_puts(&b, "}\n");
            } else {
                tfm_buf_printf(&b, "%ld\t%lu\t%.9g", c->line[i], (unsigned long)row[r] + 1,
                               cos[r]);
                if (t) {
                    tfm_buf_putc(&b, '\t');
                    tfm_buf_append(&b, t, tl);
                }
                tfm_buf_putc(&b, '\n');
            }
            fwrite(b.data, 1, b.len, a->out.fp);
        }
    }
    tfm_buf_free(&b);
    free(row);
    free(cos);
}

/* FILE with "%d" replaced by the line number. */
static char *att_name(const char *pattern, long line)
{
    const char *pct = strstr(pattern, "%d");
    if (!pct)
        return tfm_strdup(pattern);
    tfm_buf b = {0};
    tfm_buf_append(&b, pattern, (size_t)(pct - pattern));
    tfm_buf_printf(&b, "%ld", line);
    tfm_buf_puts(&b, pct + 2);
    tfm_buf_putc(&b, '\0');
    return b.data;
}

static void xml_text(tfm_buf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': tfm_buf_puts(b, "&lt;"); break;
        case '>': tfm_buf_puts(b, "&gt;"); break;
        case '&': tfm_buf_puts(b, "&amp;"); break;
        case '"': tfm_buf_puts(b, "&quot;"); break;
        case ' ': tfm_buf_puts(b, "\xe2\x90\xa3"); break; /* ␣: a space token stays visible */
        default:
            if ((unsigned char)*s >= 0x20)
                tfm_buf_putc(b, *s);
        }
    }
}

/* The heat map of p [T, T] (rows: queries, columns: keys), token labels
 * on both axes; white 0 to dark blue at the map's largest probability (a
 * fixed scale to 1 leaves a long input's map almost white), each cell's
 * value in its tooltip. */
static void svg_heatmap(tfm_buf *b, const float *p, int T, const char *labels, int layer,
                        int head, long line)
{
    const int cell = T <= 32 ? 20 : T <= 96 ? 10 : 5, font = cell >= 10 ? 11 : 6;
    /* room for the longest label (characters ~ 0.6 em) */
    size_t maxl = 1;
    const char *q = labels;
    for (int t = 0; t < T; t++) {
        size_t l = strlen(q);
        maxl = l > maxl ? l : maxl;
        q += l + 1;
    }
    if (maxl > 24)
        maxl = 24;
    const int margin = (int)(maxl * font * 0.62) + 10, top = margin + 30;
    const int W = margin + T * cell + 80, H = top + T * cell + 20;
    tfm_buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n", W, H, W, H);
    tfm_buf_printf(b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    float pmax = 0;
    for (size_t k = 0; k < (size_t)T * T; k++)
        pmax = p[k] > pmax ? p[k] : pmax;
    const float inv = pmax > 0 ? 1.0f / pmax : 0.0f;
    tfm_buf_printf(b, "<text x=\"%d\" y=\"18\" font-size=\"14\">line %ld, layer %d, head %d "
                      "(rows: queries, columns: keys)</text>\n", 6, line, layer, head);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            float pv = p[(size_t)i * T + j], v = pv * inv;
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            int r = (int)lrintf(255 - v * (255 - 8)), g = (int)lrintf(255 - v * (255 - 48)),
                bl = (int)lrintf(255 - v * (255 - 107));
            tfm_buf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                              "fill=\"#%02x%02x%02x\"><title>%.4f</title></rect>\n",
                           margin + j * cell, top + i * cell, cell, cell, r, g, bl, (double)pv);
        }
    q = labels;
    for (int t = 0; t < T; t++) {
        char lab[100];
        snprintf(lab, sizeof lab, "%.24s", q);
        q += strlen(q) + 1;
        tfm_buf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"%d\" text-anchor=\"end\" "
                          "dominant-baseline=\"middle\">", margin - 4,
                       top + t * cell + cell / 2, font);
        xml_text(b, lab);
        tfm_buf_puts(b, "</text>\n");
        int x = margin + t * cell + cell / 2, y = top - 4;
        tfm_buf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"%d\" text-anchor=\"start\" "
                          "dominant-baseline=\"middle\" transform=\"rotate(-90 %d %d)\">",
                       x, y, font, x, y);
        xml_text(b, lab);
        tfm_buf_puts(b, "</text>\n");
    }
    /* the scale */
    int sx = margin + T * cell + 20;
    for (int k = 0; k <= 10; k++) {
        float v = 1.0f - k / 10.0f;
        int r = (int)lrintf(255 - v * (255 - 8)), g = (int)lrintf(255 - v * (255 - 48)),
            bl = (int)lrintf(255 - v * (255 - 107));
        tfm_buf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"10\" "
                          "fill=\"#%02x%02x%02x\" stroke=\"#ccc\" stroke-width=\"0.5\"/>\n",
                       sx, top + k * 10, r, g, bl);
    }
    tfm_buf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"9\">%.3g</text>\n", sx + 15,
                   top + 8, (double)pmax);
    tfm_buf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"9\">0</text>\n", sx + 15,
                   top + 108);
    tfm_buf_puts(b, "</svg>\n");
}

/* --attention / --attention-svg for input i of the chunk. */
static void write_attention(app *a, const chunk *c, int i)
{
    tfm_err err = {0};
    const int T = c->len[i], L = a->L, NH = a->NH;
    size_t per = (size_t)NH * T * T;
    float *att = tfm_malloc(sizeof(float) * (size_t)L * per);
    const uint8_t *seg = a->pairs ? (const uint8_t *)c->seg.data + c->off[i] : NULL;
    if (tfm_embedder_attention(&a->emb, c->ids.data + c->off[i], seg, T, att, NULL, &err) < 0)
        fail_line(a, c->line[i], "%s", err.msg);
    if (a->att_npy) {
        int l0 = a->att_layer ? a->att_layer - 1 : 0, l1 = a->att_layer ? a->att_layer : L;
        int h0 = a->att_head >= 0 ? a->att_head : 0, h1 = a->att_head >= 0 ? a->att_head + 1 : NH;
        size_t shape[4] = {(size_t)(l1 - l0), (size_t)(h1 - h0), (size_t)T, (size_t)T};
        float *sel = tfm_malloc(sizeof(float) * shape[0] * shape[1] * T * T), *d = sel;
        for (int l = l0; l < l1; l++)
            for (int h = h0; h < h1; h++, d += (size_t)T * T)
                memcpy(d, att + (size_t)l * per + (size_t)h * T * T, sizeof(float) * T * T);
        char *name = att_name(a->att_npy, c->line[i]);
        if (tfm_npy_write(name, TFM_NPY_F32, 4, shape, sel, &err) < 0)
            tfm_die(prog, &err);
        free(name);
        free(sel);
    }
    if (a->att_svg) {
        int l = a->att_layer ? a->att_layer : L, h = a->att_head >= 0 ? a->att_head : 0;
        long *st = tfm_malloc(sizeof(long) * T), *en = tfm_malloc(sizeof(long) * T);
        tfm_buf labels = {0}, svg = {0};
        tfm_token_spans(a->lm.tok, c->text[i], c->text_len[i], c->ids.data + c->off[i],
                        (size_t)T, st, en, &labels);
        svg_heatmap(&svg, att + (size_t)(l - 1) * per + (size_t)h * T * T, T, labels.data, l,
                    h, c->line[i]);
        char *name = att_name(a->att_svg, c->line[i]);
        if (tfm_write_file(name, svg.data, svg.len, &err) < 0)
            tfm_die(prog, &err);
        free(name);
        tfm_buf_free(&labels);
        tfm_buf_free(&svg);
        free(st);
        free(en);
    }
    free(att);
}

static void run_chunk(app *a, chunk *c)
{
    if (!c->n)
        return;
    tfm_err err = {0};
    const int none = a->emb.o.pools == TFM_POOL_SET(TFM_POOL_NONE);
    size_t rows = none ? c->ids.len : (size_t)c->n;
    float *vec = tfm_aligned_alloc(sizeof(float) * (rows ? rows : 1) * a->D);
    tfm_embed_input in = {.n = c->n, .tok = c->ids.data,
                          .seg = a->pairs ? (const uint8_t *)c->seg.data : NULL,
                          .off = c->off, .len = c->len};
    if (tfm_embedder_run(&a->emb, &in, vec, &err) < 0)
        tfm_die(prog, &err);
    /* a diverged model's vectors are NaN: an error, not numbers (nor the
     * cosine 0 of a zero vector) */
    for (int i = 0, row = 0; i < c->n; i++) {
        const int nr = none ? c->len[i] : 1;
        for (size_t j = (size_t)row * a->D; j < (size_t)(row + nr) * a->D; j++)
            if (!isfinite(vec[j]))
                fail_line(a, c->line[i], "%s", isnan(vec[j])
                          ? "the model produced NaN: its weights are not finite "
                            "(a diverged training run?)"
                          : "the model produced an infinite value");
        row += nr;
    }
    if (a->att_npy || a->att_svg)
        for (int i = 0; i < c->n; i++)
            write_attention(a, c, i);
    if (a->matrix) {
        a->all = tfm_realloc(a->all, sizeof(float) * (a->n_all + (size_t)c->n) * a->D);
        memcpy(a->all + a->n_all * a->D, vec, sizeof(float) * (size_t)c->n * a->D);
        a->n_all += (size_t)c->n;
    } else if (a->similarity) {
        write_similarity(a, c, vec);
    } else if (a->search_path) {
        write_search(a, c, vec);
    } else {
        write_vectors(a, c, vec);
    }
    a->n_inputs += c->n;
    free(vec);
    chunk_clear(c);
}

static void write_matrix(app *a)
{
    tfm_err err = {0};
    size_t N = a->n_all;
    float *m = tfm_malloc(sizeof(float) * (N ? N * N : 1));
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < N; j++)
            m[i * N + j] = (float)tfm_cosine(a->all + i * a->D, a->all + j * a->D, a->D);
    if (a->fmt == FMT_NPY) {
        size_t shape[2] = {N, N};
        if (tfm_npy_write(a->out_path ? a->out_path : "-", TFM_NPY_F32, 2, shape, m, &err) < 0)
            tfm_die(prog, &err);
    } else if (a->fmt == FMT_RAW) {
        fwrite(m, sizeof(float), N * N, a->out.fp);
    } else {
        for (size_t i = 0; i < N; i++) {
            if (a->fmt == FMT_JSONL)
                fputc('[', a->out.fp);
            put_floats(a, a->out.fp, m + i * N, (int)N, a->fmt == FMT_JSONL ? ',' : '\t');
            fputs(a->fmt == FMT_JSONL ? "]\n" : "\n", a->out.fp);
        }
    }
    free(m);
}

/* Whether any block matrix is stored 8-bit: what --q8-gemm is about. */
static int has_q8(const tfm_weights *w)
{
    for (int s = 0; s < 2; s++) {
        const tfm_layer_weights *L = s ? w->enc_layers : w->layers;
        for (int l = 0, n = s ? w->n_enc_layer : w->n_layer; l < n; l++) {
            const tfm_matrix *m[] = {&L[l].qkv_w, &L[l].proj_w, &L[l].fc_w, &L[l].fc1_w,
                                     &L[l].fcp_w};
            for (size_t i = 0; i < sizeof m / sizeof *m; i++)
                if (m[i]->dtype == TFM_WEIGHTS_Q8_0)
                    return 1;
        }
    }
    return 0;
}

static out_format format_of(const char *s, int *ok)
{
    *ok = 1;
    if (!strcmp(s, "npy")) return FMT_NPY;
    if (!strcmp(s, "tsv")) return FMT_TSV;
    if (!strcmp(s, "jsonl")) return FMT_JSONL;
    if (!strcmp(s, "raw")) return FMT_RAW;
    *ok = 0;
    return FMT_NPY;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

int main(int argc, char **argv)
{
    tfm_main_start(prog);
    argv[0] = (char *)prog;
    const char *model = NULL, *adapter = NULL, *layers = NULL, *weights = NULL, *pool = NULL, *format = NULL;
    unsigned pool_set = 0;
    double gamma = 1.0;
    int normalize = 0, threads = 0, max_len = 0, max_tokens = 4096, chunk_lines = 1024;
    int gamma_set = 0;
    const char *q8_gemm = NULL, *search_text = NULL;
    long att_layer = 0, att_head = -1;
    int top_set = 0;
    app a = {.att_head = -1, .top = 10};
    int c;
    while ((c = getopt_long(argc, argv, "m:o:f:qh", long_opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case OPT_ADAPTER: adapter = optarg; break;
        case OPT_LAYERS: layers = optarg; break;
        case OPT_LAYER_WEIGHTS: weights = optarg; break;
        case OPT_GAMMA:
            gamma = tfm_opt_double(prog, "--gamma", optarg, -1e6, 1e6);
            gamma_set = 1;
            break;
        case OPT_POOL: {
            tfm_err perr = {0};
            if (tfm_pool_set_parse(optarg, &pool_set, &perr) < 0)
                tfm_usage_error(prog, "--pool %s", perr.msg);
            pool = optarg;
            break;
        }
        case OPT_NORMALIZE: normalize = 1; break;
        case 'o': a.out_path = optarg; break;
        case 'f': {
            int ok;
            format_of(optarg, &ok);
            if (!ok)
                tfm_usage_error(prog, "--format '%s': expected npy, tsv, jsonl or raw", optarg);
            format = optarg;
            break;
        }
        case OPT_OFFSETS: a.offsets_path = optarg; break;
        case OPT_SIMILARITY: a.similarity = 1; break;
        case OPT_MATRIX: a.matrix = 1; break;
        case OPT_SEARCH: a.search_path = optarg; break;
        case OPT_TOP:
            a.top = (int)tfm_opt_long(prog, "--top", optarg, 1, 1 << 24);
            top_set = 1;
            break;
        case OPT_SEARCH_TEXT: search_text = optarg; break;
        case OPT_ATTENTION: a.att_npy = optarg; break;
        case OPT_ATTENTION_SVG: a.att_svg = optarg; break;
        case OPT_ATT_LAYER:
            att_layer = tfm_opt_long(prog, "--attention-layer", optarg, -1000, 1000);
            if (!att_layer)
                tfm_usage_error(prog, "--attention-layer counts blocks from 1 (or -1 from the "
                                      "top); layer 0 has no attention");
            a.att_layer_set = 1;
            break;
        case OPT_ATT_HEAD:
            att_head = tfm_opt_long(prog, "--attention-head", optarg, 0, 1 << 20);
            a.att_head_set = 1;
            break;
        case OPT_MAX_LEN: max_len = (int)tfm_opt_long(prog, "--max-len", optarg, 1, 1 << 24); break;
        case OPT_TRUNCATE:
            if (!strcmp(optarg, "error"))
                a.truncate_error = 1;
            else if (strcmp(optarg, "head"))
                tfm_usage_error(prog, "--truncate '%s': expected head or error", optarg);
            break;
        case OPT_SKIP_EMPTY: a.skip_empty = 1; break;
        case OPT_MAX_TOKENS:
            max_tokens = (int)tfm_opt_long(prog, "--max-tokens", optarg, 1, 1 << 24);
            break;
        case OPT_CHUNK: chunk_lines = (int)tfm_opt_long(prog, "--chunk", optarg, 1, 1 << 20); break;
        case OPT_THREADS: threads = (int)tfm_opt_long(prog, "--threads", optarg, 1, 1024); break;
        case OPT_Q8_GEMM:
            tfm_fwd_q8_option(prog, optarg);
            q8_gemm = optarg;
            break;
        case 'q': a.quiet = 1; break;
        case 'h': usage();
        case OPT_VERSION: tfm_print_version(prog);
        default: tfm_usage_hint(prog, argv, long_opts);
        }
    }
    if (!model)
        tfm_usage_error(prog, "no model given (-m MODEL)");
    if (optind < argc - 1)
        tfm_usage_error(prog, "one input file at most ('%s' and '%s' given)", argv[optind],
                        argv[optind + 1]);
    const char *in_path = optind < argc ? argv[optind] : "-";
    if (layers && weights)
        tfm_usage_error(prog, "--layers and --layer-weights exclude each other");
    if (gamma_set && !weights)
        tfm_usage_error(prog, "--gamma applies to --layer-weights");
    if (a.similarity + a.matrix + !!a.search_path > 1)
        tfm_usage_error(prog, "--similarity, --matrix and --search exclude each other");
    if ((top_set || search_text) && !a.search_path)
        tfm_usage_error(prog, "--top and --search-text apply to --search");
    const int pool_none = pool && pool_set == TFM_POOL_SET(TFM_POOL_NONE);
    const char *compare = a.similarity ? "similarity" : a.matrix ? "matrix" : "search";
    if ((a.similarity || a.matrix || a.search_path) && pool_none)
        tfm_usage_error(prog, "--%s compares one vector per input: not with --pool none",
                        compare);
    if ((a.att_layer_set || a.att_head_set) && !a.att_npy && !a.att_svg)
        tfm_usage_error(prog, "--attention-layer and --attention-head need --attention or "
                              "--attention-svg");
    if (a.offsets_path && !pool_none)
        tfm_usage_error(prog, "--offsets applies to --pool none");
    int ok = 1;
    if (format)
        a.fmt = format_of(format, &ok);
    else if (a.out_path)
        a.fmt = ends_with(a.out_path, ".tsv") || ends_with(a.out_path, ".txt") ? FMT_TSV
                : ends_with(a.out_path, ".jsonl") ? FMT_JSONL
                : ends_with(a.out_path, ".f32") || ends_with(a.out_path, ".raw") ? FMT_RAW
                : FMT_NPY;
    else if (a.similarity || a.matrix || a.search_path)
        a.fmt = FMT_TSV; /* numbers to read */
    if (a.search_path && (a.fmt == FMT_NPY || a.fmt == FMT_RAW))
        tfm_usage_error(prog, "--search writes lines: --format tsv or jsonl");
    /* validate the attention file names: one file, or one per line */
    const char *att_files[2] = {a.att_npy, a.att_svg};
    for (int k = 0; k < 2; k++)
        if (att_files[k]) {
            const char *p = strchr(att_files[k], '%');
            if (p && (strncmp(p, "%d", 2) || strchr(p + 2, '%')))
                tfm_usage_error(prog, "%s: the only pattern allowed in an attention file "
                                      "name is one %%d", att_files[k]);
        }

    tfm_blas_init(tfm_opt_threads(prog, "--threads", threads));
    tfm_err err = {0};
    if (tfm_lm_open_adapter(&a.lm, model, adapter, &err) < 0)
        tfm_die(prog, &err);
    if (q8_gemm && strcmp(q8_gemm, "auto") && !has_q8(&a.lm.w) && !a.quiet)
        fprintf(stderr, "%s: warning: --q8-gemm %s does nothing: %s has no 8-bit (q8_0) "
                "matrices\n", prog, q8_gemm, model);
    if (tfm_model_unchecked(model) && !a.quiet)
        fprintf(stderr, "%s: warning: %s has no checksum: its integrity is not checked\n", prog,
                model);
    if (!a.lm.tok)
        tfm_fatal(prog, "%s has no tokenizer: tfm-embed reads text", model);
    a.scratch = tfm_tok_scratch_new(a.lm.tok);
    const tfm_model_config *cfg = &a.lm.cfg;
    a.L = tfm_embedder_layers(cfg);
    a.NH = cfg->n_head;
    const tfm_tok_specials *sp = tfm_tokenizer_specials(a.lm.tok);
    a.pairs = cfg->n_segments >= 2 && sp->cls >= 0 && sp->sep >= 0;

    tfm_embed_opts o;
    tfm_embed_opts_default(&o, cfg);
    o.max_tokens = max_tokens;
    int st_max_len = 0; /* sentence-transformers' max_seq_length */
    if (tfm_is_dir(model)) {
        unsigned p = o.pools;
        int nz = 0;
        int st = tfm_embed_st_defaults(model, &p, &nz, &st_max_len, &err);
        if (st < 0)
            tfm_die(prog, &err);
        if (st > 0) {
            o.pools = p;
            o.normalize = nz;
        }
    }
    if (pool)
        o.pools = pool_set;
    const int none = o.pools == TFM_POOL_SET(TFM_POOL_NONE);
    if (normalize)
        o.normalize = 1;
    /* valid options the model cannot honour: failures (1), not usage (2) */
    if (layers) {
        int rc = tfm_layer_sel_parse(&o.layers, layers, a.L, &err);
        if (rc == -2)
            tfm_usage_error(prog, "--layers %s", err.msg);
        if (rc < 0)
            tfm_fatal(prog, "%s: --layers %s", model, err.msg);
    }
    if (weights) {
        float s[TFM_LAYER_SEL_MAX];
        int n = 0;
        const char *p = weights;
        for (;;) {
            char *end;
            double v = strtod(p, &end);
            if (end == p || n == TFM_LAYER_SEL_MAX || !isfinite(v))
                tfm_usage_error(prog, "--layer-weights '%s': expected numbers separated by "
                                      "commas", weights);
            s[n++] = (float)v;
            if (*end == 0)
                break;
            if (*end != ',')
                tfm_usage_error(prog, "--layer-weights '%s': expected numbers separated by "
                                      "commas", weights);
            p = end + 1;
        }
        if (tfm_layer_sel_elmo(&o.layers, s, n, (float)gamma, a.L, &err) < 0)
            tfm_fatal(prog, "%s: --layer-weights: %s", model, err.msg);
    }
    if (a.att_layer_set) {
        if (att_layer > a.L || att_layer < -a.L)
            tfm_fatal(prog, "%s: --attention-layer %ld is out of range: the model has blocks "
                            "1 to %d (-1 to -%d from the top)", model, att_layer, a.L, a.L);
        a.att_layer = att_layer < 0 ? a.L + 1 + (int)att_layer : (int)att_layer;
    }
    if (a.att_head_set) {
        if (att_head >= a.NH)
            tfm_fatal(prog, "%s: --attention-head %ld is out of range: the model has heads "
                            "0 to %d", model, att_head, a.NH - 1);
        a.att_head = (int)att_head;
    }
    if (a.offsets_path == NULL && none && a.fmt == FMT_NPY &&
        !a.similarity && !a.matrix) {
        if (!a.out_path || !strcmp(a.out_path, "-"))
            tfm_usage_error(prog, "--pool none writes npy vectors and their offsets: give -o "
                                  "FILE.npy (or --offsets FILE)");
    }
    if (none && (a.similarity || a.matrix || a.search_path))
        tfm_usage_error(prog, "--%s compares one vector per input: the model folder's pooling "
                              "is none; give --pool", compare);
    /* the longest input: the model's context unless --max-len says less */
    int ctx = cfg->block_size;
    a.max_len = max_len ? max_len : st_max_len && st_max_len < ctx ? st_max_len : ctx;
    if (cfg->pos == TFM_POS_LEARNED && a.max_len > ctx)
        tfm_fatal(prog, "%s: --max-len %d is longer than the model's context (%d learned "
                        "positions)", model, a.max_len, ctx);
    if (tfm_embedder_init(&a.emb, cfg, &a.lm.w, &o, &err) < 0)
        tfm_die(prog, &err);
    a.D = a.emb.W; /* the output's width: k x D for k pooling modes */
    if (a.search_path) {
        if (tfm_search_open(&a.search, a.search_path, &err) < 0)
            tfm_die(prog, &err);
        if (a.search.d != a.D)
            tfm_fatal(prog, "%s: %d-wide vectors, but %s gives %d-wide ones (%s): embed the "
                            "corpus with the same model, layers and pooling", a.search_path,
                      a.search.d, model, a.D, tfm_pool_set_name(o.pools, (char[64]){0}, 64));
        if (search_text && tfm_search_texts(&a.search, search_text, &err) < 0)
            tfm_die(prog, &err);
    }

    /* the input, then the outputs (temporary files until the end) */
    a.in_name = strcmp(in_path, "-") ? in_path : "<stdin>";
    FILE *in = strcmp(in_path, "-") ? fopen(in_path, "rb") : stdin;
    if (!in)
        tfm_fatal(prog, "%s: %s", in_path, strerror(errno));
    const char *out_path = a.out_path ? a.out_path : "-";
    if (a.fmt == FMT_NPY && a.matrix) {
        /* written whole at the end (tfm_npy_write is atomic) */
    } else if (a.fmt == FMT_NPY) { /* never with --search */
        size_t row = a.similarity ? 0 : (size_t)a.D;
        if (tfm_npy_writer_open(&a.npy, out_path, TFM_NPY_F32, row, &err) < 0)
            tfm_die(prog, &err);
        if (none) {
            char *op = NULL;
            if (!a.offsets_path) {
                size_t n = strlen(out_path);
                if (ends_with(out_path, ".npy"))
                    n -= 4;
                op = tfm_malloc(n + 13);
                snprintf(op, n + 13, "%.*s.offsets.npy", (int)n, out_path);
            }
            if (tfm_npy_writer_open(&a.offs, a.offsets_path ? a.offsets_path : op, TFM_NPY_I64, 0,
                                    &err) < 0)
                tfm_die(prog, &err);
            free(op);
        }
    } else if (tfm_out_open(&a.out, out_path, &err) < 0) {
        tfm_die(prog, &err);
    }
    tfm_out_install_signals();

    chunk ch = {0};
    tfm_buf line = {0};
    long lineno = 0;
    int r;
    while ((r = tfm_getline(in, &line)) > 0) {
        lineno++;
        if (line.len && line.data[line.len - 1] == '\r')
            line.len--;
        const char *s = line.data ? line.data : "";
        if (!tfm_utf8_valid((const unsigned char *)s, line.len))
            fail_line(&a, lineno, "%s", "invalid UTF-8");
        if (line.len == 0 && a.skip_empty) {
            a.n_skipped++;
            continue;
        }
        const char *tab = memchr(s, '\t', line.len);
        if (a.similarity) {
            if (!tab)
                fail_line(&a, lineno, "%s", "--similarity compares the two sides of "
                                            "\"A<TAB>B\": no tab in this line");
            add_input(&a, &ch, lineno, s, (size_t)(tab - s), NULL, 0);
            add_input(&a, &ch, lineno, tab + 1, line.len - (size_t)(tab - s) - 1, NULL, 0);
        } else if (tab && a.pairs) {
            add_input(&a, &ch, lineno, s, (size_t)(tab - s), tab + 1,
                      line.len - (size_t)(tab - s) - 1);
        } else {
            add_input(&a, &ch, lineno, s, line.len, NULL, 0);
        }
        if (ch.n > 1 && (a.att_npy || a.att_svg)) {
            for (int k = 0; k < 2; k++)
                if (att_files[k] && !strstr(att_files[k], "%d"))
                    fail_line(&a, lineno, "%s", "a second input: one attention file holds one "
                                                "input (put %d in the name for one a line)");
        }
        if (ch.n >= chunk_lines)
            run_chunk(&a, &ch);
    }
    if (r < 0 || ferror(in))
        tfm_fatal(prog, "%s: read error", a.in_name);
    run_chunk(&a, &ch);
    if (a.matrix)
        write_matrix(&a);
    if (a.fmt == FMT_NPY && a.matrix) {
        /* written by write_matrix */
    } else if (a.fmt == FMT_NPY) {
        if (tfm_npy_writer_commit(&a.npy, &err) < 0)
            tfm_die(prog, &err);
        if (none) {
            int64_t end = a.rows_written;
            if (tfm_npy_writer_append(&a.offs, &end, 1, &err) < 0 ||
                tfm_npy_writer_commit(&a.offs, &err) < 0)
                tfm_die(prog, &err);
        }
    } else if (tfm_out_commit(&a.out, &err) < 0) {
        tfm_die(prog, &err);
    }
    if (!a.quiet) {
        char pool_name[64];
        if (a.n_truncated)
            fprintf(stderr, "%s: %ld input%s cut to %d tokens (--max-len)\n", prog,
                    a.n_truncated, a.n_truncated == 1 ? "" : "s", a.max_len);
        if (a.n_skipped)
            fprintf(stderr, "%s: %ld empty line%s skipped\n", prog, a.n_skipped,
                    a.n_skipped == 1 ? "" : "s");
        fprintf(stderr, "%s: %ld input%s, %ld tokens, %d-wide vectors (layers %s, pool %s%s)\n",
                prog, a.n_inputs, a.n_inputs == 1 ? "" : "s", a.n_tokens, a.D, weights ? "ELMo mix" : layers ? layers : "last",
                tfm_pool_set_name(o.pools, pool_name, sizeof pool_name),
                o.normalize ? ", normalized" : "");
    }
    if (in != stdin)
        fclose(in);
    tfm_buf_free(&line);
    chunk_free(&ch);
    free(a.all);
    tfm_search_close(&a.search);
    tfm_embedder_free(&a.emb);
    tfm_tok_scratch_free(a.scratch);
    tfm_lm_close(&a.lm);
    return 0;
}
