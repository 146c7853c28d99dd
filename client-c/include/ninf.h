/*
 * ninf.h: Ninf's C API over the grid, as Ninf's users wrote it.
 *
 *     double A[N*N], B[N*N], C[N*N];
 *     if (Ninf_call("mmul", N, A, B, C) != NINF_OK)
 *         fprintf(stderr, "mmul: %s\n", Ninf_error());
 *
 * Routines are called by name; the metaserver places each call (or, inside a transaction,
 * the whole graph). The grid is the one the default grid file names ($NINF_GRID, else the
 * file `ninf up` writes), connected on the first call; grpc_initialize(path) before the
 * first call picks another. Arguments follow the routine's IDL declaration exactly as for
 * grpc_call (see grpc.h).
 *
 * Transactions (the metaserver paper's example): the calls between Ninf_transaction_begin() and
 * Ninf_transaction_end() are recorded, not run; an array written by one call and passed
 * to a later one is an edge, and its value goes from server to server. Ninf_transaction_end
 * runs them as one graph and writes every written array in place, except those named by
 * Ninf_transaction_scratch. Recorded arrays must stay alive and untouched until then.
 */
#ifndef NINF_NINF_H
#define NINF_NINF_H

#include "grpc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NINF_OK 0
#define NINF_ERROR (-1)

/* Waits for an asynchronous call: NINF_OK, or NINF_ERROR if it failed. */
int Ninf_wait(int session_id);
/* Waits for every asynchronous call: NINF_ERROR if any failed. */
int Ninf_wait_all(void);
int Ninf_transaction_begin(void);
int Ninf_transaction_end(void);
/* Inside a transaction: the `bytes` bytes at `array` are an intermediate. The calls that
 * write it leave its final value on the grid, later calls read it there, and
 * Ninf_transaction_end writes nothing back into it, so it never travels to the client.
 * Before or after the calls that name it. NINF_ERROR outside a transaction. */
int Ninf_transaction_scratch(const void *array, size_t bytes);
/* What the calling thread's last failed Ninf or GridRPC function met, in words. */
const char *Ninf_error(void);

/* Internals of Ninf_call (not for direct use). */
grpc_function_handle_t *ninf_function(const char *name);
int ninf_call_named(grpc_function_handle_t *handle, int asynchronous,
                    const ninf_value_t *values, int count);

static inline int ninf_call_by_name(const char *name, int asynchronous, va_list *ap) {
    grpc_function_handle_t *handle = ninf_function(name);
    if (handle == NULL) return NINF_ERROR;
    ninf_value_t values[NINF_MAX_ARGUMENTS];
    int count = ninf_collect_values(handle, ap, values);
    if (count < 0) return NINF_ERROR;
    return ninf_call_named(handle, asynchronous, values, count);
}

/* Calls routine `name` and waits: NINF_OK or NINF_ERROR (Ninf_error says why). Inside a
 * transaction, records the call instead. */
static inline int Ninf_call(const char *name, ...) {
    va_list ap;
    va_start(ap, name);
    int result = ninf_call_by_name(name, 0, &ap);
    va_end(ap);
    return result;
}

/* Starts routine `name`: its session id (for Ninf_wait), or NINF_ERROR. */
static inline int Ninf_call_async(const char *name, ...) {
    va_list ap;
    va_start(ap, name);
    int result = ninf_call_by_name(name, 1, &ap);
    va_end(ap);
    return result;
}

#ifdef __cplusplus
}
#endif

#endif /* NINF_NINF_H */
