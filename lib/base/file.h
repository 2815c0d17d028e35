/* Files: whole-file mapping for reading, atomic write-then-rename for
 * writing, and a line reader for streams.  A path of "-" means stdin/stdout.
 * Every function names the path in its error. */
#ifndef TFM_BASE_FILE_H
#define TFM_BASE_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "base/buf.h"
#include "base/err.h"

/* Read-only view of a whole file: mmap'd for regular files, read into memory
 * for pipes and stdin.  The struct owns the mapping/copy. */
typedef struct tfm_map {
    const unsigned char *data;
    size_t size;
    int mapped; /* 1: munmap on close; 0: free */
} tfm_map;

int tfm_map_open(tfm_map *m, const char *path, tfm_err *err);
void tfm_map_close(tfm_map *m);
/* The line of m at *pos: [*s, *s + *n), without its newline and a carriage
 * return before it; *pos moves past it.  0 at the end. */
int tfm_map_line(const tfm_map *m, size_t *pos, const char **s, size_t *n);

/* Reads a whole stream into b (appending). */
int tfm_read_all(FILE *fp, const char *name, tfm_buf *b, tfm_err *err);

/* Output written to "path.tmp.XXXXXX" and renamed over path by commit, so a
 * reader never sees a half-written file and a failure leaves nothing behind.
 * "-" or NULL writes to stdout directly.  A symbolic link is followed: the
 * regular file it leads to is replaced in that file's directory and the link
 * stays.  What is not a regular file (a device, FIFO or socket, also behind
 * a link) is written in place, and /dev/stdout, /dev/stderr, /dev/fd/N and
 * /proc/self/fd/N write to the process's own descriptor.  Open outputs are
 * also removed when the process exits without committing them (exit(1) on
 * an error) or is stopped by SIGINT/SIGTERM/SIGHUP (see
 * tfm_out_install_signals). */
typedef struct tfm_out {
    FILE *fp;
    char *path; /* the file replaced on commit (a link's target), or the
                   path written in place; NULL for stdout */
    char *tmp;  /* temporary path; NULL for stdout and devices */
    int direct; /* 1: an existing non-regular file (device, FIFO) opened in
                   place: renaming over /dev/null would replace the device */
} tfm_out;

int tfm_out_open(tfm_out *o, const char *path, tfm_err *err);
/* Flushes, fsyncs and renames; closes in every case. */
int tfm_out_commit(tfm_out *o, tfm_err *err);
/* Closes and removes the temporary file. */
void tfm_out_abort(tfm_out *o);
/* Write a whole buffer atomically to path. */
int tfm_write_file(const char *path, const void *data, size_t n, tfm_err *err);
/* Installs handlers for SIGINT, SIGTERM, SIGHUP and SIGPIPE that remove
 * every open temporary output and then re-raise the signal (so `| head`
 * ends the program quietly, as other filters); a signal ignored on entry
 * stays ignored.  Programs that handle signals themselves (tfm-train)
 * don't call this. */
void tfm_out_install_signals(void);

/* Reads one line (without the '\n', a '\r' before it is kept) into b,
 * replacing its content.  Returns 1 when a line was read, 0 at end of input,
 * -1 on a read error. */
int tfm_getline(FILE *fp, tfm_buf *b);

/* 1 if path is an existing directory. */
int tfm_is_dir(const char *path);
/* mkdir for one level; an existing directory is fine, an existing file is
 * "PATH: not a directory". */
int tfm_mkdir(const char *path, tfm_err *err);
/* mkdir -p.  *created (may be NULL) gets the outermost directory this call
 * created (malloc'd; NULL when all existed), so that a caller that fails
 * later can remove what it made with tfm_rmdirs. */
int tfm_mkdirs(const char *path, char **created, tfm_err *err);
/* Removes path and its parents up to and including `top` while they are
 * empty directories (rmdir(2): never a file). */
void tfm_rmdirs(const char *path, const char *top);

#endif
