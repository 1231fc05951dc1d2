/* curl_lib.c — see curl_lib.h. */
#include "azureml/curl_lib.h"

#include "util.h"

#include <dlfcn.h>
#include <pthread.h>

static struct curl_lib lib;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

int curl_lib_open(const char *soname, struct curl_lib *out, char *err, size_t errlen)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        errf(err, errlen, "cannot load libcurl (%s): %s; it comes with Debian's libcurl4 package "
             "(`make deps` installs it)", soname, dlerror());
        return -1;
    }
    /* Never unloaded: what it returns lives as long as the process. */
#define CURL_LIB_LOAD(name)                                                                                  \
    if (!(*(void **)&out->name = dlsym(h, "curl_" #name))) {                                                \
        errf(err, errlen, "%s has no curl_%s: libcurl 7.85 or newer is needed", soname, #name);            \
        dlclose(h);                                                                                          \
        return -1;                                                                                           \
    }
    CURL_LIB_FUNCTIONS(CURL_LIB_LOAD)
#undef CURL_LIB_LOAD
    return 0;
}

static void load(void)
{
    curl_lib_open(CURL_LIB_SONAME, &lib, load_error, sizeof load_error);    /* a failure leaves its message */
}

const struct curl_lib *curl_lib_load(char *err, size_t errlen)
{
    pthread_once(&once, load);
    if (load_error[0]) {
        errf(err, errlen, "%s", load_error);
        return NULL;
    }
    return &lib;
}
