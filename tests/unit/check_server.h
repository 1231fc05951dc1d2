/* check_server.h — for the unit tests that start a local server (the HTTPS
 * test server, the token server, Azurite): stopping with a message and the
 * server killed, the repository's root, loopback ports. */
#ifndef FLOW_CHECK_SERVER_H
#define FLOW_CHECK_SERVER_H
#include "check.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>

extern char **environ;

/* The server the test started (0 or -1: none); check_die kills it. */
static pid_t check_server_pid;

/* "<test>: message", the server killed, exit 1: a set-up that cannot go on. */
__attribute__((format(printf, 1, 2), noreturn)) static inline void check_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program_invocation_short_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (check_server_pid > 0) kill(check_server_pid, SIGKILL);
    exit(1);
}

static inline char *check_repo_root_or_die(void)
{
    char *root = check_repo_root();
    if (!root) check_die("cannot find the repository from my own binary's path");
    return root;
}

/* Starts the server argv[0] (a path) with no signal blocked (the test's
 * loop may block some), fa's redirections (or none), as check_server_pid. */
static inline void check_start_server(char *const argv[], const posix_spawn_file_actions_t *fa)
{
    posix_spawnattr_t attr;
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    int rc = posix_spawn(&check_server_pid, argv[0], fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) check_die("cannot start %s: %s", argv[0], strerror(rc));
}

/* Whether the server has exited (then check_server_pid is -1). */
static inline bool check_server_exited(void)
{
    int status;
    if (check_server_pid <= 0) return true;
    if (waitpid(check_server_pid, &status, WNOHANG) != check_server_pid) return false;
    check_server_pid = -1;
    return true;
}

/* Stops the server with `sig` and reaps it. */
static inline void check_stop_server(int sig)
{
    if (check_server_pid <= 0) return;
    kill(check_server_pid, sig);
    waitpid(check_server_pid, NULL, 0);
    check_server_pid = -1;
}

/* A loopback port nothing listens on: bound, then closed (a server may take
 * it; a connection to it is refused). */
static inline int check_loopback_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(s, (struct sockaddr *)&a, &len) != 0)
        check_die("cannot find a free port: %s", strerror(errno));
    close(s);
    return ntohs(a.sin_port);
}

/* Whether something listens on the loopback port. */
static inline bool check_port_listening(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    bool ok = s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0) close(s);
    return ok;
}

#endif
