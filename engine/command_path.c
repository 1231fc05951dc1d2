/* command_path.c — see command_path.h. */
#include "command_path.h"

#include "strmap.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* name -> index into paths; paths[i] NULL once forgotten.  The loop's thread only. */
static struct strmap found;
static char **paths;
static size_t n_paths, cap_paths;
static char *for_path;                 /* the PATH the table was made for */

void command_path_reset(void)
{
    strmap_free(&found);
    memset(&found, 0, sizeof found);
    for (size_t i = 0; i < n_paths; i++) free(paths[i]);
    free(paths);
    paths = NULL;
    n_paths = cap_paths = 0;
    free(for_path);
    for_path = NULL;
}

static bool runnable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The first PATH directory holding `name` as a runnable file, as execvp
 * would find it; NULL when PATH has an entry this cannot stand for (empty or
 * relative) before it, or nothing holds it. */
static char *search(const char *path_var, const char *name)
{
    const char *p = path_var;
    for (;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || p[0] != '/') return NULL;
        char *candidate = xasprintf("%.*s/%s", (int)len, p, name);
        if (runnable(candidate)) return candidate;
        free(candidate);
        if (!end) return NULL;
        p = end + 1;
    }
}

const char *command_path_find(const char *name)
{
    const char *path_var = getenv("PATH");
    if (!name || !*name || strchr(name, '/') || !path_var || !*path_var) return NULL;
    if (!for_path || strcmp(for_path, path_var) != 0) {
        command_path_reset();
        for_path = xstrdup(path_var);
    }
    size_t i;
    if (strmap_get(&found, name, &i) && paths[i]) return paths[i];
    char *where = search(path_var, name);
    if (!where) return NULL;
    if (strmap_get(&found, name, &i)) {
        paths[i] = where;
        return where;
    }
    if (n_paths == cap_paths) {
        cap_paths = cap_paths ? 2 * cap_paths : 16;
        paths = xrealloc(paths, cap_paths * sizeof *paths);
    }
    paths[n_paths] = where;
    strmap_put(&found, name, n_paths);
    return paths[n_paths++];
}

void command_path_forget(const char *name)
{
    size_t i;
    if (name && strmap_get(&found, name, &i)) {
        free(paths[i]);
        paths[i] = NULL;
    }
}
