/* The GridRPC API against a running grid, one check per line of output; exits 1 at the
 * first failed check. Arguments: GRID_FILE MISSING_FILE MALFORMED_FILE SERVER_ADDRESS
 * WRONG_TOKEN_GRID_FILE (the same grid, with a token it does not accept). */
#define _POSIX_C_SOURCE 200809L
#include <grpc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static void not_initialized(void) {
    grpc_function_handle_t handle;
    grpc_function_handle_t *found;
    grpc_sessionid_t id, ids[1] = {0};
    EXPECT(grpc_finalize(), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_function_handle_default(&handle, "mmul"), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_function_handle_init(&handle, "127.0.0.1:1", "mmul"), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_function_handle_destruct(&handle), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_get_handle(&found, 0), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_call(&handle, 1), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_call_async(&handle, &id, 1), GRPC_NOT_INITIALIZED);
    ASSERT(id == GRPC_SESSIONID_VOID);
    grpc_arg_stack_t *stack = grpc_arg_stack_new(1);
    EXPECT(grpc_call_argstack(&handle, stack), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_call_argstack_async(&handle, &id, stack), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_arg_stack_destruct(stack), GRPC_NO_ERROR);
    EXPECT(grpc_probe(0), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_probe_or(ids, 1, &id), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_cancel(0), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_cancel_all(), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_wait(0), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_wait_and(ids, 1), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_wait_or(ids, 1, &id), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_wait_all(), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_wait_any(&id), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_get_error(0), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_get_failed_sessionid(&id), GRPC_NOT_INITIALIZED);
    printf("ok every function before grpc_initialize is GRPC_NOT_INITIALIZED\n");
}

static void configuration(const char *missing, const char *malformed) {
    EXPECT(grpc_initialize(missing), GRPC_CONFIGFILE_NOT_FOUND);
    ASSERT(strstr(ninf_error_message(), missing) != NULL);
    EXPECT(grpc_initialize(malformed), GRPC_CONFIGFILE_ERROR);
    printf("ok a missing grid file is GRPC_CONFIGFILE_NOT_FOUND, a malformed one GRPC_CONFIGFILE_ERROR\n");
}

static void blocking_mmul(grpc_function_handle_t *handle, const char *how) {
    enum { N = 5 };
    double a[N * N], b[N * N], c[N * N], expected[N * N];
    fill(a, N * N, 1);
    fill(b, N * N, 2);
    memset(c, 0, sizeof c);
    local_mmul(N, a, b, expected);
    EXPECT(grpc_call(handle, N, a, b, c), GRPC_NO_ERROR);
    for (int i = 0; i < N * N; i++) ASSERT(c[i] == expected[i]);
    printf("ok grpc_call of mmul %s equals the local product\n", how);
}

static void handles(const char *server) {
    grpc_function_handle_t placed, named, unknown;
    EXPECT(grpc_function_handle_default(&placed, "mmul"), GRPC_NO_ERROR);
    blocking_mmul(&placed, "placed by the metaserver");
    EXPECT(grpc_function_handle_init(&named, server, "mmul"), GRPC_NO_ERROR);
    blocking_mmul(&named, "on a named server");
    EXPECT(grpc_function_handle_default(&unknown, "no_such_routine"), GRPC_FUNCTION_NOT_FOUND);
    EXPECT(grpc_function_handle_init(&unknown, "127.0.0.1:1", "mmul"), GRPC_SERVER_NOT_FOUND);
    EXPECT(grpc_function_handle_destruct(&named), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&named), GRPC_INVALID_FUNCTION_HANDLE);
    EXPECT(grpc_call(&named, 1), GRPC_INVALID_FUNCTION_HANDLE);
    grpc_function_handle_t garbage;
    memset(&garbage, 0x5a, sizeof garbage);
    EXPECT(grpc_call(&garbage, 1), GRPC_INVALID_FUNCTION_HANDLE);
    EXPECT(grpc_function_handle_destruct(&placed), GRPC_NO_ERROR);
    printf("ok handles: default, named server, unknown routine, destructed and garbage handles\n");
}

/* A routine whose process exits or dies by a signal fails its session, as the routine's
 * failure: GRPC_SESSION_FAILED saying how the process ended, tried on one other server at
 * most; a named server's call is not tried elsewhere. The grid keeps serving. */
static void crashes(const char *server) {
    grpc_function_handle_t exits, segfault, named, noop;
    EXPECT(grpc_function_handle_default(&exits, "exit"), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_default(&segfault, "segfault"), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_init(&named, server, "exit"), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_default(&noop, "noop"), GRPC_NO_ERROR);
    EXPECT(grpc_call(&exits, 10), GRPC_SESSION_FAILED);
    ASSERT(strstr(ninf_error_message(), "exited with status 10") != NULL);
    ASSERT(strstr(ninf_error_message(), "crashed on ") != NULL);
    ASSERT(strstr(ninf_error_message(), ", then on ") != NULL);
    printf("ok a routine calling _exit(10): GRPC_SESSION_FAILED (%s)\n", ninf_error_message());
    grpc_sessionid_t id;
    EXPECT(grpc_call_async(&segfault, &id, 0), GRPC_NO_ERROR);
    EXPECT(grpc_wait(id), GRPC_SESSION_FAILED);
    EXPECT(grpc_get_error(id), GRPC_SESSION_FAILED);
    ASSERT(strstr(ninf_session_error_message(id), "SIGSEGV") != NULL);
    EXPECT(grpc_call(&named, 11), GRPC_SESSION_FAILED);
    ASSERT(strstr(ninf_error_message(), "exited with status 11") != NULL);
    ASSERT(strstr(ninf_error_message(), ", then on ") == NULL);
    EXPECT(grpc_call(&noop, 0), GRPC_NO_ERROR);
    printf("ok a segfault and a named server's crash fail their sessions; the grid still serves\n");
    EXPECT(grpc_function_handle_destruct(&exits), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&segfault), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&named), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&noop), GRPC_NO_ERROR);
}

static void bad_arguments(void) {
    grpc_function_handle_t handle;
    EXPECT(grpc_function_handle_default(&handle, "mmul"), GRPC_NO_ERROR);
    double a[4] = {1, 2, 3, 4}, c[4];
    EXPECT(grpc_call(&handle, 2, a, NULL, c), GRPC_OTHER_ERROR_CODE);
    ASSERT(strstr(ninf_error_message(), "argument `B` of `mmul` is NULL") != NULL);
    EXPECT(grpc_call(&handle, -2, a, a, c), GRPC_OTHER_ERROR_CODE);
    printf("ok bad arguments are refused by name: %s\n", ninf_error_message());
    EXPECT(grpc_function_handle_destruct(&handle), GRPC_NO_ERROR);
}

static void sessions(void) {
    grpc_function_handle_t sleep_ms, fail, echo;
    grpc_function_handle_t *found;
    grpc_sessionid_t slow, failing, id;
    EXPECT(grpc_function_handle_default(&sleep_ms, "sleep_ms"), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_default(&fail, "fail"), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_default(&echo, "slow_echo"), GRPC_NO_ERROR);

    EXPECT(grpc_call_async(&sleep_ms, &slow, 1500), GRPC_NO_ERROR);
    ASSERT(slow != GRPC_SESSIONID_VOID);
    EXPECT(grpc_probe(slow), GRPC_NOT_COMPLETED);
    EXPECT(grpc_get_error(slow), GRPC_NO_ERROR); /* its error so far: none */
    EXPECT(grpc_probe_or(&slow, 1, &id), GRPC_NONE_COMPLETED);
    EXPECT(grpc_get_handle(&found, slow), GRPC_NO_ERROR);
    ASSERT(found == &sleep_ms);
    EXPECT(grpc_wait(slow), GRPC_NO_ERROR);
    EXPECT(grpc_get_error(slow), GRPC_NO_ERROR);
    printf("ok grpc_probe answers GRPC_NOT_COMPLETED and grpc_get_error GRPC_NO_ERROR while a call runs\n");

    grpc_sessionid_t bogus[2] = {slow, 12345};
    EXPECT(grpc_wait(GRPC_SESSIONID_VOID), GRPC_INVALID_SESSION_ID);
    EXPECT(grpc_wait(12345), GRPC_INVALID_SESSION_ID);
    EXPECT(grpc_wait(slow), GRPC_INVALID_SESSION_ID);
    EXPECT(grpc_probe(slow), GRPC_INVALID_SESSION_ID);
    EXPECT(grpc_wait_and(bogus, 2), GRPC_INVALID_SESSION_ID);
    EXPECT(grpc_wait_or(bogus, 2, &id), GRPC_INVALID_SESSION_ID);
    ASSERT(id == GRPC_SESSIONID_VOID);
    EXPECT(grpc_cancel(12345), GRPC_INVALID_SESSION_ID);
    printf("ok waiting on GRPC_SESSIONID_VOID, an unknown or a waited id is GRPC_INVALID_SESSION_ID\n");

    EXPECT(grpc_call_async(&fail, &failing, 7), GRPC_NO_ERROR);
    EXPECT(grpc_wait(failing), GRPC_SESSION_FAILED);
    EXPECT(grpc_get_error(failing), GRPC_SESSION_FAILED);
    ASSERT(strlen(ninf_session_error_message(failing)) > 0);
    printf("ok a failing routine: GRPC_SESSION_FAILED, and why: %s\n",
           ninf_session_error_message(failing));

    /* Each failed session is handed out once, then GRPC_SESSIONID_VOID: a loop until VOID
     * (as the GridRPC interoperability tests write it) ends. */
    grpc_sessionid_t four[4];
    EXPECT(grpc_call_async(&fail, &four[0], 1), GRPC_NO_ERROR);
    EXPECT(grpc_call_async(&sleep_ms, &four[1], 10), GRPC_NO_ERROR);
    EXPECT(grpc_call_async(&fail, &four[2], 2), GRPC_NO_ERROR);
    EXPECT(grpc_call_async(&fail, &four[3], 3), GRPC_NO_ERROR);
    EXPECT(grpc_wait_all(), GRPC_SESSION_FAILED);
    grpc_sessionid_t handed[8];
    int count = 0;
    for (;;) {
        EXPECT(grpc_get_failed_sessionid(&id), GRPC_NO_ERROR);
        if (id == GRPC_SESSIONID_VOID) break;
        ASSERT(count < 8);
        handed[count++] = id;
    }
    ASSERT(count == 3 && handed[0] == four[0] && handed[1] == four[2] && handed[2] == four[3]);
    EXPECT(grpc_get_failed_sessionid(&id), GRPC_NO_ERROR);
    ASSERT(id == GRPC_SESSIONID_VOID);
    grpc_sessionid_t pair[2];
    EXPECT(grpc_call_async(&fail, &pair[0], 4), GRPC_NO_ERROR);
    EXPECT(grpc_call_async(&sleep_ms, &pair[1], 10), GRPC_NO_ERROR);
    EXPECT(grpc_wait_and(pair, 2), GRPC_SESSION_FAILED);
    EXPECT(grpc_get_failed_sessionid(&id), GRPC_NO_ERROR);
    ASSERT(id == pair[0]);
    EXPECT(grpc_get_failed_sessionid(&id), GRPC_NO_ERROR);
    ASSERT(id == GRPC_SESSIONID_VOID);
    printf("ok grpc_get_failed_sessionid hands out each failed session of grpc_wait_all and "
           "grpc_wait_and once, then GRPC_SESSIONID_VOID\n");

    enum { N = 4 };
    double x[N] = {1, 2, 3, 4}, y[N] = {-1, -1, -1, -1};
    grpc_sessionid_t cancelled;
    EXPECT(grpc_call_async(&echo, &cancelled, 1500, (long)N, x, y), GRPC_NO_ERROR);
    EXPECT(grpc_cancel(cancelled), GRPC_NO_ERROR);
    EXPECT(grpc_wait(cancelled), GRPC_SESSION_FAILED);
    for (int i = 0; i < N; i++) ASSERT(y[i] == -1);
    EXPECT(grpc_call(&echo, 0, (long)N, x, y), GRPC_NO_ERROR);
    for (int i = 0; i < N; i++) ASSERT(y[i] == x[i]);
    printf("ok a cancelled session writes nothing; the same call uncancelled writes y = x\n");

    EXPECT(grpc_call_async(&sleep_ms, &pair[0], 300), GRPC_NO_ERROR);
    EXPECT(grpc_call_async(&sleep_ms, &pair[1], 1), GRPC_NO_ERROR);
    EXPECT(grpc_wait_or(pair, 2, &id), GRPC_NO_ERROR);
    ASSERT(id == pair[1]);
    EXPECT(grpc_wait(pair[0]), GRPC_NO_ERROR);
    printf("ok grpc_wait_or returns the session that ended first\n");

    EXPECT(grpc_call_async(&sleep_ms, &pair[0], 1000), GRPC_NO_ERROR);
    EXPECT(grpc_call_async(&sleep_ms, &pair[1], 1), GRPC_NO_ERROR);
    while (grpc_probe(pair[1]) == GRPC_NOT_COMPLETED) nanosleep(&(struct timespec){0, 1000000}, NULL);
    EXPECT(grpc_probe_or(pair, 2, &id), GRPC_NO_ERROR);
    ASSERT(id == pair[1]);
    EXPECT(grpc_cancel_all(), GRPC_NO_ERROR);
    EXPECT(grpc_wait(pair[0]), GRPC_SESSION_FAILED);
    EXPECT(grpc_wait(pair[1]), GRPC_NO_ERROR);
    printf("ok grpc_probe_or names the completed session; grpc_cancel_all cancels the running one\n");

    EXPECT(grpc_function_handle_destruct(&sleep_ms), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&fail), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&echo), GRPC_NO_ERROR);
}

static void many_async(void) {
    enum { CALLS = 1000, N = 8 };
    grpc_function_handle_t handle;
    EXPECT(grpc_function_handle_default(&handle, "slow_echo"), GRPC_NO_ERROR);
    static double x[CALLS][N], y[CALLS][N];
    static grpc_sessionid_t ids[CALLS];
    for (int c = 0; c < CALLS; c++) {
        for (int i = 0; i < N; i++) x[c][i] = c * 100 + i;
        EXPECT(grpc_call_async(&handle, &ids[c], 0, (long)N, x[c], y[c]), GRPC_NO_ERROR);
    }
    int ended = 0;
    grpc_sessionid_t id;
    while (grpc_wait_any(&id) == GRPC_NO_ERROR) {
        int c = 0;
        while (c < CALLS && ids[c] != id) c++;
        ASSERT(c < CALLS);
        for (int i = 0; i < N; i++) ASSERT(y[c][i] == x[c][i]);
        ended++;
    }
    ASSERT(id == GRPC_SESSIONID_VOID);
    ASSERT(ended == CALLS);
    EXPECT(grpc_function_handle_destruct(&handle), GRPC_NO_ERROR);
    printf("ok %d asynchronous calls drained with grpc_wait_any, each with its own result\n", CALLS);
}

static void arg_stack(const char *server) {
    enum { N = 3 };
    grpc_function_handle_t handle;
    EXPECT(grpc_function_handle_init(&handle, server, "dgesv"), GRPC_NO_ERROR);
    double a[N * N] = {4, 1, 0, 1, 4, 1, 0, 1, 4}, b[N] = {5, 6, 5};
    int n = N, ipvt[N];
    grpc_arg_stack_t *stack = grpc_arg_stack_new(4);
    EXPECT(grpc_arg_stack_push_arg(stack, a), GRPC_NO_ERROR);
    EXPECT(grpc_arg_stack_push_arg(stack, &n), GRPC_NO_ERROR);
    EXPECT(grpc_arg_stack_push_arg(stack, ipvt), GRPC_NO_ERROR);
    EXPECT(grpc_arg_stack_push_arg(stack, b), GRPC_NO_ERROR);
    EXPECT(grpc_arg_stack_push_arg(stack, b), GRPC_OTHER_ERROR_CODE);
    grpc_sessionid_t id;
    EXPECT(grpc_call_argstack_async(&handle, &id, stack), GRPC_NO_ERROR);
    EXPECT(grpc_wait(id), GRPC_NO_ERROR);
    for (int i = 0; i < N; i++) ASSERT(fabs(b[i] - 1.0) < 1e-12);
    ASSERT(grpc_arg_stack_pop_arg(stack) == b);
    EXPECT(grpc_arg_stack_destruct(stack), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&handle), GRPC_NO_ERROR);
    printf("ok dgesv through an arg stack on a named server solves A x = b\n");
}

static grpc_function_handle_t shared;

static void *worker(void *arg) {
    int seed = *(int *)arg;
    enum { N = 4 };
    double a[N * N], b[N * N], c[N * N], expected[N * N];
    for (int round = 0; round < 20; round++) {
        fill(a, N * N, seed + round);
        fill(b, N * N, seed * 3 + round);
        local_mmul(N, a, b, expected);
        if (grpc_call(&shared, N, a, b, c) != GRPC_NO_ERROR) return "call failed";
        for (int i = 0; i < N * N; i++)
            if (c[i] != expected[i]) return "wrong product";
    }
    return NULL;
}

static void threads(void) {
    enum { THREADS = 4 };
    pthread_t t[THREADS];
    int seeds[THREADS];
    EXPECT(grpc_function_handle_default(&shared, "mmul"), GRPC_NO_ERROR);
    for (int i = 0; i < THREADS; i++) {
        seeds[i] = i + 1;
        ASSERT(pthread_create(&t[i], NULL, worker, &seeds[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *failure;
        pthread_join(t[i], &failure);
        if (failure) printf("thread %d: %s (%s)\n", i, (char *)failure, ninf_error_message());
        ASSERT(failure == NULL);
    }
    EXPECT(grpc_function_handle_destruct(&shared), GRPC_NO_ERROR);
    printf("ok %d threads share one handle, 20 calls each\n", THREADS);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s GRID_FILE MISSING MALFORMED SERVER WRONG_TOKEN\n", argv[0]);
        return 2;
    }
    not_initialized();
    configuration(argv[2], argv[3]);
    EXPECT(grpc_initialize(argv[1]), GRPC_NO_ERROR);
    EXPECT(grpc_initialize(argv[1]), GRPC_ALREADY_INITIALIZED);
    printf("ok grpc_initialize reads the grid file; a second call is GRPC_ALREADY_INITIALIZED\n");
    for (int code = GRPC_NO_ERROR; code <= GRPC_LAST_ERROR_CODE; code++)
        ASSERT(grpc_error_string(code) != NULL && strlen(grpc_error_string(code)) > 0);
    ASSERT(strstr(grpc_error_string(GRPC_SESSION_FAILED), "GRPC_SESSION_FAILED") != NULL);
    ASSERT(strstr(grpc_error_string(999), "GRPC_UNKNOWN_ERROR_CODE") != NULL);
    handles(argv[4]);
    bad_arguments();
    sessions();
    crashes(argv[4]);
    arg_stack(argv[4]);
    many_async();
    threads();
    EXPECT(grpc_finalize(), GRPC_NO_ERROR);
    EXPECT(grpc_wait_all(), GRPC_NOT_INITIALIZED);
    EXPECT(grpc_initialize(NULL), GRPC_NO_ERROR);
    EXPECT(grpc_finalize(), GRPC_NO_ERROR);
    printf("ok grpc_finalize, and grpc_initialize(NULL) reads the default grid file\n");
    grpc_function_handle_t refused;
    EXPECT(grpc_initialize(argv[5]), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_default(&refused, "mmul"), GRPC_RPC_REFUSED);
    ASSERT(strstr(ninf_error_message(), "token") != NULL);
    EXPECT(grpc_finalize(), GRPC_NO_ERROR);
    printf("ok a grid file with the wrong token: GRPC_RPC_REFUSED (%s)\n", ninf_error_message());
    printf("all %d checks passed\n", checks);
    return 0;
}
