#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int tfm_read_all(FILE *fp, const char *name, tfm_buf *b, tfm_err *err)
{
    for (;;) {
        tfm_buf_reserve(b, 1 << 16);
        size_t n = fread(b->data + b->len, 1, b->cap - b->len - 1, fp);
        b->len += n;
        if (n == 0) {
            if (ferror(fp))
                return tfm_err_errno(err, "%s: read error", name);
            return 0;
        }
    }
}

int tfm_map_open(tfm_map *m, const char *path, tfm_err *err)
{
    memset(m, 0, sizeof *m);
    if (strcmp(path, "-") == 0) {
        tfm_buf b = {0};
        if (tfm_read_all(stdin, "<stdin>", &b, err) < 0) {
            tfm_buf_free(&b);
            return -1;
        }
        m->data = (const unsigned char *)b.data;
        m->size = b.len;
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tfm_err_errno(err, "%s", path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return tfm_err_errno(err, "%s", path);
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return tfm_err_set(err, "%s: is a directory", path);
    }
    if (S_ISREG(st.st_mode)) {
        if (st.st_size == 0) {
            close(fd);
            m->data = (const unsigned char *)tfm_calloc(1, 1);
            return 0;
        }
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            return tfm_err_errno(err, "%s: mmap", path);
        m->data = p;
        m->size = (size_t)st.st_size;
        m->mapped = 1;
        return 0;
    }
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        close(fd);
        return tfm_err_errno(err, "%s", path);
    }
    tfm_buf b = {0};
    int rc = tfm_read_all(fp, path, &b, err);
    fclose(fp);
    if (rc < 0) {
        tfm_buf_free(&b);
        return -1;
    }
    m->data = (const unsigned char *)b.data;
    m->size = b.len;
    return 0;
}

void tfm_map_close(tfm_map *m)
{
    if (!m->data)
        return;
    if (m->mapped)
        munmap((void *)m->data, m->size);
    else
        free((void *)m->data);
    memset(m, 0, sizeof *m);
}

int tfm_map_line(const tfm_map *m, size_t *pos, const char **s, size_t *n)
{
    if (*pos >= m->size)
        return 0;
    const char *b = (const char *)m->data + *pos;
    const char *nl = memchr(b, '\n', m->size - *pos);
    size_t len = nl ? (size_t)(nl - b) : m->size - *pos;
    *pos += len + (nl != NULL);
    if (len && b[len - 1] == '\r')
        len--;
    *s = b;
    *n = len;
    return 1;
}

/* Temporary files still open, removed by the signal handler.  A fixed table
 * keeps the handler async-signal-safe (no malloc, no locks it could wait on). */
#define MAX_PENDING 64
static char *pending[MAX_PENDING];
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;

static void remove_pending_at_exit(void)
{
    for (int i = 0; i < MAX_PENDING; i++)
        if (pending[i])
            unlink(pending[i]);
}

static void register_exit_cleanup(void)
{
    atexit(remove_pending_at_exit);
}

static void pending_add(char *tmp)
{
    /* An exit on failure (tfm_die) while an output is open leaves no
     * temporary file behind either, as it does after a signal. */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_exit_cleanup);
    pthread_mutex_lock(&pending_lock);
    for (int i = 0; i < MAX_PENDING; i++)
        if (!pending[i]) {
            pending[i] = tmp;
            break;
        }
    pthread_mutex_unlock(&pending_lock);
}

static void pending_remove(char *tmp)
{
    pthread_mutex_lock(&pending_lock);
    for (int i = 0; i < MAX_PENDING; i++)
        if (pending[i] == tmp)
            pending[i] = NULL;
    pthread_mutex_unlock(&pending_lock);
}

static void remove_pending_and_reraise(int sig)
{
    for (int i = 0; i < MAX_PENDING; i++)
        if (pending[i])
            unlink(pending[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void tfm_out_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_pending_and_reraise;
    sigemptyset(&sa.sa_mask);
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        /* A signal ignored on entry stays ignored, as a shell keeps it:
         * nohup's SIGHUP must not stop the run, and with SIGPIPE ignored a
         * closed pipe is a write error with a message, not a silent death. */
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

/* N when path names one of this process's own descriptors.  Writing goes to
 * that descriptor itself: reopening /proc/self/fd/1 would truncate the
 * shell's file behind its offset, and replacing it would replace the link. */
static int own_fd(const char *path)
{
    static const char *const dirs[] = {"/dev/fd/", "/proc/self/fd/"};
    if (strcmp(path, "/dev/stdout") == 0)
        return 1;
    if (strcmp(path, "/dev/stderr") == 0)
        return 2;
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        size_t n = strlen(dirs[i]);
        if (strncmp(path, dirs[i], n) == 0 && path[n]) {
            char *end;
            long fd = strtol(path + n, &end, 10);
            if (*end == '\0' && fd >= 0 && fd <= 65535 && path[n] >= '0' && path[n] <= '9')
                return (int)fd;
        }
    }
    return -1;
}

/* The next hop of the symbolic link at path (a relative target is relative
 * to the link's directory); malloc'd, NULL with errno on failure. */
static char *link_target(const char *path)
{
    char *t = NULL;
    for (size_t cap = 256;; cap *= 2) {
        t = tfm_realloc(t, cap);
        ssize_t n = readlink(path, t, cap);
        if (n < 0) {
            free(t);
            return NULL;
        }
        if ((size_t)n < cap) {
            t[n] = '\0';
            break;
        }
    }
    const char *slash = strrchr(path, '/');
    if (t[0] == '/' || !slash)
        return t;
    size_t d = (size_t)(slash - path) + 1, n = strlen(t);
    char *r = tfm_malloc(d + n + 1);
    memcpy(r, path, d);
    memcpy(r + d, t, n + 1);
    free(t);
    return r;
}

/* Opens path for writing in place (a device, FIFO, socket or descriptor). */
static int out_open_direct(tfm_out *o, const char *path, int fd, tfm_err *err)
{
    if (fd >= 0) {
        /* a duplicate, so that closing the output leaves the descriptor */
        int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (d < 0 || !(o->fp = fdopen(d, "wb"))) {
            if (d >= 0)
                close(d);
            return tfm_err_errno(err, "%s", path);
        }
    } else if (!(o->fp = fopen(path, "wb"))) {
        return tfm_err_errno(err, "%s", path);
    }
    o->direct = 1;
    o->path = tfm_strdup(path);
    return 0;
}

/* "PATH: cannot create[ WHAT]: the directory 'D' ...: strerror" for a
 * failed creation of target (PATH as the user named it) in its directory D,
 * with errno the failing call's. */
static int cannot_create(tfm_err *err, const char *path, const char *target, const char *what)
{
    int e = errno;
    size_t n = strlen(target);
    while (n > 1 && target[n - 1] == '/') /* "a/b/" is made in "a" */
        n--;
    const char *slash = NULL;
    for (size_t i = 0; i < n; i++)
        if (target[i] == '/')
            slash = target + i;
    int dl = slash ? (slash == target ? 1 : (int)(slash - target)) : 1;
    const char *dir = slash ? target : ".";
    errno = e;
    if (e == EACCES || e == EROFS || e == EPERM)
        return tfm_err_errno(err, "%s: cannot create%s: the directory '%.*s' is not writable",
                             path, what, dl, dir);
    if (e == ENOENT)
        return tfm_err_errno(err, "%s: cannot create%s: the directory '%.*s' does not exist",
                             path, what, dl, dir);
    if (e == ENOTDIR)
        return tfm_err_errno(err, "%s: cannot create%s: '%.*s' is not a directory", path, what,
                             dl, dir);
    return tfm_err_errno(err, "%s: cannot create%s in the directory '%.*s'", path, what, dl,
                         dir);
}

int tfm_out_open(tfm_out *o, const char *path, tfm_err *err)
{
    memset(o, 0, sizeof *o);
    if (!path || strcmp(path, "-") == 0) {
        o->fp = stdout;
        return 0;
    }
    /* Follow symbolic links one hop at a time (realpath(3) fails on a
     * dangling link and on /proc/self/fd/N of a pipe) to the file the
     * output reaches: a regular file (existing or not) is replaced there, so
     * the link stays a link; anything else is written in place. */
    char *target = tfm_strdup(path);
    for (int hops = 0;; hops++) {
        struct stat st;
        int fd = own_fd(target), exists = stat(target, &st) == 0;
        int rc = 0, done = 1;
        if (fd >= 0)
            rc = out_open_direct(o, path, fd, err);
        else if (exists && S_ISDIR(st.st_mode))
            rc = tfm_err_set(err, "%s: is a directory", path);
        else if (exists && !S_ISREG(st.st_mode))
            rc = out_open_direct(o, target, -1, err);
        else if (lstat(target, &st) == 0 && S_ISLNK(st.st_mode))
            done = 0;
        else
            break;
        if (done) {
            free(target);
            return rc;
        }
        char *next = hops < 40 ? link_target(target) : (errno = ELOOP, NULL);
        free(target);
        if (!next)
            return tfm_err_errno(err, "%s", path);
        target = next;
    }
    size_t n = strlen(target);
    o->tmp = tfm_malloc(n + 16);
    snprintf(o->tmp, n + 16, "%s.tmp.XXXXXX", target);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        /* the file is made beside its target: say which directory refused */
        cannot_create(err, path, target, "");
        free(o->tmp);
        free(target);
        o->tmp = NULL;
        return -1;
    }
    /* mkstemp creates 0600; output files should get the usual umask mode. */
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    o->fp = fdopen(fd, "wb");
    if (!o->fp) {
        tfm_err_errno(err, "%s", path);
        close(fd);
        unlink(o->tmp);
        free(o->tmp);
        free(target);
        o->tmp = NULL;
        return -1;
    }
    o->path = target;
    pending_add(o->tmp);
    return 0;
}

static void out_release(tfm_out *o)
{
    if (o->tmp)
        pending_remove(o->tmp);
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
}

int tfm_out_commit(tfm_out *o, tfm_err *err)
{
    if (!o->fp)
        return tfm_err_set(err, "output not open");
    if (!o->tmp) {
        int rc = 0;
        if (fflush(o->fp) != 0 || ferror(o->fp))
            rc = tfm_err_errno(err, "%s: write error", o->direct ? o->path : "<stdout>");
        if (o->direct && fclose(o->fp) != 0 && rc == 0)
            rc = tfm_err_errno(err, "%s: write error", o->path);
        o->fp = NULL;
        out_release(o);
        return rc;
    }
    int rc = 0;
    if (fflush(o->fp) != 0 || ferror(o->fp) || fsync(fileno(o->fp)) != 0)
        rc = tfm_err_errno(err, "%s: write error", o->path);
    if (fclose(o->fp) != 0 && rc == 0)
        rc = tfm_err_errno(err, "%s: write error", o->path);
    o->fp = NULL;
    if (rc == 0 && rename(o->tmp, o->path) != 0)
        rc = tfm_err_errno(err, "%s: cannot rename into place", o->path);
    if (rc != 0)
        unlink(o->tmp);
    out_release(o);
    return rc;
}

void tfm_out_abort(tfm_out *o)
{
    if (!o->fp)
        return;
    if (o->tmp) {
        fclose(o->fp);
        unlink(o->tmp);
    } else if (o->direct) {
        fclose(o->fp);
    } else {
        fflush(o->fp);
    }
    out_release(o);
}

int tfm_write_file(const char *path, const void *data, size_t n, tfm_err *err)
{
    tfm_out o;
    if (tfm_out_open(&o, path, err) < 0)
        return -1;
    if (n && fwrite(data, 1, n, o.fp) != n) {
        tfm_err_errno(err, "%s: write error", path);
        tfm_out_abort(&o);
        return -1;
    }
    return tfm_out_commit(&o, err);
}

int tfm_getline(FILE *fp, tfm_buf *b)
{
    /* getline(3) keeps embedded NULs countable and grows b's malloc'd data. */
    ssize_t n = getline(&b->data, &b->cap, fp);
    if (n < 0) {
        b->len = 0;
        return ferror(fp) ? -1 : 0;
    }
    if (n > 0 && b->data[n - 1] == '\n')
        n--;
    b->len = (size_t)n;
    b->data[n] = '\0';
    return 1;
}

int tfm_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int tfm_mkdir(const char *path, tfm_err *err)
{
    if (mkdir(path, 0777) == 0 || (errno == EEXIST && tfm_is_dir(path)))
        return 0;
    if (errno == EEXIST || errno == ENOTDIR)
        return tfm_err_set(err, "%s: not a directory", path);
    return cannot_create(err, path, path, " directory");
}

int tfm_mkdirs(const char *path, char **created, tfm_err *err)
{
    if (created)
        *created = NULL;
    char *p = tfm_strdup(path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    int rc = 0;
    /* each prefix ending before a '/', then the whole path */
    for (size_t i = 1; i <= n && rc == 0; i++) {
        if (i < n && p[i] != '/')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) == 0) {
            if (created && !*created)
                *created = tfm_strdup(p);
        } else if (!(errno == EEXIST && tfm_is_dir(p))) {
            if (errno == EEXIST || errno == ENOTDIR)
                rc = tfm_err_set(err, "%s: not a directory", p);
            else
                rc = cannot_create(err, p, p, " directory");
        }
        p[i] = c;
    }
    free(p);
    if (rc < 0 && created && *created) {
        tfm_rmdirs(path, *created);
        free(*created);
        *created = NULL;
    }
    return rc;
}

void tfm_rmdirs(const char *path, const char *top)
{
    char *p = tfm_strdup(path);
    size_t nt = strlen(top);
    for (;;) {
        size_t n = strlen(p);
        while (n > 1 && p[n - 1] == '/')
            p[--n] = '\0';
        if (rmdir(p) != 0 || n <= nt)
            break;
        char *slash = strrchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    free(p);
}
