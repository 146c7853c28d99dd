/*
 * ninf_exec.h: the executable runtime's C ABI (libninf_exec.a). `ninf-gen build` writes a
 * module's glue against it; routines call only `ninf_exec_threads`.
 *
 * Each routine is called with `args`, one pointer per IDL parameter in declaration order:
 * to the scalar's value (char, short, int, long, float, double, float[2], double[2]), to
 * a NUL-terminated string (string, filename: the path of a local copy of the file), or to
 * the array's first element (WORK arrays zeroed by the runtime). It returns the call's
 * status (0 unless the routine reports one).
 */
#ifndef NINF_EXEC_H
#define NINF_EXEC_H

#include <stddef.h>
#include <stdint.h>

typedef struct ninf_exec_routine_s {
    const char *name;
    int64_t (*call)(void **args);
} ninf_exec_routine_t;

/* Serves the module on standard input and output until the server closes them; returns
 * the process's exit status. */
int ninf_exec_main(const char *idl_name, const char *idl_source,
                   const ninf_exec_routine_t *routines, size_t count);

/* The threads the call being served may compute with: 1, unless its routine is declared
 * `Threads` in the IDL and the server gave the call cores other servers of its host left
 * idle (docs/gang.md, "Cores lent between servers"). A routine calls it from the thread it
 * was called on, whose CPU affinity then spans exactly those cores, so threads it starts
 * (pthreads, OpenMP, a threaded BLAS told this count) run on them. Also callable from
 * Fortran: `integer(c_int) function ninf_exec_threads() bind(C)`. */
int ninf_exec_threads(void);

#endif
