#include "config.h"

#include <utf8proc.h>

#include "text/pretok.h"
#include "text/utf8.h"

static const uint8_t ascii_class[128] = {
#define O TFM_CC_OTHER
#define S TFM_CC_SPACE
#define L TFM_CC_LETTER
#define N TFM_CC_NUMBER
    O, O, O, O, O, O, O, O, O, S, S, S, S, S, O, O, /* 0x00 */
    O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x10 */
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x20 */
    N, N, N, N, N, N, N, N, N, N, O, O, O, O, O, O, /* 0x30 */
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x40 */
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O, /* 0x50 */
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x60 */
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O, /* 0x70 */
#undef O
#undef S
#undef L
#undef N
};

static int cp_class(int32_t cp)
{
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
        return TFM_CC_SPACE;
    }
    if (cp >= 0x2000 && cp <= 0x200A)
        return TFM_CC_SPACE;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return TFM_CC_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return TFM_CC_NUMBER;
    default:
        return TFM_CC_OTHER;
    }
}

int tfm_char_class(const unsigned char *s, size_t n, size_t *adv)
{
    if (s[0] < 0x80) {
        *adv = 1;
        return ascii_class[s[0]];
    }
    int32_t cp = tfm_utf8_decode(s, n, adv);
    if (cp < 0)
        return TFM_CC_OTHER; /* as U+FFFD would be */
    return cp_class(cp);
}

/* End of the run of characters of class c starting at i. */
static size_t run_end(const unsigned char *s, size_t n, size_t i, int c)
{
    size_t adv;
    while (i < n) {
        if (s[i] < 0x80) {
            if (ascii_class[s[i]] != c)
                break;
            i++;
            continue;
        }
        if (tfm_char_class(s + i, n - i, &adv) != c)
            break;
        i += adv;
    }
    return i;
}

size_t tfm_gpt2_pretok_next(const unsigned char *s, size_t n, size_t i)
{
    size_t adv;
    unsigned c = s[i];
    if (c == '\'' && i + 1 < n) {
        unsigned d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd')
            return i + 2;
        if (i + 2 < n) {
            unsigned e = s[i + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l'))
                return i + 3;
        }
    }
    if (c == ' ' && i + 1 < n) {
        int k = tfm_char_class(s + i + 1, n - i - 1, &adv);
        if (k != TFM_CC_SPACE)
            return run_end(s, n, i + 1 + adv, k);
    }
    int k = tfm_char_class(s + i, n - i, &adv);
    if (k != TFM_CC_SPACE)
        return run_end(s, n, i + adv, k);
    /* Whitespace: \s+(?!\S) takes the run but leaves its last character to
     * the next token when a non-space follows; a lone space before a
     * non-space is \s+. */
    size_t j = i + adv, last = i;
    while (j < n) {
        if (tfm_char_class(s + j, n - j, &adv) != TFM_CC_SPACE)
            break;
        last = j;
        j += adv;
    }
    if (j == n || last == i)
        return j;
    return last;
}
