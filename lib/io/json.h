/* A JSON (and YAML) document tree, parsed with libyaml: JSON is a flow-style
 * YAML document, so tokenizer.json, safetensors headers and YAML configs all
 * go through one parser, and every node remembers its line and column for
 * error messages ("file:line:col: ...").
 *
 * The document owns every node and string; tfm_json_doc_free releases all. */
#ifndef TFM_IO_JSON_H
#define TFM_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

typedef enum tfm_json_type {
    TFM_JSON_NULL,
    TFM_JSON_BOOL,
    TFM_JSON_NUMBER,
    TFM_JSON_STRING,
    TFM_JSON_ARRAY,
    TFM_JSON_OBJECT,
} tfm_json_type;

typedef struct tfm_json tfm_json;
struct tfm_json {
    tfm_json_type type;
    long line, col;     /* 1-based position of the node in the source */
    const char *str;    /* STRING: decoded UTF-8 (NUL-terminated, may hold NULs);
                           NUMBER/BOOL/NULL: the scalar's text as written */
    size_t len;         /* length of str in bytes */
    double num;         /* NUMBER */
    int boolean;        /* BOOL */
    size_t n;           /* ARRAY/OBJECT: number of items */
    tfm_json **items;   /* ARRAY/OBJECT: the values, in document order */
    tfm_json **keys;    /* OBJECT: the keys (STRING nodes, with positions) */
};

typedef struct tfm_json_doc {
    tfm_json *root;
    const char *name;   /* file name used in messages (borrowed) */
    void *arena;        /* private */
} tfm_json_doc;

/* Parses text[0..len) (JSON, or YAML when yaml != 0: plain scalars are then
 * typed as YAML 1.2 core schema would: null/true/false/numbers).  With
 * yaml == 0, input that is valid YAML but not JSON is rejected.  `name`
 * appears in error messages as name:line:col.
 *
 * Columns count characters, not bytes.  Duplicate keys are an error in both
 * modes.  In YAML, keys are always STRING nodes (`1:` is the key "1"), an
 * alias shares its anchor's node, and `<<` merge keys are not interpreted.
 * A leading UTF-8 byte order mark is skipped.  On failure doc is left empty
 * (tfm_json_doc_free is still safe). */
int tfm_json_parse(tfm_json_doc *doc, const char *text, size_t len,
                   const char *name, int yaml, tfm_err *err);
/* Reads and parses a file ("-" for stdin). */
int tfm_json_parse_file(tfm_json_doc *doc, const char *path, int yaml, tfm_err *err);
void tfm_json_doc_free(tfm_json_doc *doc);

/* One line of a JSON Lines file: tfm_json_parse in JSON mode, with the
 * error's position given as name:line:col (the line in the file, not 1).
 * The nodes' own line fields stay relative to the line (1). */
int tfm_json_parse_line(tfm_json_doc *doc, const char *text, size_t len, const char *name,
                        long line, tfm_err *err);

/* Object member by key, or NULL (also NULL when obj is not an object). */
const tfm_json *tfm_json_get(const tfm_json *obj, const char *key);

/* Typed accessors that fail with "name:line:col: <what> must be ..." */
int tfm_json_expect(const tfm_json_doc *doc, const tfm_json *node,
                    tfm_json_type type, const char *what, tfm_err *err);
int tfm_json_get_int(const tfm_json_doc *doc, const tfm_json *node, const char *what,
                     int64_t min, int64_t max, int64_t *out, tfm_err *err);

const char *tfm_json_type_name(tfm_json_type t);

/* Appends the tree as compact JSON.  Scalars other than strings are written
 * as their source text, so a tree parsed in JSON mode reads back the same. */
void tfm_json_write(tfm_buf *b, const tfm_json *j);

#endif
