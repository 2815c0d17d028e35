#include "train/init.h"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "io/config.h"
#include "model/file.h"

/* Appends ", name" (or the first "name") to a list, ending it with "..."
 * once it is full. */
static void list_add(char *buf, size_t size, int *n, const char *name)
{
    size_t len = strlen(buf);
    if (len + strlen(name) + 8 >= size) {
        if (len + 5 < size && !strstr(buf, "..."))
            strcat(buf, ", ...");
        (*n)++;
        return;
    }
    snprintf(buf + len, size - len, "%s%s", *n ? ", " : "", name);
    (*n)++;
}

int tfm_train_init_from(tfm_model *m, const char *path, char *report, size_t size,
                        tfm_err *err)
{
    tfm_config c;
    tfm_model src;
    if (tfm_model_load(path, &c, &src, NULL, err) < 0)
        return tfm_err_prefix(err, "train.init");
    char fresh[400] = "", unused[400] = "";
    int loaded = 0, n_fresh = 0, n_unused = 0;
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        const tfm_param *q = tfm_model_param(&src, p->name);
        if (q && q->shape[0] == p->shape[0] && q->shape[1] == p->shape[1]) {
            memcpy(m->params + p->offset, src.params + q->offset, p->numel * sizeof(float));
            loaded++;
        } else {
            list_add(fresh, sizeof fresh, &n_fresh, p->name);
        }
    }
    for (int i = 0; i < src.n_table; i++) {
        const tfm_param *q = &src.table[i];
        const tfm_param *p = tfm_model_param(m, q->name);
        if (!p || p->shape[0] != q->shape[0] || p->shape[1] != q->shape[1])
            list_add(unused, sizeof unused, &n_unused, q->name);
    }
    tfm_model_free(&src);
    if (!loaded)
        return tfm_err_set(err, "train.init: %s has no tensor of this model's names and shapes",
                           path);
    snprintf(report, size, "initialised from %s: %d tensors loaded; %d new%s%s; %d unused%s%s",
             path, loaded, n_fresh, n_fresh ? ": " : "", fresh, n_unused,
             n_unused ? ": " : "", unused);
    return 0;
}
