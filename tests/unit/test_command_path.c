/* test_command_path.c — argv[0] found in PATH once: the first directory that
 * holds it as a runnable file, as execvp finds it; kept until forgotten or
 * PATH changes; no answer (posix_spawnp decides) for a name with a '/', a
 * PATH with an empty or relative entry before it, or a name found nowhere. */
#include "check.h"
#include "command_path.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

static void make_file(const char *dir, const char *name, mode_t mode)
{
    char *path = xasprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs("#!/bin/sh\n", f);
    fclose(f);
    chmod(path, mode);
    free(path);
}

static void set_path(const char *fmt, const char *a, const char *b)
{
    char *v = xasprintf(fmt, a, b);
    setenv("PATH", v, 1);
    free(v);
}

static void test_first_runnable_in_order(void)
{
    char *d1 = xasprintf("%s/d1", root), *d2 = xasprintf("%s/d2", root);
    mkdir(d1, 0755);
    mkdir(d2, 0755);
    make_file(d1, "tool", 0644);                      /* not executable: passed over */
    make_file(d2, "tool", 0755);
    char *dir_named_like_it = xasprintf("%s/dirtool", d1);
    mkdir(dir_named_like_it, 0755);                    /* a directory: passed over */
    free(dir_named_like_it);
    make_file(d2, "dirtool", 0755);
    set_path("%s:%s", d1, d2);
    char *want = xasprintf("%s/tool", d2);
    CHECK_STR(command_path_find("tool"), want);
    const char *first = command_path_find("tool");
    CHECK(first == command_path_find("tool"));        /* kept */
    free(want);
    want = xasprintf("%s/dirtool", d2);
    CHECK_STR(command_path_find("dirtool"), want);
    free(want);
    CHECK(command_path_find("nowhere") == NULL);
    CHECK(command_path_find("./tool") == NULL);
    CHECK(command_path_find("") == NULL);

    /* kept even once gone, until forgotten */
    char *gone = xasprintf("%s/tool", d2);
    unlink(gone);
    CHECK(command_path_find("tool") != NULL);
    command_path_forget("tool");
    CHECK(command_path_find("tool") == NULL);
    make_file(d2, "tool", 0755);
    CHECK_STR(command_path_find("tool"), gone);
    free(gone);

    /* a new PATH: looked up again */
    set_path("%s:%s", d2, d1);
    make_file(d1, "tool", 0755);
    want = xasprintf("%s/tool", d2);
    CHECK_STR(command_path_find("tool"), want);
    free(want);
    set_path("%s:%s", d1, d2);
    want = xasprintf("%s/tool", d1);
    CHECK_STR(command_path_find("tool"), want);
    free(want);
    free(d1);
    free(d2);
}

static void test_entries_it_cannot_stand_for(void)
{
    char *d2 = xasprintf("%s/d2", root);
    set_path("%s::%s", "/nonexistent", d2);            /* an empty entry: the working directory */
    CHECK(command_path_find("dirtool") == NULL);
    set_path("%s:bin:%s", "/nonexistent", d2);         /* a relative one */
    CHECK(command_path_find("dirtool") == NULL);
    set_path("%s:%s:bin", d2, "/nonexistent");         /* found before it: fine */
    CHECK(command_path_find("dirtool") != NULL);
    unsetenv("PATH");
    CHECK(command_path_find("dirtool") == NULL);
    free(d2);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/flow-test-command-path-XXXXXX");
    if (!mkdtemp(root)) { perror("mkdtemp"); return 1; }
    char *saved = getenv("PATH") ? xstrdup(getenv("PATH")) : NULL;
    RUN(test_first_runnable_in_order);
    RUN(test_entries_it_cannot_stand_for);
    command_path_reset();
    if (saved) setenv("PATH", saved, 1);
    free(saved);
    char *cmd = xasprintf("rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
    free(cmd);
    return CHECK_DONE("command_path");
}
