/* proctree.c — see proctree.h. */
#include "proctree.h"
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pinfo { pid_t pid, ppid, pgid; bool in; };

/* "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses,
 * so the fields are read after its last ')'. */
bool proctree_stat(pid_t pid, char *state, pid_t *ppid, pid_t *pgid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) return false;
    buf[r] = '\0';
    const char *rp = strrchr(buf, ')');
    long parent, group;
    if (!rp || sscanf(rp + 1, " %c %ld %ld", state, &parent, &group) != 3) return false;
    *ppid = (pid_t)parent;
    *pgid = (pid_t)group;
    return true;
}

static bool read_stat(pid_t pid, struct pinfo *out)
{
    char state;
    *out = (struct pinfo){ .pid = pid };
    return proctree_stat(pid, &state, &out->ppid, &out->pgid);
}

static size_t scan(struct pinfo **out)
{
    struct pinfo *v = NULL;
    size_t n = 0, cap = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        ARRAY_GROW(v, n, cap);
        if (read_stat((pid_t)pid, &v[n])) n++;
    }
    if (d) closedir(d);
    *out = v;
    return n;
}

static bool listed(const pid_t *v, size_t n, pid_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x) return true;
    return false;
}

static int by_pid(const void *a, const void *b)
{
    pid_t x = ((const struct pinfo *)a)->pid, y = ((const struct pinfo *)b)->pid;
    return (x > y) - (x < y);
}

void proctree_groups(pid_t pgid, pid_t flow_group, pid_t **groups, size_t *n, size_t *cap)
{
    if (pgid <= 0) return;
    struct pinfo *v;
    size_t np = scan(&v);
    qsort(v, np, sizeof *v, by_pid);
    pid_t self = getpgrp();
    for (size_t i = 0; i < np; i++) v[i].in = v[i].pgid == pgid;
    /* Grow the set to a fixed point: a child of a member is one, and so is
     * every process in the group of one (a rank's own children).  A tree is
     * a few levels deep: a few passes. */
    for (bool grew = true; grew;) {
        grew = false;
        for (size_t i = 0; i < np; i++) {
            if (v[i].in) continue;
            struct pinfo key = { .pid = v[i].ppid };
            const struct pinfo *parent = bsearch(&key, v, np, sizeof *v, by_pid);
            bool in = (parent && parent->in) || listed(*groups, *n, v[i].pgid);
            if (in) {
                v[i].in = grew = true;
                if (v[i].pgid != pgid && v[i].pgid > 1 && v[i].pgid != self && v[i].pgid != flow_group &&
                    !listed(*groups, *n, v[i].pgid)) {
                    ARRAY_GROW(*groups, *n, *cap);
                    (*groups)[(*n)++] = v[i].pgid;
                }
            }
        }
    }
    free(v);
}

void proctree_signal(pid_t pgid, const pid_t *groups, size_t n, int sig)
{
    if (pgid > 0) kill(-pgid, sig);
    for (size_t i = 0; i < n; i++)
        if (groups[i] > 1) kill(-groups[i], sig);
}
