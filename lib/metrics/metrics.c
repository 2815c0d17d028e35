#include "config.h"

#include <math.h>

#include "metrics/metrics.h"

double tfm_metrics_nll(const float *logits, int V, uint32_t target)
{
    float mx = logits[0];
    for (int i = 1; i < V; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0;
    for (int i = 0; i < V; i++)
        sum += exp((double)logits[i] - mx);
    return log(sum) + mx - (double)logits[target];
}

int tfm_metrics_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

double tfm_metrics_stderr(size_t correct, size_t n)
{
    if (n < 2)
        return 0;
    double p = (double)correct / (double)n;
    return sqrt(p * (1 - p) / (double)(n - 1));
}

double tfm_metrics_bpb(double nll_nats, size_t bytes)
{
    return bytes ? nll_nats / log(2.0) / (double)bytes : 0;
}

size_t tfm_ppl_windows(size_t n, size_t context, size_t stride, tfm_ppl_window *out,
                       size_t cap)
{
    if (n < 2 || context < 2 || stride < 1 || stride > context)
        return 0;
    /* a window's first token has no history inside it, so a window can
     * add at most context - 1 newly scored tokens */
    size_t step = stride < context - 1 ? stride : context - 1;
    size_t end = context < n ? context : n, count = 0;
    if (out && cap > 0)
        out[0] = (tfm_ppl_window){0, end, 1};
    count++;
    while (end < n) {
        size_t prev = end;
        end = prev + step < n ? prev + step : n;
        if (out && count < cap)
            out[count] = (tfm_ppl_window){end - context, end, prev};
        count++;
    }
    return count;
}

size_t tfm_metrics_utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}
