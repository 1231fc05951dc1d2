/* crypto_lib.c — see crypto_lib.h. */
#include "crypto_lib.h"

#include "util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

/* RTLD_DEEPBIND: libcrypto's own 3,000 bound-now relocations then resolve in
 * libcrypto (and libc) first, not after a search of the 8 objects flow was
 * started with.  Measured on a one-step no-op run: dlopen with it costs 0.6 M
 * instructions less than linking libcrypto did, without it 0.9 M more.  The
 * sanitizers refuse the flag (their interceptors would be bypassed), so a
 * `make asan` build (or one with -fsanitize=thread) opens it plainly. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRYPTO_LIB_DLOPEN_FLAGS (RTLD_LAZY | RTLD_LOCAL)
#else
#define CRYPTO_LIB_DLOPEN_FLAGS (RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND)
#endif

static struct crypto_lib lib;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool loaded;

int crypto_lib_open(const char *soname, struct crypto_lib *out, char *err, size_t errlen)
{
    void *h = dlopen(soname, CRYPTO_LIB_DLOPEN_FLAGS);
    if (!h) {
        errf(err, errlen, "cannot load libcrypto (%s): %s; it comes with Debian's libssl3 package "
             "(`make deps` installs it)", soname, dlerror());
        return -1;
    }
    /* Never unloaded: digests and keys it returns live as long as the process. */
#define CRYPTO_LIB_LOAD(name)                                                                                \
    if (!(*(void **)&out->name = dlsym(h, #name))) {                                                         \
        errf(err, errlen, "%s has no %s: OpenSSL 3 is needed", soname, #name);                               \
        dlclose(h);                                                                                          \
        return -1;                                                                                           \
    }
    CRYPTO_LIB_FUNCTIONS(CRYPTO_LIB_LOAD)
#undef CRYPTO_LIB_LOAD
    return 0;
}

static void load(void)
{
    /* a failure leaves its message */
    if (crypto_lib_open(CRYPTO_LIB_SONAME, &lib, load_error, sizeof load_error) == 0) atomic_store(&loaded, true);
}

bool crypto_lib_loaded(void)
{
    return atomic_load_explicit(&loaded, memory_order_acquire);
}

const struct crypto_lib *crypto_lib(void)
{
    if (crypto_lib_loaded()) return &lib;       /* (every hash asks: no pthread_once each time) */
    pthread_once(&once, load);
    if (load_error[0]) {
        /* As the dynamic loader ended flow when libcrypto was linked: the
         * installation is broken, nothing flow does can go on (this may be
         * a pool thread, hence _exit; what flow writes survives a kill). */
        fprintf(stderr, "flow: %s\n", load_error);
        _exit(127);
    }
    return &lib;
}
