/* test_nofollow.c — flow's own files are never written, truncated or removed
 * through a symbolic link: not in the last component, not in any directory on
 * the way (engine/nofollow.c).  Runs in a scratch directory, with paths
 * relative to it as flow uses them. */
#include "check.h"
#include "nofollow.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];
static char err[1024];

static void put(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");
    if (f) { fputs(content, f); fclose(f); }
}

static char *get(const char *path)
{
    return read_file(path, NULL);
}

static bool is_link(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* victim/: what a planted link points to; it must come out untouched. */
static void setup(const char *name)
{
    char *dir = xasprintf("%s/%s", root, name);
    mkdir_p(dir, 0755);
    if (chdir(dir) != 0) perror(dir);
    free(dir);
    mkdir("victim", 0755);
    put("victim/file", "precious");
    mkdir(".flow", 0755);
}

static void test_open_refuses_a_link(void)
{
    setup("open");
    symlink("../victim/file", ".flow/lock");
    CHECK(nofollow_open(".flow/lock", O_RDWR | O_CREAT | O_TRUNC, 0644, err, sizeof err) < 0);
    CHECK_CONTAINS(err, "cannot open .flow/lock: .flow/lock is a symbolic link");
    char *s = get("victim/file");
    CHECK_STR(s, "precious");
    free(s);
    unlink(".flow/lock");
    int fd = nofollow_open(".flow/lock", O_RDWR | O_CREAT, 0644, err, sizeof err);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    mkdir(".flow/dir", 0755);
    CHECK(nofollow_open(".flow/dir", O_RDWR | O_CREAT, 0644, err, sizeof err) < 0);
    CHECK_CONTAINS(err, ".flow/dir is a directory where flow keeps a file: remove it");
}

static void test_a_link_on_the_way_is_refused(void)
{
    setup("way");
    symlink("../victim", ".flow/runs");
    CHECK(nofollow_mkdir_p(".flow/runs/1/logs", 0755, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot create directory .flow/runs/1/logs: .flow/runs is a symbolic link");
    CHECK(nofollow_write_atomic(".flow/runs/file", "x", 1, err, sizeof err) != 0);
    CHECK_CONTAINS(err, ".flow/runs is a symbolic link");
    CHECK(nofollow_open(".flow/runs/file", O_WRONLY | O_TRUNC, 0, err, sizeof err) < 0);
    CHECK(nofollow_symlink("1", ".flow/runs/latest", err, sizeof err) != 0);
    CHECK(nofollow_remove_tree(".flow/runs/file", err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot remove .flow/runs/file: .flow/runs is a symbolic link");
    /* nothing there behind the link is no reason to accept it (the one-call
     * check for a missing path must not say "missing" through a link) */
    CHECK(nofollow_remove_tree(".flow/runs/none", err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot remove .flow/runs/none: .flow/runs is a symbolic link");
    char *s = get("victim/file");
    CHECK_STR(s, "precious");
    free(s);
    CHECK(access("victim/1", F_OK) != 0 && access("victim/latest", F_OK) != 0);
    /* .flow itself is walked too; the directory a relative path starts from is trusted */
    rename(".flow", "state");
    symlink("state", ".flow");
    CHECK(nofollow_mkdir_p(".flow/cache", 0755, err, sizeof err) != 0);
    CHECK_CONTAINS(err, ".flow is a symbolic link");
}

static void test_mkdir_p(void)
{
    setup("mkdir");
    CHECK(nofollow_mkdir_p(".flow/a/b/./c/", 0755, err, sizeof err) == 0);
    struct stat st;
    CHECK(stat(".flow/a/b/c", &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(nofollow_mkdir_p(".flow/a/b/c", 0755, err, sizeof err) == 0);     /* already there */
    put(".flow/cache", "a file");
    CHECK(nofollow_mkdir_p(".flow/cache/values", 0755, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot create directory .flow/cache/values: .flow/cache is not a directory: "
                        "remove or rename it");
    CHECK(nofollow_mkdir_p(".flow/cache", 0755, err, sizeof err) != 0);
    CHECK_CONTAINS(err, ".flow/cache is not a directory");
}

static void test_write_atomic_replaces_a_link(void)
{
    setup("write");
    symlink("../victim/file", ".flow/state.json");
    CHECK(nofollow_write_atomic(".flow/state.json", "new", 3, err, sizeof err) == 0);
    char *s = get("victim/file"), *t = get(".flow/state.json");
    CHECK_STR(s, "precious");
    CHECK_STR(t, "new");
    CHECK(!is_link(".flow/state.json"));
    free(s);
    free(t);
    mkdir(".flow/taken", 0755);
    put(".flow/taken/x", "x");
    CHECK(nofollow_write_atomic(".flow/taken", "y", 1, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot write .flow/taken: .flow/taken is a directory");
    CHECK(nofollow_write_atomic(".flow/missing/file", "y", 1, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot write .flow/missing/file: No such file or directory");
    size_t n = 0;
    char **names = dir_list(".flow", &n);
    for (size_t i = 0; names && i < n; i++) CHECK(!strstr(names[i], ".tmp-"));   /* no leftovers */
    dir_list_free(names, n);
}

static void test_symlink_replaces_atomically(void)
{
    setup("symlink");
    CHECK(nofollow_symlink("one", ".flow/latest", err, sizeof err) == 0);
    CHECK(nofollow_symlink("two", ".flow/latest", err, sizeof err) == 0);
    char buf[16] = "";
    CHECK(readlink(".flow/latest", buf, sizeof buf - 1) == 3);
    CHECK_STR(buf, "two");
}

static void test_remove_tree_never_follows(void)
{
    setup("remove");
    mkdir(".flow/tmp", 0755);
    mkdir(".flow/tmp/run", 0755);
    put(".flow/tmp/run/out", "x");
    symlink("../../../victim", ".flow/tmp/run/escape");
    CHECK(nofollow_remove_tree(".flow/tmp/run", err, sizeof err) == 0);
    CHECK(access(".flow/tmp/run", F_OK) != 0);
    /* a link in the place of the tree is removed, not emptied */
    symlink("../victim", ".flow/tmp2");
    CHECK(nofollow_remove_tree(".flow/tmp2", err, sizeof err) == 0);
    CHECK(!is_link(".flow/tmp2"));
    char *s = get("victim/file");
    CHECK_STR(s, "precious");
    free(s);
    CHECK(nofollow_remove_tree(".flow/nothing/here", err, sizeof err) == 0);   /* missing: fine */
    put(".flow/plain", "x");                                                       /* a file on the way is not */
    CHECK(nofollow_remove_tree(".flow/plain/here", err, sizeof err) != 0);
    CHECK_CONTAINS(err, ".flow/plain is not a directory");
    CHECK(nofollow_remove_tree(".flow/tmp/none", err, sizeof err) == 0);
}

static void test_absolute_paths(void)
{
    setup("absolute");
    char *p = xasprintf("%s/absolute/.flow/x/y", root);
    CHECK(nofollow_mkdir_p(p, 0755, err, sizeof err) == 0);
    free(p);
    p = xasprintf("%s/absolute/.flow/x/y/f", root);
    CHECK(nofollow_write_atomic(p, "z", 1, err, sizeof err) == 0);
    free(p);
    CHECK(nofollow_write_atomic("/", "z", 1, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "not a file name");
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/flow-test-nofollow-XXXXXX");
    if (!mkdtemp(root)) { perror("mkdtemp"); return 1; }
    RUN(test_open_refuses_a_link);
    RUN(test_a_link_on_the_way_is_refused);
    RUN(test_mkdir_p);
    RUN(test_write_atomic_replaces_a_link);
    RUN(test_symlink_replaces_atomically);
    RUN(test_remove_tree_never_follows);
    RUN(test_absolute_paths);
    if (chdir("/") == 0) {
        char *cmd = xasprintf("rm -rf '%s'", root);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
        free(cmd);
    }
    return CHECK_DONE("nofollow");
}
