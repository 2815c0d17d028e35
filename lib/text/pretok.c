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

/* Letters and digits that Unicode 16 added (unassigned in utf8proc 2.8's
 * Unicode 15 tables).  tiktoken 1.0.22 and HF tokenizers 0.23.2 classify by
 * Unicode 16, so these must count too.  Derived from Node's ICU (Unicode 17)
 * categories, keeping only the code points tiktoken treats as letters or
 * numbers (Unicode 17's additions are still unassigned for it). */
static const struct {
    int32_t lo, hi;
    int cls;
} unicode16_added[] = {
    {0x1C89, 0x1C8A, TFM_CC_LETTER},
    {0xA7CB, 0xA7CD, TFM_CC_LETTER},
    {0xA7DA, 0xA7DC, TFM_CC_LETTER},
    {0x105C0, 0x105F3, TFM_CC_LETTER},
    {0x10D40, 0x10D49, TFM_CC_NUMBER},
    {0x10D4A, 0x10D65, TFM_CC_LETTER},
    {0x10D6F, 0x10D85, TFM_CC_LETTER},
    {0x10EC2, 0x10EC4, TFM_CC_LETTER},
    {0x11380, 0x11389, TFM_CC_LETTER},
    {0x1138B, 0x1138B, TFM_CC_LETTER},
    {0x1138E, 0x1138E, TFM_CC_LETTER},
    {0x11390, 0x113B5, TFM_CC_LETTER},
    {0x113B7, 0x113B7, TFM_CC_LETTER},
    {0x113D1, 0x113D1, TFM_CC_LETTER},
    {0x113D3, 0x113D3, TFM_CC_LETTER},
    {0x116D0, 0x116E3, TFM_CC_NUMBER},
    {0x11BC0, 0x11BE0, TFM_CC_LETTER},
    {0x11BF0, 0x11BF9, TFM_CC_NUMBER},
    {0x13460, 0x143FA, TFM_CC_LETTER},
    {0x16100, 0x1611D, TFM_CC_LETTER},
    {0x16130, 0x16139, TFM_CC_NUMBER},
    {0x16D40, 0x16D6C, TFM_CC_LETTER},
    {0x16D70, 0x16D79, TFM_CC_NUMBER},
    {0x18CFF, 0x18CFF, TFM_CC_LETTER},
    {0x1CCF0, 0x1CCF9, TFM_CC_NUMBER},
    {0x1E5D0, 0x1E5ED, TFM_CC_LETTER},
    {0x1E5F0, 0x1E5F0, TFM_CC_LETTER},
    {0x1E5F1, 0x1E5FA, TFM_CC_NUMBER},
    {0x2EBF0, 0x2EE5D, TFM_CC_LETTER},
};

static int added_class(int32_t cp)
{
    size_t lo = 0, hi = sizeof unicode16_added / sizeof unicode16_added[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < unicode16_added[mid].lo)
            hi = mid;
        else if (cp > unicode16_added[mid].hi)
            lo = mid + 1;
        else
            return unicode16_added[mid].cls;
    }
    return TFM_CC_OTHER;
}

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
    case UTF8PROC_CATEGORY_CN:
        return added_class(cp);
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

const char tfm_pretok_llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char tfm_pretok_qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The letter after an apostrophe, case-folded: 's' for "ſ" (U+017F) too;
 * its length in *adv; 0 when none. */
static int folded_letter(const unsigned char *s, size_t n, size_t i, size_t *adv)
{
    if (i >= n)
        return 0;
    *adv = 1;
    if (s[i] < 0x80)
        return s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i];
    if (i + 1 < n && s[i] == 0xC5 && s[i + 1] == 0xBF) {
        *adv = 2;
        return 's';
    }
    return 0;
}

size_t tfm_llama3_pretok_next(const unsigned char *s, size_t n, size_t i, int max_digits)
{
    size_t adv, a2, a3;
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (s[i] == '\'') {
        int d = folded_letter(s, n, i + 1, &a2);
        if (d == 's' || d == 't' || d == 'm' || d == 'd')
            return i + 1 + a2;
        int e = d ? folded_letter(s, n, i + 1 + a2, &a3) : 0;
        if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l'))
            return i + 1 + a2 + a3;
    }
    int k = tfm_char_class(s + i, n - i, &adv);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (k == TFM_CC_LETTER)
        return run_end(s, n, i + adv, TFM_CC_LETTER);
    if (k != TFM_CC_NUMBER && s[i] != '\r' && s[i] != '\n' && i + adv < n &&
        tfm_char_class(s + i + adv, n - i - adv, &a2) == TFM_CC_LETTER)
        return run_end(s, n, i + adv + a2, TFM_CC_LETTER);
    /* \p{N}{1,max_digits} */
    if (k == TFM_CC_NUMBER) {
        size_t j = i + adv;
        for (int c = 1; c < max_digits && j < n; c++) {
            if (tfm_char_class(s + j, n - j, &a2) != TFM_CC_NUMBER)
                break;
            j += a2;
        }
        return j;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t o = i;
    if (s[i] == ' ' && i + 1 < n && tfm_char_class(s + i + 1, n - i - 1, &a2) == TFM_CC_OTHER)
        o = i + 1;
    if (o > i || k == TFM_CC_OTHER) {
        size_t j = run_end(s, n, o, TFM_CC_OTHER);
        while (j < n && (s[j] == '\r' || s[j] == '\n'))
            j++;
        return j;
    }
    /* whitespace: \s*[\r\n]+ ends after the run's last line break */
    size_t j = i, last = i, nl = 0;
    while (j < n && tfm_char_class(s + j, n - j, &a2) == TFM_CC_SPACE) {
        if (s[j] == '\r' || s[j] == '\n')
            nl = j + 1;
        last = j;
        j += a2;
    }
    if (nl)
        return nl;
    /* \s+(?!\S), else \s+ (one character before a non-space) */
    if (j == n || last == i)
        return j;
    return last;
}
