/* Solve A x = b on the grid with LINPACK's dgesv, as a Ninf user would.
 *
 *     ninf up &                                  # a local grid (or any grid's grid.toml)
 *     cc examples/c/solve.c $(pkg-config --cflags --libs ninf) -lm -o solve
 *     ./solve 500
 *
 * A is a random well-conditioned n x n matrix, stored column-major as Fortran and LINPACK
 * store it; b is made from a known solution, so the program can say how close it came. */
#include <math.h>
#include <ninf.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 300;
    if (n <= 0) {
        fprintf(stderr, "usage: %s [n]\n", argv[0]);
        return 2;
    }
    double *a = malloc(sizeof(double) * n * n);
    double *b = malloc(sizeof(double) * n);
    int *ipvt = malloc(sizeof(int) * n);
    if (!a || !b || !ipvt) return 1;

    srand(2026);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            a[i + j * n] = (double)rand() / RAND_MAX - 0.5 + (i == j ? n : 0);
    for (int i = 0; i < n; i++) {
        b[i] = 0;
        for (int j = 0; j < n; j++) b[i] += a[i + j * n] * (j + 1); /* x = 1, 2, ..., n */
    }

    if (Ninf_call("dgesv", a, n, ipvt, b) != NINF_OK) {
        fprintf(stderr, "dgesv failed: %s\n", Ninf_error());
        return 1;
    }
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(b[i] - (i + 1)) / (i + 1));
    printf("n = %d: largest relative error of x %.2e\n", n, worst);
    free(a);
    free(b);
    free(ipvt);
    grpc_finalize(); /* the library's threads end here */
    return worst < 1e-8 ? 0 : 1;
}
