/* Few-shot prompts, as GPT-3 evaluates (Brown et al. 2020, section 2.4):
 * K demonstrations, each an item's context followed by its correct
 * completion, separated by a blank line, then a blank line and the item's
 * own context; the scoring of the item is unchanged.
 *
 *     tfm_fewshot f;
 *     tfm_fewshot_init(&f, 2, seed, 1);               // 2 shots, from the items
 *     tfm_fewshot_read(&f, data, len, 1, "items.jsonl", &err);  // choice JSONL
 *     tfm_fewshot_check(&f, "items.jsonl", &err);     // enough demonstrations?
 *     size_t pick[2];
 *     tfm_fewshot_pick(&f, i, pick);                  // item i's demonstrations
 *     tfm_fewshot_prompt(&f, pick, &prefix);          // "d1\n\nd2\n\n"
 *     tfm_fewshot_free(&f);
 *
 * Demonstrations: a choice item {"context", "endings", "label"} gives
 * context + endings[label]; a lastword passage gives itself (blank lines
 * are skipped, as the commands skip them, so demonstration i is item i when
 * they come from the evaluated data).  Item i's K demonstrations are drawn
 * without replacement from a generator seeded by (seed, i), never item i
 * itself when they come from the same data: the same seed gives the same
 * prompts whatever else runs.
 *
 * Ownership: tfm_fewshot owns the demonstrations' text. */
#ifndef TFM_DATA_FEWSHOT_H
#define TFM_DATA_FEWSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

typedef struct tfm_fewshot {
    int k;                 /* demonstrations per item */
    uint64_t seed;
    int same;              /* the demonstrations are the items: skip item i */
    tfm_buf text;          /* the demonstrations one after another */
    size_t *off, *len;     /* [n] */
    size_t n, cap;
} tfm_fewshot;

void tfm_fewshot_init(tfm_fewshot *f, int k, uint64_t seed, int same);
void tfm_fewshot_free(tfm_fewshot *f);
void tfm_fewshot_add(tfm_fewshot *f, const char *a, size_t na, const char *b, size_t nb);
/* Adds the demonstrations of data[0..len): choice JSONL (choice != 0) or
 * lastword passages.  Errors name the file (name), line and column. */
int tfm_fewshot_read(tfm_fewshot *f, const char *data, size_t len, int choice, const char *name,
                     tfm_err *err);
/* An error when fewer than k demonstrations are available to each item. */
int tfm_fewshot_check(const tfm_fewshot *f, const char *name, tfm_err *err);
/* Item's k demonstration indices, in the order they are shown. */
void tfm_fewshot_pick(const tfm_fewshot *f, size_t item, size_t *pick);
/* Appends the demonstrations pick[0..k), each followed by a blank line. */
void tfm_fewshot_prompt(const tfm_fewshot *f, const size_t *pick, tfm_buf *out);

#endif
