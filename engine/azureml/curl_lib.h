/* curl_lib.h — libcurl, loaded the first time flow talks to a server.
 *
 * Linked the usual way, libcurl's dependencies (LDAP, Kerberos, GnuTLS
 * through librtmp, libssh2, libpsl, …: 28 libraries on Debian) are mapped
 * and initialised at every start of flow — 3.8 ms of a 6.6 ms start on the
 * machine of bench/RESULTS.md, for a command that most runs never need.  So
 * flow opens libcurl with dlopen when it makes its first HTTP client
 * (http.c), and calls it through this table.  Each pointer has the type of
 * curl.h's declaration of the function (__typeof__), so calls are checked as
 * before.  libcurl's headers still come from libcurl4-openssl-dev through
 * pkg-config; at run time Debian's libcurl4 package provides the library. */
#ifndef FLOW_AZUREML_CURL_LIB_H
#define FLOW_AZUREML_CURL_LIB_H

#include <curl/curl.h>
#include <stddef.h>

/* The soname of Debian's libcurl (libcurl4, libcurl4-openssl-dev's libcurl.so). */
#define CURL_LIB_SONAME "libcurl.so.4"

#define CURL_LIB_FUNCTIONS(X)                                                                                 \
    X(global_init) X(global_cleanup) X(easy_init) X(easy_setopt) X(easy_getinfo) X(easy_cleanup)              \
    X(easy_strerror) X(easy_header) X(easy_nextheader) X(multi_init) X(multi_setopt) X(multi_add_handle)      \
    X(multi_remove_handle) X(multi_socket_action) X(multi_info_read) X(multi_cleanup) X(multi_strerror)       \
    X(slist_append) X(slist_free_all) X(url) X(url_set) X(url_get) X(url_cleanup) X(url_strerror) X(free)     \
    X(getdate)

struct curl_lib {
#define CURL_LIB_FIELD(name) __typeof__(&curl_##name) name;
    CURL_LIB_FUNCTIONS(CURL_LIB_FIELD)
#undef CURL_LIB_FIELD
};

/* libcurl's functions, loaded once per process; NULL with a message (kept:
 * later calls say the same) when the library or one of them is missing. */
const struct curl_lib *curl_lib_load(char *err, size_t errlen);

/* Fills *out from the library `soname` (curl_lib_load's, and tests'): 0, or
 * -1 with a message naming the library and what is missing. */
int curl_lib_open(const char *soname, struct curl_lib *out, char *err, size_t errlen);

#endif
