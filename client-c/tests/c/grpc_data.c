/* GFD.186's data management (grpc_data.h) against a running grid: a matrix sent once and
 * factored on the grid, solved against many times there (blocking, asynchronous, inside a
 * Ninf transaction beside an ordinary array), brought back to memory and to a file, put from
 * a file, unbound and bound again by id, volatile data in mapped memory, and the errors that
 * name what is wrong. Every handle is freed at the end. Arguments: GRID_FILE SCRATCH_DIR. */
#define _POSIX_C_SOURCE 200809L
#include <grpc.h>
#include <grpc_data.h>
#include <ninf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { N = 60 };

static double a0[N * N], factored[N * N], back[N * N], from_file[N * N], b[N], x[N], xv[N];
static int ipvt_sent[N], pivots[N];

/* A diagonally dominant system (column-major) whose solution is 1, 2, ..., N. */
static void make_system(void) {
    for (int i = 0; i < N * N; i++) a0[i] = (i % (N + 1) == 0) ? N : ((i * 7) % 11) / 11.0;
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int j = 0; j < N; j++) s += a0[i + j * N] * (j + 1);
        b[i] = s;
    }
}

static int solved(const double *v) {
    for (int i = 0; i < N; i++)
        if (fabs(v[i] - (i + 1)) > 1e-9 * N) return 0;
    return 1;
}

/* grpc_data_getinfo's answer for `tag` (freed by the caller). */
static char *info(grpc_data_t *data, grpc_data_info_type_t tag) {
    char *text = NULL;
    EXPECT(grpc_data_getinfo(data, tag, NULL, &text), GRPC_NO_ERROR);
    ASSERT(text != NULL);
    return text;
}

static void expect_info(grpc_data_t *data, grpc_data_info_type_t tag, const char *expected) {
    char *text = info(data, tag);
    if (strcmp(text, expected) != 0) {
        printf("FAILED info %d is \"%s\", expected \"%s\"\n", (int)tag, text, expected);
        exit(1);
    }
    free(text);
}

static void expect_failure(grpc_error_t got, const char *needle) {
    ASSERT(got == GRPC_OTHER_ERROR_CODE);
    if (strstr(ninf_error_message(), needle) == NULL) {
        printf("FAILED the message \"%s\" does not name \"%s\"\n", ninf_error_message(), needle);
        exit(1);
    }
    checks++;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    make_system();
    EXPECT(grpc_initialize(argv[1]), GRPC_NO_ERROR);
    grpc_function_handle_t dgefa, dgesl;
    EXPECT(grpc_function_handle_default(&dgefa, "dgefa"), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_default(&dgesl, "dgesl"), GRPC_NO_ERROR);

    /* The reference: every array sent. */
    memcpy(factored, a0, sizeof a0);
    EXPECT(grpc_call(&dgefa, factored, N, ipvt_sent), GRPC_NO_ERROR);

    /* `a` from memory, kept sticky on the grid; `ipvt` made there. */
    static double input[N * N];
    memcpy(input, a0, sizeof a0);
    EXPECT(grpc_data_memory_mapping_set("A", input), GRPC_NO_ERROR);
    void *mapped = NULL;
    EXPECT(grpc_data_memory_mapping_get("A", &mapped), GRPC_NO_ERROR);
    ASSERT(mapped == input);
    const char *from_a[] = {"memory://localhost/A", NULL};
    const char *to_grid[] = {"ninf://grid", NULL};
    grpc_data_mode_t sticky[] = {GRPC_STICKY, GRPC_END_LIST};
    size_t matrix[] = {N, N, 0}, vector[] = {N, 0};
    grpc_data_t d_a, d_ipvt;
    EXPECT(grpc_data_init(&d_a, from_a, to_grid, GRPC_DOUBLE, matrix, sticky), GRPC_NO_ERROR);
    EXPECT(grpc_data_init(&d_ipvt, NULL, to_grid, GRPC_INT, vector, sticky), GRPC_NO_ERROR);
    expect_info(&d_a, GRPC_DATA_HANDLE, "");
    EXPECT(grpc_call(&dgefa, &d_a, N, &d_ipvt), GRPC_NO_ERROR);
    for (int i = 0; i < N * N; i++) ASSERT(input[i] == a0[i]);
    char *id = info(&d_a, GRPC_DATA_HANDLE);
    ASSERT(strlen(id) >= 16);
    expect_info(&d_a, GRPC_MANAGEMENT_MODE, "GRPC_STICKY");
    expect_info(&d_a, GRPC_TYPE, "GRPC_DOUBLE");
    expect_info(&d_a, GRPC_DIMENSIONS, "60 60");
    expect_info(&d_a, GRPC_INPUT_URI, "memory://localhost/A");
    expect_info(&d_a, GRPC_OUTPUT_URI, "ninf://grid");
    expect_info(&d_a, GRPC_STATUS, "GRPC_IN_PLACE");
    char *where = info(&d_a, GRPC_LOCATIONS_LIST);
    ASSERT(strchr(where, ':') != NULL && strchr(where, '\n') == NULL);
    char *where_ipvt = info(&d_ipvt, GRPC_LOCATIONS_LIST);
    ASSERT(strcmp(where, where_ipvt) == 0); /* dgefa ran where `a` is, and wrote ipvt there */
    printf("ok a matrix sent once is factored in place on %s\n", where);
    free(where);
    free(where_ipvt);

    /* Many solves against the factors where they are: only b travels. */
    for (int k = 0; k < 5; k++) {
        memcpy(x, b, sizeof b);
        EXPECT(grpc_call(&dgesl, &d_a, N, &d_ipvt, x), GRPC_NO_ERROR);
        ASSERT(solved(x));
    }
    grpc_sessionid_t session;
    memcpy(x, b, sizeof b);
    EXPECT(grpc_call_async(&dgesl, &session, &d_a, N, &d_ipvt, x), GRPC_NO_ERROR);
    EXPECT(grpc_wait(session), GRPC_NO_ERROR);
    ASSERT(solved(x));
    memcpy(x, b, sizeof b);
    ASSERT(Ninf_transaction_begin() == NINF_OK);
    ASSERT(Ninf_call("dgesl", &d_a, N, &d_ipvt, x) == NINF_OK);
    ASSERT(Ninf_transaction_end() == NINF_OK);
    ASSERT(solved(x));
    printf("ok solves read the factors on the grid: blocking, asynchronous, in a transaction\n");

    /* Brought back: the factors to memory, to a file, and the pivots, waited for together. */
    char path[4096], file_uri[4200];
    snprintf(path, sizeof path, "%s/factors.bin", argv[2]);
    snprintf(file_uri, sizeof file_uri, "file://%s", path);
    EXPECT(grpc_data_memory_mapping_set("F", back), GRPC_NO_ERROR);
    EXPECT(grpc_data_memory_mapping_set("P", pivots), GRPC_NO_ERROR);
    const char *to_f[] = {"memory://localhost/F", file_uri, NULL};
    const char *to_p[] = {"memory://localhost/P", NULL};
    grpc_data_mode_t volatile2[] = {GRPC_VOLATILE, GRPC_VOLATILE, GRPC_END_LIST};
    EXPECT(grpc_data_transfer(&d_a, NULL, to_f, volatile2), GRPC_NO_ERROR);
    EXPECT(grpc_data_transfer(&d_ipvt, NULL, to_p, volatile2 + 1), GRPC_NO_ERROR);
    const grpc_data_t *both[] = {&d_a, &d_ipvt, NULL};
    grpc_data_t *first = NULL;
    EXPECT(grpc_data_wait(both, GRPC_WAIT_ANY, &first), GRPC_NO_ERROR);
    ASSERT(first == &d_a || first == &d_ipvt);
    EXPECT(grpc_data_wait(both, GRPC_WAIT_ALL, NULL), GRPC_NO_ERROR);
    for (int i = 0; i < N * N; i++) ASSERT(fabs(back[i] - factored[i]) <= 1e-12 * N);
    for (int i = 0; i < N; i++) ASSERT(pivots[i] == ipvt_sent[i]);
    FILE *file = fopen(path, "rb");
    ASSERT(file != NULL);
    ASSERT(fread(from_file, sizeof(double), N * N, file) == N * N);
    fclose(file);
    ASSERT(memcmp(from_file, back, sizeof back) == 0);
    printf("ok grpc_data_transfer brings the factors to memory and a file, the pivots to memory\n");

    /* Put from the file, persistent, by a transfer; then called with. */
    const char *from_file_uri[] = {file_uri, NULL};
    grpc_data_mode_t persistent[] = {GRPC_PERSISTENT, GRPC_END_LIST};
    grpc_data_t d_f;
    EXPECT(grpc_data_init(&d_f, from_file_uri, NULL, GRPC_DOUBLE, matrix, NULL), GRPC_NO_ERROR);
    expect_info(&d_f, GRPC_MANAGEMENT_MODE, "GRPC_VOLATILE");
    EXPECT(grpc_data_transfer(&d_f, NULL, to_grid, persistent), GRPC_NO_ERROR);
    const grpc_data_t *just_f[] = {&d_f, NULL};
    EXPECT(grpc_data_wait(just_f, GRPC_WAIT_ALL, NULL), GRPC_NO_ERROR);
    expect_info(&d_f, GRPC_MANAGEMENT_MODE, "GRPC_PERSISTENT");
    memcpy(x, b, sizeof b);
    EXPECT(grpc_call(&dgesl, &d_f, N, &d_ipvt, x), GRPC_NO_ERROR);
    ASSERT(solved(x));
    printf("ok a file put on the grid by grpc_data_transfer is called with\n");

    /* Unbound: refused here; bound again by its id, it still holds the factors. */
    EXPECT(grpc_data_unbind(&d_a), GRPC_NO_ERROR);
    expect_failure(grpc_call(&dgesl, &d_a, N, &d_ipvt, x), "was freed or unbound");
    char bound_uri[256];
    snprintf(bound_uri, sizeof bound_uri, "ninf://grid/%s", id);
    const char *from_id[] = {bound_uri, NULL};
    grpc_data_t d_again;
    EXPECT(grpc_data_init(&d_again, from_id, NULL, GRPC_DOUBLE, matrix, NULL), GRPC_NO_ERROR);
    expect_info(&d_again, GRPC_DATA_HANDLE, id);
    expect_info(&d_again, GRPC_MANAGEMENT_MODE, "GRPC_STICKY");
    memcpy(x, b, sizeof b);
    EXPECT(grpc_call(&dgesl, &d_again, N, &d_ipvt, x), GRPC_NO_ERROR);
    ASSERT(solved(x));
    printf("ok an unbound handle is refused, and bound again by ninf://grid/ID\n");

    /* Volatile data: an ordinary argument in mapped memory, written in place. */
    memcpy(xv, b, sizeof b);
    EXPECT(grpc_data_memory_mapping_set("X", xv), GRPC_NO_ERROR);
    const char *at_x[] = {"memory://localhost/X", NULL};
    grpc_data_mode_t vol[] = {GRPC_VOLATILE, GRPC_END_LIST};
    grpc_data_t d_x;
    EXPECT(grpc_data_init(&d_x, at_x, at_x, GRPC_DOUBLE, vector, vol), GRPC_NO_ERROR);
    EXPECT(grpc_call(&dgesl, &d_again, N, &d_ipvt, &d_x), GRPC_NO_ERROR);
    ASSERT(solved(xv));
    printf("ok volatile data is read and written in mapped memory\n");

    /* Errors name the problem, and nothing runs. */
    grpc_data_t bad;
    const char *ftp[] = {"ftp://host/a", NULL};
    expect_failure(grpc_data_init(&bad, ftp, NULL, GRPC_DOUBLE, matrix, NULL), "`ftp`");
    const char *unmapped[] = {"memory://localhost/NOPE", NULL};
    expect_failure(grpc_data_init(&bad, unmapped, NULL, GRPC_DOUBLE, matrix, NULL), "`NOPE`");
    expect_failure(grpc_data_init(&bad, from_a, at_x, GRPC_DOUBLE, matrix, sticky),
                   "means nothing");
    expect_failure(grpc_data_init(&bad, from_a, to_grid, GRPC_DOUBLE, matrix, volatile2),
                   "1 output URIs but 2 modes");
    expect_failure(grpc_data_init(&bad, from_a, to_grid, GRPC_STRING, matrix, sticky),
                   "not an array of numbers");
    memcpy(x, b, sizeof b);
    expect_failure(grpc_call(&dgesl, &d_ipvt, N, &d_ipvt, x),
                   "holds 60 elements of int, but the call needs 3600 of double");
    ASSERT(memcmp(x, b, sizeof b) == 0);
    printf("ok errors name the problem: %s\n", ninf_error_message());

    /* Freed: refused, and its id no longer binds. */
    EXPECT(grpc_data_free(&d_again, NULL), GRPC_NO_ERROR);
    expect_failure(grpc_call(&dgesl, &d_again, N, &d_ipvt, x), "was freed or unbound");
    expect_failure(grpc_data_init(&bad, from_id, NULL, GRPC_DOUBLE, matrix, NULL),
                   "no data handle");
    const char *file_only[] = {file_uri, NULL};
    EXPECT(grpc_data_free(&d_f, NULL), GRPC_NO_ERROR);
    EXPECT(grpc_data_free(&d_ipvt, to_grid), GRPC_NO_ERROR);
    EXPECT(grpc_data_free(&d_x, NULL), GRPC_NO_ERROR);
    grpc_data_t d_file;
    EXPECT(grpc_data_init(&d_file, file_only, NULL, GRPC_DOUBLE, matrix, NULL), GRPC_NO_ERROR);
    EXPECT(grpc_data_free(&d_file, file_only), GRPC_NO_ERROR);
    ASSERT(fopen(path, "rb") == NULL);
    printf("ok freed handles are refused and their data is gone\n");
    free(id);

    EXPECT(grpc_function_handle_destruct(&dgefa), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&dgesl), GRPC_NO_ERROR);
    EXPECT(grpc_finalize(), GRPC_NO_ERROR);
    printf("all %d checks passed\n", checks);
    return 0;
}
