/* The configuration schema engine: one typed key table drives everything.
 *
 * Every key ("model.n_layer") has a type, a default, a range or a list of
 * choices, a line of documentation, and the offset of its field in the
 * struct the schema fills.  The same table parses YAML files (unknown or
 * mistyped keys are errors with file:line:col and a "did you mean" hint),
 * applies `--set key=value` overrides, prints the values back as YAML
 * (--dump-config), and lists the keys so that a test can check that
 * man/tfm-config.5 documents every one of them.
 *
 * The engine knows no key: the tables belong to the parts that own the
 * fields, and the layer that sees them all joins them (train/run_config.h
 * assembles tfm-train's).  Precedence is the order of the calls:
 * tfm_schema_defaults, then tfm_schema_load_yaml, then tfm_schema_set for
 * each override. */
#ifndef TFM_IO_SCHEMA_H
#define TFM_IO_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

/* STRING fields are char arrays of this size. */
#define TFM_SCHEMA_STRING_MAX 1024

typedef enum tfm_schema_type {
    TFM_SCHEMA_INT,    /* int64_t */
    TFM_SCHEMA_FLOAT,  /* double */
    TFM_SCHEMA_BOOL,   /* int, 0 or 1 */
    TFM_SCHEMA_STRING, /* char[TFM_SCHEMA_STRING_MAX] */
    TFM_SCHEMA_ENUM,   /* int: index into `choices` */
} tfm_schema_type;

typedef struct tfm_schema_key {
    const char *path;      /* "section.name" */
    tfm_schema_type type;
    size_t offset;         /* of the field in the struct the schema fills */
    const char *def;       /* default, as YAML text */
    double min, max;       /* INT and FLOAT, inclusive */
    const char *choices;   /* ENUM: "pre|post" (index = enum value) */
    const char *doc;       /* one line for --dump-config and the man page */
} tfm_schema_key;

/* A long name people type for a short key ("learning_rate": "optim.lr"). */
typedef struct tfm_schema_alias {
    const char *name, *key;
} tfm_schema_alias;

typedef struct tfm_schema {
    const tfm_schema_key *keys; /* in the order tfm_schema_dump prints them */
    size_t n;
    size_t size;                /* of the struct the schema fills */
    size_t given_offset;        /* of its unsigned char given[n] */
    const char *sections;       /* for errors: "model, data or train" */
    const tfm_schema_alias *aliases;
    size_t n_aliases;
    /* 1: tfm_schema_apply_yaml skips the keys and sections it does not
     * know, for a part that reads its own keys of a document that holds
     * other owners' too (a model file's recorded configuration). */
    int skip_unknown;
} tfm_schema;

/* One owner's table, its offsets relative to its own struct, which sits at
 * `base` in the struct the joined schema fills. */
typedef struct tfm_schema_part {
    const tfm_schema_key *keys;
    size_t n;
    size_t base;
} tfm_schema_part;

/* Copies the parts' keys, in order, into dst (room for cap), each offset
 * moved by its part's base, so that owners declared apart make one table.
 * Returns the number of keys; more than cap is a programming error. */
size_t tfm_schema_join(tfm_schema_key *dst, size_t cap, const tfm_schema_part *parts,
                       size_t n_parts);

const tfm_schema_key *tfm_schema_find(const tfm_schema *s, const char *path);

/* Zeroes the struct, then stores every key's default. */
void tfm_schema_defaults(const tfm_schema *s, void *c);

/* Applies the keys present in a YAML document (sections as mappings:
 * `model: {n_layer: 4}`); keys absent keep their current value.  Errors name
 * name:line:col.  tfm_schema_load_yaml reads a file ("-": stdin). */
int tfm_schema_apply_yaml(const tfm_schema *s, void *c, const char *text, size_t len,
                          const char *name, tfm_err *err);
int tfm_schema_load_yaml(const tfm_schema *s, void *c, const char *path, tfm_err *err);

/* One override "section.key=value"; the value is read as the key's type. */
int tfm_schema_set(const tfm_schema *s, void *c, const char *assignment, tfm_err *err);

/* Appends the values as YAML; with comments != 0 each key carries its
 * documentation as a comment.  The output parses back to the same values. */
void tfm_schema_dump(const tfm_schema *s, const void *c, int comments, tfm_buf *out);

/* Whether a file or --set gave the key (path must be a key). */
int tfm_schema_given(const tfm_schema *s, const void *c, const char *path);

/* The closest key to a misspelt one (NULL when nothing is close). */
const char *tfm_schema_suggest(const tfm_schema *s, const char *path);

/* Enum value name, e.g. ("model.norm", 0) = "pre"; NULL if none. */
const char *tfm_schema_choice_name(const tfm_schema *s, const char *path, int value, char *buf,
                                   size_t size);

#endif
