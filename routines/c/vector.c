/* C routines of the `vector` example module (idl/examples/vector.idl): they exercise the
 * `Calls "C"` path of ninf-gen (scalars by value, arrays by pointer, strings as C strings,
 * complex scalars by pointer, WORK arrays, and libm through `Library "-lm"`). */
#include <complex.h>
#include <math.h>
#include <string.h>

/* Eight partial sums, as BLAS libraries keep: one running sum makes every addition wait
 * for the one before (four cycles each here), which held a 4M-element ddot to 6 ms, a
 * third of memory's speed. Independent sums let the compiler keep several additions in
 * flight, in vector registers; the order of the additions, and so the last bits of the
 * result, change with it, as they differ between BLAS libraries. */
/* One copy of the routine per vector width, picked when the executable loads (an ifunc):
 * the default build targets SSE2 only, whose 16-byte loads held the same 4M-element ddot to
 * 5.5 ms against 3 ms for AVX2's or AVX-512's. The additions' order is the same in every
 * copy. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define NINF_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NINF_VECTOR_CLONES
#endif

NINF_VECTOR_CLONES
void ninf_ddot(int n, const double *x, const double *y, double *result) {
    double s[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += x[i + k] * y[i + k];
    double sum = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++) sum += x[i] * y[i];
    result[0] = sum;
}

void ninf_dnrm2(int n, const double *x, double *result) {
    double scale = 0.0, ssq = 1.0;
    for (int i = 0; i < n; i++) {
        if (x[i] != 0.0) {
            double a = fabs(x[i]);
            if (scale < a) {
                ssq = 1.0 + ssq * (scale / a) * (scale / a);
                scale = a;
            } else {
                ssq += (a / scale) * (a / scale);
            }
        }
    }
    result[0] = scale * sqrt(ssq);
}

void ninf_label(char *buffer, int n, const char *text, double *scratch) {
    /* The WORK array has n + 1 elements; touch all of them to show it is really there. */
    for (int i = 0; i <= n; i++) scratch[i] = (double)i;
    memset(buffer, '.', (size_t)n);
    size_t len = strlen(text);
    memcpy(buffer, text, len < (size_t)n ? len : (size_t)n);
}

void ninf_pscale(int p, long n, const double complex *alpha, double complex *z) {
    (void)p;
    for (long i = 0; i < n; i++) z[i] *= *alpha;
}
