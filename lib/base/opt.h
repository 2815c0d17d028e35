/* Option handling shared by the programs in cmd/: number parsing with range
 * checks, the common exits, and --version.  These are the only library
 * functions that print and exit; they exist for main(). */
#ifndef TFM_BASE_OPT_H
#define TFM_BASE_OPT_H

#include <getopt.h>
#include <stddef.h>

#include "base/err.h"

/* Whole-string parses; -1 when the text is not a number or out of range. */
int tfm_parse_long(const char *s, long min, long max, long *out);
int tfm_parse_double(const char *s, double min, double max, double *out);

/* Parses an option value or exits 2 naming the option and the range. */
long tfm_opt_long(const char *prog, const char *opt, const char *arg, long min, long max);
double tfm_opt_double(const char *prog, const char *opt, const char *arg, double min, double max);

/* These print control characters and invalid UTF-8 in the message as \xNN
 * (messages quote input).
 * "prog: message" on stderr, then "Try 'prog --help'." and exit 2. */
void tfm_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/* After getopt_long returned '?' or ':' for argv (its own message says what
 * was wrong): for an unknown long option close to one of opts,
 * "prog: did you mean '--name'?", then "Try 'prog --help'." and exit 2. */
void tfm_usage_hint(const char *prog, char *const argv[], const struct option *opts)
    __attribute__((noreturn));
/* Levenshtein distance for "did you mean"; (size_t)-1 past 64 bytes. */
size_t tfm_edit_distance(const char *a, const char *b);
/* "prog: <err->msg>" and exit 1. */
void tfm_die(const char *prog, const tfm_err *err) __attribute__((noreturn));
/* "prog: message" and exit 1. */
void tfm_fatal(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/* What every main does first:
 * - registers an exit handler that flushes and closes stdout and, when
 *   anything written there was lost (a full disk, /dev/full, a closed pipe),
 *   prints "prog: <stdout>: write error" and makes the exit status 1, so that
 *   no output path (help, --dump-config, results) loses data and exits 0;
 * - warns about a TFM_NUM_THREADS that is not a thread count (it is then
 *   read as far as it is a number, else all cores are used). */
void tfm_main_start(const char *prog);
/* Same check at any point: "prog: <stdout>: write error: ..." and exit 1
 * when stdout has failed (so that a long run stops at the first loss). */
void tfm_check_stdout(const char *prog);
/* The thread count to run with: REQUESTED if > 0 (SOURCE names where it
 * came from, e.g. "--threads"), else TFM_NUM_THREADS, else the CPUs this
 * process may use.  More than those CPUs would only make threads wait for
 * each other: capped, with a warning on stderr. */
int tfm_opt_threads(const char *prog, const char *source, long requested);
/* Prints "prog (tfm) VERSION" to stdout and exits 0. */
void tfm_print_version(const char *prog) __attribute__((noreturn));

#endif
