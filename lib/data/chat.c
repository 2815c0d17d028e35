/* Instruction data and the ChatML template (data/chat.h). */
#include "data/chat.h"

#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "io/json.h"
#include "text/utf8.h"

const char tfm_chat_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char START[] = "<|im_start|>", END[] = "<|im_end|>";

void tfm_chat_render(const tfm_chat_msg *msg, size_t n, int add_generation_prompt,
                     tfm_buf *out, size_t *spans, size_t *n_spans)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        tfm_buf_puts(out, START);
        tfm_buf_puts(out, msg[i].role);
        tfm_buf_putc(out, '\n');
        size_t at = out->len;
        tfm_buf_puts(out, msg[i].content);
        tfm_buf_puts(out, END);
        if (spans && !strcmp(msg[i].role, "assistant")) {
            spans[2 * k] = at;
            spans[2 * k + 1] = out->len;
            k++;
        }
        tfm_buf_putc(out, '\n');
    }
    if (add_generation_prompt) {
        tfm_buf_puts(out, START);
        tfm_buf_puts(out, "assistant\n");
    }
    if (n_spans)
        *n_spans = k;
}

void tfm_chat_render_prompt(const char *prompt, size_t len, tfm_buf *out)
{
    tfm_buf_puts(out, START);
    tfm_buf_puts(out, "user\n");
    tfm_buf_append(out, prompt, len);
    tfm_buf_puts(out, END);
    tfm_buf_putc(out, '\n');
    tfm_buf_puts(out, START);
    tfm_buf_puts(out, "assistant\n");
}

/* ---- reading ------------------------------------------------------------ */

static void example_free(tfm_chat_example *e)
{
    free(e->prompt);
    free(e->completion);
    free(e->rejected);
    for (size_t i = 0; i < e->n_msg; i++) {
        free(e->msg[i].role);
        free(e->msg[i].content);
    }
    free(e->msg);
}

void tfm_chat_data_free(tfm_chat_data *d)
{
    for (size_t i = 0; i < d->n; i++)
        example_free(&d->ex[i]);
    free(d->ex);
    memset(d, 0, sizeof *d);
}

/* A string with no NUL (the renderings are C strings). */
static int json_text(const tfm_json *j, const char *name, long line, const char *what,
                     char **out, size_t *len, tfm_err *err)
{
    if (!j || j->type != TFM_JSON_STRING)
        return tfm_err_at(err, name, line, j ? j->col : 0, "%s: expected a string%s", what,
                          j ? "" : " (missing)");
    if (memchr(j->str, 0, j->len))
        return tfm_err_at(err, name, line, j->col, "%s holds a NUL character", what);
    *out = tfm_strndup(j->str, j->len);
    if (len)
        *len = j->len;
    return 0;
}

/* The messages of array a appended to e->msg. */
static int read_messages(tfm_chat_example *e, const tfm_json *a, const char *name, long line,
                         const char *what, tfm_err *err)
{
    if (a->type != TFM_JSON_ARRAY || a->n == 0)
        return tfm_err_at(err, name, line, a->col, "%s: expected a non-empty array of "
                          "{\"role\", \"content\"} messages", what);
    e->msg = tfm_realloc(e->msg, (e->n_msg + a->n) * sizeof *e->msg);
    for (size_t i = 0; i < a->n; i++) {
        const tfm_json *m = a->items[i];
        if (m->type != TFM_JSON_OBJECT)
            return tfm_err_at(err, name, line, m->col, "%s[%zu]: expected an object "
                              "{\"role\", \"content\"}", what, i);
        for (size_t k = 0; k < m->n; k++)
            if (strcmp(m->keys[k]->str, "role") && strcmp(m->keys[k]->str, "content"))
                return tfm_err_at(err, name, line, m->keys[k]->col, "%s[%zu]: unknown key "
                                  "'%s' (a message is {\"role\", \"content\"})", what, i,
                                  m->keys[k]->str);
        tfm_chat_msg *g = &e->msg[e->n_msg];
        g->role = g->content = NULL;
        e->n_msg++;
        char w[64];
        snprintf(w, sizeof w, "%s[%zu].role", what, i);
        if (json_text(tfm_json_get(m, "role"), name, line, w, &g->role, NULL, err) < 0)
            return -1;
        if (!g->role[0])
            return tfm_err_at(err, name, line, m->col, "%s is empty", w);
        snprintf(w, sizeof w, "%s[%zu].content", what, i);
        if (json_text(tfm_json_get(m, "content"), name, line, w, &g->content, NULL, err) < 0)
            return -1;
    }
    return 0;
}

static int read_line(tfm_chat_example *e, const tfm_json *o, const char *name, long line,
                     tfm_err *err)
{
    for (size_t k = 0; k < o->n; k++) {
        const char *key = o->keys[k]->str;
        if (strcmp(key, "prompt") && strcmp(key, "completion") && strcmp(key, "messages"))
            return tfm_err_at(err, name, line, o->keys[k]->col, "unknown key '%s' (expected "
                              "{\"prompt\", \"completion\"} or {\"messages\"})", key);
    }
    const tfm_json *p = tfm_json_get(o, "prompt"), *c = tfm_json_get(o, "completion"),
                   *m = tfm_json_get(o, "messages");
    e->line = line;
    if (m) {
        if (p || c)
            return tfm_err_at(err, name, line, m->col, "\"messages\" with \"prompt\" or "
                              "\"completion\": one format a line");
        e->format = TFM_CHAT_MESSAGES;
        if (read_messages(e, m, name, line, "messages", err) < 0)
            return -1;
        for (size_t i = 0; i < e->n_msg; i++)
            if (!strcmp(e->msg[i].role, "assistant"))
                return 0;
        return tfm_err_at(err, name, line, m->col, "no assistant message: nothing to learn "
                          "(the loss is on the assistant's tokens)");
    }
    if (!p || !c)
        return tfm_err_at(err, name, line, 0, "expected {\"prompt\", \"completion\"} or "
                          "{\"messages\"}; \"%s\" is missing", p ? "completion" : "prompt");
    if (p->type == TFM_JSON_STRING) {
        e->format = TFM_CHAT_PROMPT_COMPLETION;
        if (json_text(p, name, line, "prompt", &e->prompt, &e->prompt_len, err) < 0 ||
            json_text(c, name, line, "completion", &e->completion, &e->completion_len, err) < 0)
            return -1;
        return 0;
    }
    e->format = TFM_CHAT_CONVERSATION;
    if (read_messages(e, p, name, line, "prompt", err) < 0)
        return -1;
    e->n_prompt = e->n_msg;
    return read_messages(e, c, name, line, "completion", err);
}

static int read_pref_line(tfm_chat_example *e, const tfm_json *o, const char *name, long line,
                          tfm_err *err);

static int read_prompt_line(tfm_chat_example *e, const tfm_json *o, const char *name,
                            long line, tfm_err *err)
{
    for (size_t k = 0; k < o->n; k++)
        if (strcmp(o->keys[k]->str, "prompt"))
            return tfm_err_at(err, name, line, o->keys[k]->col, "unknown key '%s' (expected "
                              "{\"prompt\"}: prompts alone, the policy writes the answers)",
                              o->keys[k]->str);
    const tfm_json *p = tfm_json_get(o, "prompt");
    e->line = line;
    e->format = TFM_CHAT_PROMPT;
    if (!p)
        return tfm_err_at(err, name, line, 0, "expected {\"prompt\"}; \"prompt\" is missing");
    if (p->type != TFM_JSON_ARRAY) {
        if (json_text(p, name, line, "prompt", &e->prompt, &e->prompt_len, err) < 0)
            return -1;
        if (!e->prompt_len)
            return tfm_err_at(err, name, line, p->col, "\"prompt\" is empty");
        return 0;
    }
    if (read_messages(e, p, name, line, "prompt", err) < 0)
        return -1;
    e->n_prompt = e->n_msg;
    return 0;
}

int tfm_chat_read(tfm_chat_data *d, const char *text, size_t len, const char *name,
                  int preference, tfm_err *err)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    long bad = tfm_utf8_invalid_line(text, len);
    if (bad)
        return tfm_err_at(err, name, bad, 0, "invalid UTF-8");
    size_t cap = 0, pos = 0;
    long line = 0;
    int rc = 0;
    while (rc == 0 && pos < len) {
        const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        line++;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
            k++;
        if (k == n)
            continue;
        tfm_json_doc doc;
        if (tfm_json_parse_line(&doc, s, n, name, line, err) < 0) {
            tfm_chat_data_free(d);
            return -1;
        }
        if (doc.root->type != TFM_JSON_OBJECT) {
            rc = tfm_err_at(err, name, line, 0, "expected a JSON object, not %s",
                            tfm_json_type_name(doc.root->type));
        } else {
            if (d->n == cap) {
                cap = cap ? 2 * cap : 64;
                d->ex = tfm_realloc(d->ex, cap * sizeof *d->ex);
            }
            memset(&d->ex[d->n], 0, sizeof *d->ex);
            d->n++;
            tfm_chat_example *e = &d->ex[d->n - 1];
            rc = preference == TFM_CHAT_READ_PROMPTS ? read_prompt_line(e, doc.root, name,
                                                                        line, err)
                 : preference ? read_pref_line(e, doc.root, name, line, err)
                              : read_line(e, doc.root, name, line, err);
        }
        tfm_json_doc_free(&doc);
    }
    if (rc == 0 && d->n == 0)
        rc = tfm_err_set(err, "%s: no examples", name);
    if (rc < 0)
        tfm_chat_data_free(d);
    return rc;
}

int tfm_chat_read_file(tfm_chat_data *d, const char *path, int preference, tfm_err *err)
{
    int is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "stdin" : path;
    FILE *fp = is_stdin ? stdin : fopen(path, "rb");
    memset(d, 0, sizeof *d);
    if (!fp)
        return tfm_err_errno(err, "%s", path);
    tfm_buf b = {0};
    int rc = tfm_read_all(fp, name, &b, err);
    if (!is_stdin)
        fclose(fp);
    if (rc == 0)
        rc = tfm_chat_read(d, b.data ? b.data : "", b.len, name, preference, err);
    tfm_buf_free(&b);
    return rc;
}

/* ---- encoding ----------------------------------------------------------- */

static void encode(const tfm_tokenizer *tok, tfm_tok_scratch *sc, const char *s, size_t n,
                   tfm_ids *out)
{
    tfm_ids_clear(out);
    tfm_tokenizer_encode(tok, sc, s, n, 1, out);
}

/* ids = the whole text's; the mask 1 from where the prompt's ids stop
 * being a prefix of them (TRL's common_prefix_length). */
static void prefix_mask(const tfm_ids *prompt, const tfm_ids *ids, tfm_ids *mask)
{
    size_t k = 0;
    while (k < prompt->len && k < ids->len && prompt->data[k] == ids->data[k])
        k++;
    for (size_t i = 0; i < ids->len; i++)
        tfm_ids_push(mask, i >= k);
}

void tfm_chat_encode(const tfm_chat_example *e, const tfm_tokenizer *tok,
                     tfm_tok_scratch *sc, tfm_ids *ids, tfm_ids *mask)
{
    tfm_ids_clear(ids);
    tfm_ids_clear(mask);
    tfm_buf text = {0};
    tfm_ids p = {0};
    if (e->format == TFM_CHAT_PROMPT_COMPLETION) {
        int64_t eos = tfm_tokenizer_specials(tok)->eos;
        size_t el = 0;
        const char *et = eos >= 0 ? tfm_tokenizer_piece(tok, (uint32_t)eos, &el) : NULL;
        tfm_buf_append(&text, e->prompt, e->prompt_len);
        tfm_buf_append(&text, e->completion, e->completion_len);
        if (et && !(e->completion_len >= el &&
                    !memcmp(e->completion + e->completion_len - el, et, el)))
            tfm_buf_append(&text, et, el);
        encode(tok, sc, e->prompt, e->prompt_len, &p);
        encode(tok, sc, text.data, text.len, ids);
        prefix_mask(&p, ids, mask);
    } else if (e->format == TFM_CHAT_CONVERSATION) {
        tfm_buf pt = {0};
        tfm_chat_render(e->msg, e->n_prompt, 1, &pt, NULL, NULL);
        tfm_chat_render(e->msg, e->n_msg, 0, &text, NULL, NULL);
        encode(tok, sc, pt.data, pt.len, &p);
        encode(tok, sc, text.data, text.len, ids);
        prefix_mask(&p, ids, mask);
        tfm_buf_free(&pt);
    } else {
        size_t *spans = tfm_malloc(2 * e->n_msg * sizeof *spans), ns = 0;
        tfm_chat_render(e->msg, e->n_msg, 0, &text, spans, &ns);
        tfm_ids st = {0}, en = {0};
        tfm_tokenizer_encode_spans(tok, sc, text.data, text.len, 1, ids, &st, &en);
        /* a token is the assistant's when it overlaps one of its spans */
        size_t k = 0;
        for (size_t i = 0; i < ids->len; i++) {
            while (k < ns && st.data[i] >= spans[2 * k + 1])
                k++;
            tfm_ids_push(mask, k < ns && en.data[i] > spans[2 * k]);
        }
        tfm_ids_free(&st);
        tfm_ids_free(&en);
        free(spans);
    }
    tfm_ids_free(&p);
    tfm_buf_free(&text);
}

/* ---- preferences -------------------------------------------------------- */

static int read_pref_line(tfm_chat_example *e, const tfm_json *o, const char *name, long line,
                          tfm_err *err)
{
    for (size_t k = 0; k < o->n; k++) {
        const char *key = o->keys[k]->str;
        if (strcmp(key, "prompt") && strcmp(key, "chosen") && strcmp(key, "rejected"))
            return tfm_err_at(err, name, line, o->keys[k]->col, "unknown key '%s' (expected "
                              "{\"prompt\", \"chosen\", \"rejected\"})", key);
    }
    e->line = line;
    e->format = TFM_CHAT_PREFERENCE;
    if (json_text(tfm_json_get(o, "prompt"), name, line, "prompt", &e->prompt, &e->prompt_len,
                  err) < 0 ||
        json_text(tfm_json_get(o, "chosen"), name, line, "chosen", &e->completion,
                  &e->completion_len, err) < 0 ||
        json_text(tfm_json_get(o, "rejected"), name, line, "rejected", &e->rejected,
                  &e->rejected_len, err) < 0)
        return -1;
    if (!e->completion_len || !e->rejected_len)
        return tfm_err_at(err, name, line, 0, "\"%s\" is empty: a preference needs two "
                          "answers", e->completion_len ? "rejected" : "chosen");
    if (e->completion_len == e->rejected_len &&
        !memcmp(e->completion, e->rejected, e->rejected_len))
        return tfm_err_at(err, name, line, 0, "\"chosen\" and \"rejected\" are the same "
                          "answer: nothing to prefer");
    return 0;
}

/* The ids of prompt + answer + the end-of-text text (unless the answer
 * ends with it). */
static void encode_answer(const tfm_chat_example *e, const char *a, size_t n,
                          const tfm_tokenizer *tok, tfm_tok_scratch *sc, tfm_ids *ids)
{
    int64_t eos = tfm_tokenizer_specials(tok)->eos;
    size_t el = 0;
    const char *et = eos >= 0 ? tfm_tokenizer_piece(tok, (uint32_t)eos, &el) : NULL;
    tfm_buf text = {0};
    tfm_buf_append(&text, e->prompt, e->prompt_len);
    tfm_buf_append(&text, a, n);
    if (et && !(n >= el && !memcmp(a + n - el, et, el)))
        tfm_buf_append(&text, et, el);
    encode(tok, sc, text.data, text.len, ids);
    tfm_buf_free(&text);
}

static size_t common_prefix(const tfm_ids *a, const tfm_ids *b)
{
    size_t k = 0;
    while (k < a->len && k < b->len && a->data[k] == b->data[k])
        k++;
    return k;
}

size_t tfm_pref_encode(const tfm_chat_example *e, const tfm_tokenizer *tok,
                       tfm_tok_scratch *sc, tfm_ids *chosen, tfm_ids *rejected)
{
    tfm_ids p = {0};
    encode(tok, sc, e->prompt, e->prompt_len, &p);
    encode_answer(e, e->completion, e->completion_len, tok, sc, chosen);
    encode_answer(e, e->rejected, e->rejected_len, tok, sc, rejected);
    size_t a = common_prefix(&p, chosen), b = common_prefix(&p, rejected);
    tfm_ids_free(&p);
    return a < b ? a : b;
}

void tfm_pref_encode_one(const tfm_chat_example *e, const tfm_tokenizer *tok,
                         tfm_tok_scratch *sc, tfm_ids *ids)
{
    encode_answer(e, e->completion, e->completion_len, tok, sc, ids);
}

void tfm_chat_prompt_encode(const tfm_chat_example *e, const tfm_tokenizer *tok,
                            tfm_tok_scratch *sc, tfm_ids *ids)
{
    if (e->prompt) {
        encode(tok, sc, e->prompt, e->prompt_len, ids);
        return;
    }
    tfm_buf pt = {0};
    tfm_chat_render(e->msg, e->n_prompt, 1, &pt, NULL, NULL);
    encode(tok, sc, pt.data, pt.len, ids);
    tfm_buf_free(&pt);
}

/* ---- the model's template ---------------------------------------------- */

static void beside(const char *path, const char *file, char *out, size_t size)
{
    if (tfm_is_dir(path)) {
        snprintf(out, size, "%s/%s", path, file);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, size, "%s", file);
    else
        snprintf(out, size, "%.*s/%s", (int)(slash - path), path, file);
}

static int refuse(const char *file, long line, long col, tfm_err *err)
{
    return tfm_err_at(err, file, line, col, "chat_template: tfm applies only ChatML "
                      "(its exact Jinja text is in tfm-config(5), train.task sft) and runs "
                      "no other template: remove it, or replace it with that one");
}

int tfm_chat_template_check(const char *path, tfm_err *err)
{
    char file[4200];
    if (access(path, F_OK) != 0) /* no folder to look in (a tokenizer's name) */
        return 0;
    beside(path, "tokenizer_config.json", file, sizeof file);
    if (access(file, F_OK) == 0) {
        tfm_json_doc doc = {0};
        if (tfm_json_parse_file(&doc, file, 0, err) < 0)
            return -1;
        const tfm_json *t = tfm_json_get(doc.root, "chat_template");
        int rc = 0;
        if (t && t->type != TFM_JSON_NULL &&
            (t->type != TFM_JSON_STRING || strcmp(t->str, tfm_chat_template)))
            rc = refuse(file, t->line, t->col, err);
        tfm_json_doc_free(&doc);
        if (rc < 0)
            return -1;
    }
    beside(path, "chat_template.jinja", file, sizeof file);
    if (access(file, F_OK) == 0) {
        tfm_map m;
        if (tfm_map_open(&m, file, err) < 0)
            return -1;
        size_t n = strlen(tfm_chat_template);
        int same = m.size == n && !memcmp(m.data, tfm_chat_template, n);
        tfm_map_close(&m);
        if (!same)
            return refuse(file, 1, 1, err);
    }
    return 0;
}
