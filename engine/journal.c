/* journal.c — see journal.h.  Lines are counted: `appended` by the writer,
 * `synced` by the syncer once an fdatasync covering them returned.  The
 * syncer takes everything appended up to the moment it starts a sync, so
 * lines that arrive while the disk is busy share the next sync. */
#include "journal.h"
#include "commit.h"
#include "nofollow.h"
#include "util.h"
#include "work.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct journal {
    char *path;
    char *new_in;                  /* a new file's directory, not synced yet (the first sync does), or NULL */
    int fd;
    pthread_t syncer;
    pthread_mutex_t mu;
    pthread_cond_t wake;           /* to the syncer: lines to sync, or stop */
    pthread_cond_t moved;          /* from the syncer: `synced` went up */
    unsigned long long appended, synced;
    off_t size;                    /* the file's length after the last whole line */
    int sync_errno;                /* the first failed fdatasync; sticky, as the page cache may have dropped the data */
    bool stopping;
    bool durable;                  /* a line that must be durable was appended: every line is synced from now */
    bool syncer_running;           /* (only the appending thread reads or sets it) */
};

static void *sync_loop(void *arg)
{
    struct journal *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->synced == j->appended && !j->stopping) pthread_cond_wait(&j->wake, &j->mu);
        if (j->synced == j->appended) break;        /* stopping, and all synced */
        unsigned long long upto = j->appended;
        char *dir = j->new_in;
        j->new_in = NULL;
        pthread_mutex_unlock(&j->mu);
        char derr[512];
        int rc = dir ? fsync_dir(dir, derr, sizeof derr) : 0;    /* the new file's name, once */
        int e = rc != 0 && errno == 0 ? EIO : errno;            /* (reported as the journal's sync) */
        free(dir);
        if (rc == 0) {
            rc = fdatasync(j->fd);
            e = errno;
        }
        pthread_mutex_lock(&j->mu);
        if (rc != 0 && !j->sync_errno) j->sync_errno = e;
        j->synced = upto;
        pthread_cond_broadcast(&j->moved);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* O_EXCL first, to learn whether the file is new: a new file's name is only
 * durable once its directory is synced.  The journal lives under .flow/, so
 * no link on the way is followed. */
static int open_for_append(const char *path, bool *created, char *err, size_t errlen)
{
    int fd = nofollow_open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL, 0644, err, errlen);
    *created = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = nofollow_open(path, O_WRONLY | O_APPEND, 0, err, errlen);
    return fd;
}

struct journal *journal_open(const char *path, char *err, size_t errlen)
{
    char *parent = path_parent(path);
    bool created = false;
    int fd = -1;
    struct stat st;
    if (nofollow_mkdir_p(parent, 0755, err, errlen) == 0 &&
        (fd = open_for_append(path, &created, err, errlen)) >= 0 && fstat(fd, &st) != 0) {
        errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        free(parent);
        return NULL;
    }

    struct journal *j = xcalloc(1, sizeof *j);
    j->path = xstrdup(path);
    if (created) j->new_in = parent;
    else free(parent);
    j->fd = fd;
    j->size = st.st_size;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->wake, NULL);
    pthread_cond_init(&j->moved, NULL);
    return j;
}

/* The syncer starts with the first line that must be durable: a journal
 * that only ever holds notes (a run in which nothing ran) needs none. */
static int start_syncer(struct journal *j, char *err, size_t errlen)
{
    if (j->syncer_running) return 0;
    int rc = start_quiet_thread(&j->syncer, sync_loop, j);
    if (rc != 0) {
        errf(err, errlen, "cannot start the syncer for %s: %s", j->path, strerror(rc));
        return -1;
    }
    j->syncer_running = true;
    return 0;
}

static int sync_error(struct journal *j, int e, char *err, size_t errlen)
{
    errf(err, errlen, "cannot sync %s: %s%s", j->path, strerror(e), errno_hint(e));
    return -1;
}

int journal_append(struct journal *j, const char *line, size_t len, bool durable, char *err, size_t errlen)
{
    if ((durable || j->durable) && start_syncer(j, err, errlen) != 0) return -1;
    pthread_mutex_lock(&j->mu);
    int e = j->sync_errno;
    pthread_mutex_unlock(&j->mu);
    if (e) return sync_error(j, e, err, errlen);

    /* Lines that end in a newline (a batch) go out as they are: copying a
     * batch of a few megabytes to add nothing was a tenth of its cost. */
    bool add_newline = len == 0 || line[len - 1] != '\n';
    size_t total = len + add_newline;
    char small[1024];
    const char *out = line;
    char *copy = NULL;
    if (add_newline) {
        copy = total <= sizeof small ? small : xmalloc(total);
        memcpy(copy, line, len);
        copy[len] = '\n';
        out = copy;
    }
    int rc = write_all(j->fd, out, total);    /* one write() for a regular file, unless the disk is full */
    e = errno;
    if (copy != small) free(copy);
    if (rc != 0) {
        /* Cut off what part of the lines got in, so a later append does not
         * glue onto half a line; if even that fails, the journal takes no more. */
        if (ftruncate(j->fd, j->size) != 0) {
            pthread_mutex_lock(&j->mu);
            if (!j->sync_errno) j->sync_errno = e;
            pthread_mutex_unlock(&j->mu);
        }
        errf(err, errlen, "cannot append to %s: %s%s", j->path, strerror(e), errno_hint(e));
        return -1;
    }
    j->size += (off_t)total;
    pthread_mutex_lock(&j->mu);
    j->durable = j->durable || durable;
    if (j->durable) {
        j->appended++;
        pthread_cond_signal(&j->wake);
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

int journal_sync(struct journal *j, char *err, size_t errlen)
{
    pthread_mutex_lock(&j->mu);
    unsigned long long upto = j->appended;
    while (j->synced < upto) pthread_cond_wait(&j->moved, &j->mu);
    int e = j->sync_errno;
    pthread_mutex_unlock(&j->mu);
    return e ? sync_error(j, e, err, errlen) : 0;
}

int journal_close(struct journal *j, char *err, size_t errlen)
{
    int rc = journal_sync(j, err, errlen);
    pthread_mutex_lock(&j->mu);
    j->stopping = true;
    pthread_cond_signal(&j->wake);
    pthread_mutex_unlock(&j->mu);
    if (j->syncer_running) pthread_join(j->syncer, NULL);
    if (close(j->fd) != 0 && rc == 0) {
        errf(err, errlen, "cannot close %s: %s", j->path, strerror(errno));
        rc = -1;
    }
    pthread_cond_destroy(&j->moved);
    pthread_cond_destroy(&j->wake);
    pthread_mutex_destroy(&j->mu);
    free(j->new_in);
    free(j->path);
    free(j);
    return rc;
}
