/* test_serial.c — the ordered background thread (serial.h): jobs run in the
 * order queued, on a thread other than the queuer's, each once, with the
 * data queued with them (whatever its size, aligned); what they wrote is the
 * queuer's to read after serial_sync, however many were queued and whether
 * or not the worker was busy; a sync with nothing queued returns at once;
 * serial_free runs what is still queued. */
#include "check.h"
#include "serial.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

struct record {
    size_t *order;             /* the i of each job, in the order run */
    size_t n, cap;
    pthread_t queuer;
    bool off_thread;           /* every job ran on a thread other than the queuer's */
    bool data_ok;              /* every job's data was what was queued, aligned */
    size_t data_sum;
};

/* A job's data: len bytes, the first a size_t (when len allows), the rest
 * bytes that say i and their place. */
static void make_data(unsigned char *to, size_t i, size_t len)
{
    for (size_t k = 0; k < len; k++) to[k] = (unsigned char)(i * 31 + k);
    if (len >= sizeof(size_t)) memcpy(to, &i, sizeof i);
}

static void note(void *ctx, size_t i, const void *data, size_t len)
{
    struct record *r = ctx;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->order = realloc(r->order, r->cap * sizeof *r->order);
    }
    r->order[r->n++] = i;
    if (pthread_equal(pthread_self(), r->queuer)) r->off_thread = false;
    if (!len) {
        if (data) r->data_ok = false;
        return;
    }
    unsigned char want[512];
    make_data(want, i, len);
    if (!data || (uintptr_t)data % 16 != 0 || len > sizeof want || memcmp(data, want, len) != 0) r->data_ok = false;
    else if (len >= sizeof(size_t)) r->data_sum += *(const size_t *)data;
}

static void slow(void *ctx, size_t i, const void *data, size_t len)
{
    nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);      /* 20 ms: the queuer goes on meanwhile */
    note(ctx, i, data, len);
}

/* Queues note(i) with len bytes of data: through serial_push or, every
 * other job, serial_push_space. */
static void push_with_data(struct serial *s, serial_fn fn, size_t i, size_t len)
{
    unsigned char data[512];
    make_data(data, i, len);
    if (i % 2) memcpy(serial_push_space(s, fn, i, len), data, len);
    else serial_push(s, fn, i, data, len);
}

static struct record new_record(void)
{
    return (struct record){ .queuer = pthread_self(), .off_thread = true, .data_ok = true };
}

static bool in_order(const struct record *r, size_t n)
{
    if (r->n != n) return false;
    for (size_t k = 0; k < n; k++)
        if (r->order[k] != k) return false;
    return true;
}

static void test_jobs_run_in_order_off_the_queuer_thread(void)
{
    struct record r = new_record();
    struct serial *s = serial_new(&r);
    CHECK(s != NULL);
    size_t want = 0;
    for (size_t i = 0; i < 100000; i++) {
        size_t len = i % 7 == 0 ? 0 : i % 500 + 1;    /* none, a few bytes, hundreds */
        if (len >= sizeof(size_t)) want += i;
        push_with_data(s, note, i, len);
        if (i % 9999 == 0) serial_sync(s);       /* a barrier now and then, jobs left queued between */
    }
    serial_sync(s);
    CHECK(in_order(&r, 100000));
    CHECK(r.off_thread);
    CHECK(r.data_ok);
    CHECK(r.data_sum == want);
    CHECK(serial_stats(s).jobs == 100000);
    serial_free(s);
    free(r.order);
}

static void test_sync_waits_for_a_busy_worker(void)
{
    struct record r = new_record();
    struct serial *s = serial_new(&r);
    serial_push(s, slow, 0, NULL, 0);
    serial_sync(s);
    /* the worker busy with the slow ones, the queue filling behind them:
     * handed-over groups are appended to, their data with them */
    for (size_t i = 1; i <= 3; i++) push_with_data(s, slow, i, 24);
    for (size_t i = 4; i < 3000; i++) push_with_data(s, note, i, i % 300 + 1);
    serial_sync(s);
    CHECK(in_order(&r, 3000));
    CHECK(r.data_ok);
    serial_free(s);
    free(r.order);
}

static void test_sync_with_nothing_queued(void)
{
    struct record r = new_record();
    struct serial *s = serial_new(&r);
    serial_sync(s);
    serial_sync(s);
    CHECK(r.n == 0);
    CHECK(serial_stats(s).jobs == 0);
    serial_push(s, note, 0, NULL, 0);
    serial_sync(s);
    serial_sync(s);
    CHECK(in_order(&r, 1));
    CHECK(r.data_ok);
    serial_free(s);
    free(r.order);
}

static void test_free_runs_what_is_queued(void)
{
    struct record r = new_record();
    struct serial *s = serial_new(&r);
    serial_push(s, slow, 0, NULL, 0);
    for (size_t i = 1; i < 5000; i++) push_with_data(s, note, i, 8);
    serial_free(s);
    CHECK(in_order(&r, 5000));
    CHECK(r.data_ok);
    CHECK(r.data_sum == 4999 * 5000 / 2);
    free(r.order);
    serial_free(NULL);
}

int main(void)
{
    RUN(test_jobs_run_in_order_off_the_queuer_thread);
    RUN(test_sync_waits_for_a_busy_worker);
    RUN(test_sync_with_nothing_queued);
    RUN(test_free_runs_what_is_queued);
    return CHECK_DONE("serial");
}
