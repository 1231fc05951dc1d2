/* http.h — HTTPS requests on the event loop, for the Azure ML client.
 *
 * One libcurl multi handle per client, driven by the engine's loop
 * (CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION onto loop_watch and
 * loop timers): no thread per request, no blocking call on the loop, and the
 * multi handle's connection cache reuses connections across requests.
 *
 * The policy, in one place (azure-core's RetryPolicy is the reference):
 * - every request carries a fresh `x-ms-client-request-id` (a UUID v4);
 * - 408, 429, 500, 502, 503, 504 and transport errors (connect, reset, timeout)
 *   are retried with exponential back-off (base × 2^(n-1), ±20 % jitter,
 *   capped) or after `Retry-After` (seconds or an HTTP date; azure-core's
 *   x-ms-retry-after-ms first) when the server says so, at most `max_retries`
 *   times; no other status is retried, nor a certificate that does not
 *   verify or a host name that does not resolve;
 * - TLS verification is always on; `ca_file` adds a CA to the system's (the
 *   system directory stays trusted);
 * - nothing secret is ever put into a message: URLs in messages lose their
 *   query string (a SAS signature lives there), headers are never printed.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_HTTP_H
#define FLOW_AZUREML_HTTP_H

#include "loop.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_client;
struct http_transfer;

struct http_options {
    const char *ca_file;          /* an extra CA bundle (PEM), or NULL */
    double connect_timeout;       /* seconds; 0: 10 */
    double timeout;               /* per attempt, seconds; 0: 120 */
    int max_retries;              /* < 0: none; 0: the default, 10 */
    double backoff_base;          /* first back-off, seconds; 0: 0.8 */
    double backoff_max;           /* cap on one back-off, seconds; 0: 120 */
    /* Called once per attempt that got an answer or failed, for `-v`: a line
     * such as "PUT https://host/path → 201 (x-ms-request-id …) 0.12 s".  The
     * line holds no query string and no header. NULL: nothing. */
    void (*trace)(void *ctx, const char *line);
    void *trace_ctx;
};

/* Signs one attempt (Azure Storage's Shared Key): given the attempt's method,
 * URL and header lines as they will be sent (its fresh
 * x-ms-client-request-id included) and the body's length, the header lines
 * to add ("Name: value", '\n'-separated; malloc'd, wiped and freed by the
 * client), or NULL to fail the attempt.  Called at the start of every
 * attempt, so a retry is signed anew.  Must not call into the client. */
typedef char *(*http_sign_fn)(void *ctx, const char *method, const char *url, const char *const *headers,
                              uint64_t content_length);

/* What to send.  Every string and the body are copied by http_send. */
struct http_request {
    const char *method;              /* "GET", "PUT", "POST", "DELETE", "HEAD" */
    const char *url;
    const char *const *headers;      /* "Name: value" lines; NULL-terminated, or NULL */
    const char *body;                /* NULL: no body (POST sends Content-Length: 0) */
    size_t body_len;
    /* Or the body is a file's byte range, read as it is sent (a snapshot's
     * large file is never held in memory).  Used when body_file is set. */
    const char *body_file;
    uint64_t body_offset, body_len_file;
    double timeout;                  /* overrides http_options.timeout when > 0 */
    int max_retries;                 /* overrides http_options.max_retries when > 0; < 0: none */
    /* A 2xx answer's body written into sink_fd at sink_offset as it arrives
     * (pwrite; a download is never held in memory) instead of resp->body; an
     * error's body still comes in memory, for its message.  Each attempt
     * writes again from sink_offset.  Used when `sink` is set; the fd is
     * duplicated by http_send, so the caller may close its own at once. */
    bool sink;
    int sink_fd;
    uint64_t sink_offset;
    /* Or NULL; sign_ctx must outlive the transfer (until done returns). */
    http_sign_fn sign;
    void *sign_ctx;
};

/* The answer.  Valid during the done callback only. */
struct http_response {
    long status;                     /* 0: no answer (transport error or cancelled) */
    const char *body;                /* NUL-terminated (body_len excludes the NUL); "" if none */
    size_t body_len;
    const char *request_id;          /* x-ms-request-id, or "" */
    const char *client_request_id;   /* what we sent on the last attempt */
    const char *location;            /* Location header, or NULL */
    const char *content_type;        /* or NULL */
    double retry_after;              /* seconds the server asked for; < 0: none */
    int attempts;                    /* 1 + the retries made */
    bool cancelled;
    const char *error;               /* status 0: why (curl's message), else NULL */
    const char *url;                 /* the request's URL as messages show it (http_url_for_display) */
    uint64_t sink_written;           /* with http_request.sink: bytes of the last attempt's body written */
    /* Every header of the answer, for http_response_header: "name\0value\0"
     * pairs, names lowercased.  headers_len 0: none. */
    const char *headers;
    size_t headers_len;
};

/* The value of the answer's header `name` (any case), or NULL; the first
 * one when it came more than once.  Valid as long as resp. */
const char *http_response_header(const struct http_response *resp, const char *name);

typedef void (*http_done_fn)(void *arg, const struct http_response *resp);

/* NULL with a message if libcurl cannot be set up, or ca_file cannot be read.
 * At most 8 connections to one host are open at a time; further requests
 * wait in libcurl for one (that wait counts toward their timeout). */
struct http_client *http_client_new(struct loop *loop, const struct http_options *opt, char *err, size_t errlen);
/* Transfers still in flight are cancelled; their callbacks are not called.
 * May be called from a done callback (the transfer being delivered is then
 * no longer the client's; its callback was called). */
void http_client_free(struct http_client *c);

/* Starts a request (with its retries).  done(arg, resp) is always called
 * later from the loop, never from within http_send, exactly once (unless the
 * client is freed first); the transfer is freed after done returns.  NULL
 * with a message only when the request cannot be made at all (a bad method,
 * URL or header line, a body for GET or HEAD, a body file that cannot be
 * opened or is shorter than its range).
 *
 * Re-entrancy: done may call http_send, http_cancel (of any transfer; of its
 * own it is a no-op) and http_client_free.  trace must not call into the
 * client: it runs in the middle of an attempt's bookkeeping. */
struct http_transfer *http_send(struct http_client *c, const struct http_request *req, http_done_fn done,
                                void *arg, char *err, size_t errlen);
/* Stops a transfer (and any retry it waits to make): done is called later,
 * never from within http_cancel, with status 0 and cancelled true.  When the
 * answer already came and only its delivery is pending, done gets that
 * answer instead (a PUT that took effect is reported as such).  t must not
 * be used once its done has returned: it is freed then. */
void http_cancel(struct http_transfer *t);
/* Whether t waits to retry (its back-off after a 429, a 5xx, a dropped
 * connection): none of its requests is on the wire now. */
bool http_waiting(const struct http_transfer *t);

/* The loop the client runs on (for a caller's own timers). */
struct loop *http_client_loop(const struct http_client *c);

/* How many transfers are in flight (waiting to retry included). */
size_t http_client_in_flight(const struct http_client *c);

/* "scheme://host/path" of a URL, without its query string, fragment or
 * user:password@, into buf (truncated to fit): what a message may show. */
void http_url_for_display(const char *url, char *buf, size_t buflen);

/* An error message for a failed response, into buf: for an ARM error body
 * ({"error": {"code", "message"}}) "CODE: message", for an Entra one
 * ({"error", "error_description"}) likewise, else the reason phrase and the
 * start of the body ("Bad Gateway: <html>…"); always followed by
 * " (HTTP 404, x-ms-request-id …)" when there was an answer.  Without one:
 * "could not reach https://host/path: <curl's message> (after 4 attempts)". */
void http_error_message(const struct http_response *resp, char *buf, size_t buflen);

/* The non-empty string field `key` of a JSON answer's object, or NULL. */
struct cJSON;
const char *http_json_string(const struct cJSON *obj, const char *key);

/* The same, with the error's code and message as the caller read them from
 * a body of its own format (the Blob service's XML): "CODE: message (HTTP
 * 403, x-ms-request-id …)"; http_error_message's when both are NULL. */
void http_error_message_parsed(const struct http_response *resp, const char *code, const char *message, char *buf,
                               size_t buflen);

/* Percent-encodes s (RFC 3986 unreserved kept) onto a malloc'd string. */
char *http_urlencode(const char *s);

#endif
