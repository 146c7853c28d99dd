/*
 * grpc.h: the GridRPC end-user API (OGF GFD-R.52) over a Ninf grid.
 *
 * Link with -lninf (pkg-config: `pkg-config --cflags --libs ninf`). The configuration file
 * given to grpc_initialize is the grid file `ninf up` writes (DATA_DIR/grid.toml: the proxy's
 * address, the token file, the TLS folder); NULL means the default grid file ($NINF_GRID,
 * else ~/.local/share/ninf/grid.toml).
 *
 * Arguments of grpc_call and grpc_call_async follow the routine's IDL declaration, in order:
 *   IN scalars by value       (char, short, int: int; long: long; float, double: double;
 *                              scomplex: float _Complex; dcomplex: double _Complex)
 *   strings and filenames     const char *
 *   arrays                    a pointer to the first element; OUT and INOUT arrays are
 *                             written in place when the call ends (an OUT "scalar" is a
 *                             one-element array in the IDL)
 *   WORK arrays               NULL (the server allocates them)
 * Array sizes come from the IDL's dimension expressions and the call's scalars. Arg stacks
 * take every argument by address (scalars) or as its pointer (arrays, strings).
 *
 * Transactions through a proxy survive its restart: while the proxy cannot be reached, a
 * waiting call sends its transaction again, by id, for up to $NINF_RECONNECT_SECONDS (default
 * 60; 0 fails at once), and a proxy restarted on its journal finishes it.
 *
 * Every function is thread-safe.
 */
#ifndef NINF_GRPC_H
#define NINF_GRPC_H

#include <stddef.h>
#include <stdarg.h>
#include <complex.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int grpc_error_t;
typedef int grpc_sessionid_t;

enum {
    GRPC_NO_ERROR = 0,
    GRPC_NOT_INITIALIZED,
    GRPC_ALREADY_INITIALIZED,
    GRPC_CONFIGFILE_NOT_FOUND,
    GRPC_CONFIGFILE_ERROR,
    GRPC_SERVER_NOT_FOUND,
    GRPC_FUNCTION_NOT_FOUND,
    GRPC_INVALID_FUNCTION_HANDLE,
    GRPC_INVALID_SESSION_ID,
    GRPC_RPC_REFUSED,
    GRPC_COMMUNICATION_FAILED,
    GRPC_SESSION_FAILED,
    GRPC_NOT_COMPLETED,
    GRPC_NONE_COMPLETED,
    GRPC_OTHER_ERROR_CODE,
    GRPC_UNKNOWN_ERROR_CODE,
    GRPC_LAST_ERROR_CODE
};

/* No session: what grpc_wait_any and grpc_probe_or leave when they have none to name. */
#define GRPC_SESSIONID_VOID (-1)

/* A function handle: a routine, and the server that runs it or none (the metaserver
 * places each call). Declare one, initialise it with grpc_function_handle_default or
 * grpc_function_handle_init, and destruct it when done. */
typedef struct grpc_function_handle_s {
    void *ninf_private;
} grpc_function_handle_t;

/* Arguments pushed one by one, for grpc_call_argstack. */
typedef struct grpc_arg_stack_s grpc_arg_stack_t;

grpc_error_t grpc_initialize(const char *config_file_name);
grpc_error_t grpc_finalize(void);

grpc_error_t grpc_function_handle_default(grpc_function_handle_t *handle, const char *func_name);
/* server_name: "host:port" of a compute server (or "ninf://host:port"). */
grpc_error_t grpc_function_handle_init(grpc_function_handle_t *handle, const char *server_name,
                                       const char *func_name);
grpc_error_t grpc_function_handle_destruct(grpc_function_handle_t *handle);
grpc_error_t grpc_get_handle(grpc_function_handle_t **handle, grpc_sessionid_t session_id);

/* grpc_call(handle, ...) and grpc_call_async(handle, &session_id, ...) are defined at the
 * end of this header. */
grpc_error_t grpc_call_argstack(grpc_function_handle_t *handle, grpc_arg_stack_t *args);
grpc_error_t grpc_call_argstack_async(grpc_function_handle_t *handle,
                                      grpc_sessionid_t *session_id, grpc_arg_stack_t *args);

grpc_arg_stack_t *grpc_arg_stack_new(int max_size);
grpc_error_t grpc_arg_stack_push_arg(grpc_arg_stack_t *stack, void *arg);
void *grpc_arg_stack_pop_arg(grpc_arg_stack_t *stack);
grpc_error_t grpc_arg_stack_destruct(grpc_arg_stack_t *stack);

grpc_error_t grpc_probe(grpc_sessionid_t session_id);
grpc_error_t grpc_probe_or(grpc_sessionid_t *ids, size_t length, grpc_sessionid_t *id_out);
grpc_error_t grpc_cancel(grpc_sessionid_t session_id);
grpc_error_t grpc_cancel_all(void);

grpc_error_t grpc_wait(grpc_sessionid_t session_id);
grpc_error_t grpc_wait_and(grpc_sessionid_t *ids, size_t length);
grpc_error_t grpc_wait_or(grpc_sessionid_t *ids, size_t length, grpc_sessionid_t *id_out);
grpc_error_t grpc_wait_all(void);
grpc_error_t grpc_wait_any(grpc_sessionid_t *id_out);

grpc_error_t grpc_get_error(grpc_sessionid_t session_id);
grpc_error_t grpc_get_failed_sessionid(grpc_sessionid_t *id_out);
const char *grpc_error_string(grpc_error_t error_code);

/* Ninf's additions: what went wrong, in words (the argument's name, expected and actual
 * sizes, the routine's own message). ninf_error_message: the calling thread's last failed
 * function; ninf_session_error_message: a session's failure ("" if it has none). The text
 * stays valid until the thread's next call into the library. */
const char *ninf_error_message(void);
const char *ninf_session_error_message(grpc_sessionid_t session_id);

/* ---- Internals of the variadic calls (not for direct use) ---------------------------- */

enum {
    NINF_VALUE_INT = 1,      /* char, short, int: passed as int */
    NINF_VALUE_LONG,         /* long */
    NINF_VALUE_DOUBLE,       /* float, double: passed as double */
    NINF_VALUE_SCOMPLEX,     /* float _Complex */
    NINF_VALUE_DCOMPLEX,     /* double _Complex */
    NINF_VALUE_STRING,       /* const char * */
    NINF_VALUE_POINTER       /* arrays, WORK arrays */
};

#define NINF_MAX_ARGUMENTS 64

typedef struct ninf_value_s {
    int kind;
    union {
        long long integer;
        double real;
        double complex_parts[2];
        const void *pointer;
    } u;
} ninf_value_t;

/* How each of the routine's parameters is passed (NINF_VALUE_*); returns their number, or
 * minus a grpc_error_t (not initialised, an invalid handle; ninf_error_message says why). */
int ninf_handle_kinds(const grpc_function_handle_t *handle, int *kinds, int max_kinds);
/* Calls with the collected values: waits for the call unless `asynchronous`, which starts
 * a session and stores its id in *session_id. */
grpc_error_t ninf_call_values(grpc_function_handle_t *handle, int asynchronous,
                              grpc_sessionid_t *session_id, const ninf_value_t *values,
                              int count);

/* Reads the variadic arguments as the handle's routine declares them. */
static inline int ninf_collect_values(const grpc_function_handle_t *handle, va_list *ap,
                                      ninf_value_t *values) {
    int kinds[NINF_MAX_ARGUMENTS];
    int count = ninf_handle_kinds(handle, kinds, NINF_MAX_ARGUMENTS);
    for (int i = 0; i < count; i++) {
        values[i].kind = kinds[i];
        switch (kinds[i]) {
        case NINF_VALUE_INT: values[i].u.integer = va_arg(*ap, int); break;
        case NINF_VALUE_LONG: values[i].u.integer = va_arg(*ap, long); break;
        case NINF_VALUE_DOUBLE: values[i].u.real = va_arg(*ap, double); break;
        case NINF_VALUE_SCOMPLEX: {
            float _Complex z = va_arg(*ap, float _Complex);
            values[i].u.complex_parts[0] = crealf(z);
            values[i].u.complex_parts[1] = cimagf(z);
            break;
        }
        case NINF_VALUE_DCOMPLEX: {
            double _Complex z = va_arg(*ap, double _Complex);
            values[i].u.complex_parts[0] = creal(z);
            values[i].u.complex_parts[1] = cimag(z);
            break;
        }
        case NINF_VALUE_STRING: values[i].u.pointer = va_arg(*ap, const char *); break;
        default: values[i].u.pointer = va_arg(*ap, const void *); break;
        }
    }
    return count;
}

/* grpc_call and grpc_call_async are defined here, in each program that includes this
 * header: C cannot forward variable arguments to a library, so the program reads them (as
 * the routine's declaration says) and passes them on as values. */
static inline grpc_error_t ninf_call_va(grpc_function_handle_t *handle, int asynchronous,
                                        grpc_sessionid_t *session_id, va_list *ap) {
    ninf_value_t values[NINF_MAX_ARGUMENTS];
    if (session_id != NULL) *session_id = GRPC_SESSIONID_VOID;
    int count = ninf_collect_values(handle, ap, values);
    if (count < 0) return -count;
    return ninf_call_values(handle, asynchronous, session_id, values, count);
}

static inline grpc_error_t grpc_call(grpc_function_handle_t *handle, ...) {
    va_list ap;
    va_start(ap, handle);
    grpc_error_t result = ninf_call_va(handle, 0, NULL, &ap);
    va_end(ap);
    return result;
}

static inline grpc_error_t grpc_call_async(grpc_function_handle_t *handle,
                                           grpc_sessionid_t *session_id, ...) {
    va_list ap;
    va_start(ap, session_id);
    grpc_error_t result = ninf_call_va(handle, 1, session_id, &ap);
    va_end(ap);
    return result;
}

#ifdef __cplusplus
}
#endif

#endif /* NINF_GRPC_H */
