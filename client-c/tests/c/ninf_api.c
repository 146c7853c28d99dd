/* Ninf's C API against a running grid (named by $NINF_GRID): Ninf_call, the seed's
 * three-mmul transaction, the dgefa/dgesl pairs as one transaction, Ninf_call_async with
 * Ninf_wait_all, and the errors. Exits 1 at the first failed check. */
#include <ninf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { N = 6 };

int main(void) {
    double A[N * N], B[N * N], C[N * N], D[N * N], E[N * N], F[N * N], G[N * N];
    double AB[N * N], CD[N * N], expected[N * N];
    fill(A, N * N, 1);
    fill(B, N * N, 2);
    fill(C, N * N, 3);
    fill(D, N * N, 4);
    local_mmul(N, A, B, AB);
    local_mmul(N, C, D, CD);
    local_mmul(N, AB, CD, expected);

    ASSERT(Ninf_call("mmul", N, A, B, E) == NINF_OK);
    for (int i = 0; i < N * N; i++) ASSERT(E[i] == AB[i]);
    printf("ok Ninf_call(\"mmul\", ...) equals the local product\n");

    /* The seed's example: three products as one graph; E and F go server to server. */
    memset(E, 0, sizeof E);
    memset(F, 0, sizeof F);
    memset(G, 0, sizeof G);
    ASSERT(Ninf_transaction_begin() == NINF_OK);
    ASSERT(Ninf_call("mmul", N, A, B, E) == NINF_OK);
    ASSERT(Ninf_call("mmul", N, C, D, F) == NINF_OK);
    ASSERT(Ninf_call("mmul", N, E, F, G) == NINF_OK);
    for (int i = 0; i < N * N; i++) ASSERT(G[i] == 0); /* recorded, not run */
    ASSERT(Ninf_transaction_end() == NINF_OK);
    for (int i = 0; i < N * N; i++) {
        ASSERT(G[i] == expected[i]);
        ASSERT(E[i] == AB[i] && F[i] == CD[i]);
    }
    printf("ok the seed's three-mmul transaction computes G = (A B)(C D)\n");

    /* The same with E and F as scratch: G arrives, E and F are not written. */
    for (int i = 0; i < N * N; i++) E[i] = F[i] = 7, G[i] = 0;
    ASSERT(Ninf_transaction_scratch(E, sizeof E) == NINF_ERROR); /* no transaction yet */
    ASSERT(strstr(Ninf_error(), "outside a transaction") != NULL);
    ASSERT(Ninf_transaction_begin() == NINF_OK);
    ASSERT(Ninf_transaction_scratch(E, sizeof E) == NINF_OK);
    ASSERT(Ninf_call("mmul", N, A, B, E) == NINF_OK);
    ASSERT(Ninf_call("mmul", N, C, D, F) == NINF_OK);
    ASSERT(Ninf_transaction_scratch(F, sizeof F) == NINF_OK);
    ASSERT(Ninf_call("mmul", N, E, F, G) == NINF_OK);
    ASSERT(Ninf_transaction_end() == NINF_OK);
    for (int i = 0; i < N * N; i++) ASSERT(G[i] == expected[i] && E[i] == 7 && F[i] == 7);
    printf("ok Ninf_transaction_scratch keeps E and F on the grid\n");

    /* Five dgefa/dgesl pairs as one transaction: each factorisation feeds its solve. */
    enum { PAIRS = 5, M = 8 };
    static double a[PAIRS][M * M], b[PAIRS][M];
    static int ipvt[PAIRS][M];
    for (int p = 0; p < PAIRS; p++) {
        for (int i = 0; i < M * M; i++) a[p][i] = (i % (M + 1) == 0) ? M + p : 1.0 / (1 + i % 7);
        for (int i = 0; i < M; i++) {
            double s = 0;
            for (int j = 0; j < M; j++) s += a[p][i + j * M] * (j + 1);
            b[p][i] = s; /* the solution is 1, 2, ..., M */
        }
    }
    ASSERT(Ninf_transaction_begin() == NINF_OK);
    ASSERT(Ninf_transaction_begin() == NINF_ERROR);
    for (int p = 0; p < PAIRS; p++) {
        ASSERT(Ninf_call("dgefa", a[p], M, ipvt[p]) == NINF_OK);
        ASSERT(Ninf_call("dgesl", a[p], M, ipvt[p], b[p]) == NINF_OK);
    }
    ASSERT(Ninf_call_async("mmul", N, A, B, E) == NINF_ERROR);
    ASSERT(Ninf_transaction_end() == NINF_OK);
    for (int p = 0; p < PAIRS; p++)
        for (int i = 0; i < M; i++) ASSERT(fabs(b[p][i] - (i + 1)) < 1e-9);
    printf("ok %d dgefa/dgesl pairs in one transaction solve their systems\n", PAIRS);

    int ids[3];
    double products[3][N * N];
    for (int k = 0; k < 3; k++) {
        ids[k] = Ninf_call_async("mmul", N, A, B, products[k]);
        ASSERT(ids[k] >= 0);
    }
    ASSERT(Ninf_wait(ids[0]) == NINF_OK);
    ASSERT(Ninf_wait(ids[0]) == NINF_ERROR);
    ASSERT(Ninf_wait_all() == NINF_OK);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N * N; i++) ASSERT(products[k][i] == AB[i]);
    printf("ok Ninf_call_async, Ninf_wait and Ninf_wait_all\n");

    ASSERT(Ninf_call("no_such_routine", 1) == NINF_ERROR);
    ASSERT(strstr(Ninf_error(), "no_such_routine") != NULL);
    ASSERT(Ninf_transaction_end() == NINF_ERROR);
    ASSERT(strstr(Ninf_error(), "without Ninf_transaction_begin") != NULL);
    printf("ok errors name the problem: %s\n", Ninf_error());
    ASSERT(grpc_finalize() == GRPC_NO_ERROR);
    printf("all passed\n");
    return 0;
}
