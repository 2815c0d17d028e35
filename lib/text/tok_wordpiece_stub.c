/* Stand-in for tok_wordpiece.c until the WordPiece model is in the build. */
#include "config.h"

#include "text/tok_internal.h"

int tfm_tok_wordpiece_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                                const tfm_json *root, tfm_err *err)
{
    return tfm_err_set(err, "%s: WordPiece is not built yet", doc->name);
}

int tfm_tok_wordpiece_from_vocab_txt(tfm_tokenizer *tok, const char *path, tfm_err *err)
{
    return tfm_err_set(err, "%s: WordPiece is not built yet", path);
}

static void *wt_create(const tfm_tok_train_opts *opts) { return NULL; }
static void wt_feed(void *impl, const char *text, size_t len) {}
static int wt_finish(void *impl, const tfm_tok_train_opts *opts, tfm_tokenizer **out,
                     tfm_err *err)
{
    return tfm_err_set(err, "WordPiece training is not built yet");
}
static void wt_free(void *impl) {}

const tfm_tok_trainer_ops tfm_tok_wordpiece_trainer_ops = {
    .create = wt_create, .feed = wt_feed, .finish = wt_finish, .free = wt_free,
};
