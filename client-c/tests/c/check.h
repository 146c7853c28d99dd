/* What the C test programs share: checks that print where and why they failed and exit 1,
 * a count of the checks made, and the local reference the results are compared with. */
#ifndef NINF_TEST_CHECK_H
#define NINF_TEST_CHECK_H

#include <grpc.h>
#include <stdio.h>
#include <stdlib.h>

static int checks = 0;

/* `call` must return the GridRPC code `expected`. */
#define EXPECT(call, expected)                                                           \
    do {                                                                                 \
        grpc_error_t got_ = (call);                                                      \
        if (got_ != (expected)) {                                                        \
            printf("FAILED %s:%d: %s gave %s, expected %s (%s)\n", __FILE__, __LINE__,   \
                   #call, grpc_error_string(got_), grpc_error_string(expected),          \
                   ninf_error_message());                                                \
            exit(1);                                                                     \
        }                                                                                \
        checks++;                                                                        \
    } while (0)

#define ASSERT(condition)                                                                \
    do {                                                                                 \
        if (!(condition)) {                                                              \
            printf("FAILED %s:%d: %s (%s)\n", __FILE__, __LINE__, #condition,            \
                   ninf_error_message());                                                \
            exit(1);                                                                     \
        }                                                                                \
        checks++;                                                                        \
    } while (0)

/* C = A B, column-major, as the IDL's mmul. */
static inline void local_mmul(int n, const double *a, const double *b, double *c) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += a[i + k * n] * b[k + j * n];
            c[i + j * n] = s;
        }
}

/* Small integers (exact in products), different for each seed. */
static inline void fill(double *x, int count, int seed) {
    for (int i = 0; i < count; i++) x[i] = (double)((i * 7 + seed * 13) % 17) - 8.0;
}

#endif
