/*
 * grpc_data.h: the GridRPC Data Management API (OGF GFD-R-P.186) over a Ninf grid.
 *
 * Include after grpc.h; link with -lninf. A grpc_data_t describes one array: where its value
 * comes from (input URIs), where it goes (output URIs) and how each output location keeps it
 * (a management mode). Passed to grpc_call, grpc_call_async or Ninf_call (also inside a Ninf
 * transaction) in place of the array's pointer, as `&data`:
 *   - data whose outputs include "ninf://grid" with GRPC_STICKY, GRPC_UNIQUE_STICKY or
 *     GRPC_PERSISTENT is kept on the grid: sent once (from its input URI, at its first call
 *     or grpc_data_transfer), read where it is by IN arguments, updated there by INOUT ones,
 *     written there by OUT ones; nothing comes back to the client unless
 *     grpc_data_transfer is asked to bring it;
 *   - volatile data (no "ninf://grid" output) is an ordinary array argument read from and
 *     written to its memory:// location.
 *
 * URIs (client-c/README.md, "Data on the grid", says what is chosen where GFD.186 leaves a
 * choice open):
 *   memory://localhost/KEY   the client memory grpc_data_memory_mapping_set named KEY
 *   file:///PATH             a file of the array's raw bytes (native byte order)
 *   ninf://grid              kept on the grid, on a server the grid chooses (outputs)
 *   ninf://grid/ID           the data kept on the grid under handle ID (inputs), as
 *                            grpc_data_getinfo(..., GRPC_DATA_HANDLE, ...) gave it
 * URI lists end with NULL; mode lists with GRPC_END_LIST, one mode per output URI; the
 * dimensions with 0. Every function returns GRPC_NO_ERROR or a code, and
 * ninf_error_message() then says what was wrong (the URI, the key, the sizes).
 */
#ifndef NINF_GRPC_DATA_H
#define NINF_GRPC_DATA_H

#include <stddef.h>
#include "grpc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A data handle. Declare one, initialise it with grpc_data_init, and end it with
 * grpc_data_free or grpc_data_unbind. Do not copy it: the library knows it by address. */
typedef struct grpc_data_s {
    void *ninf_private;
} grpc_data_t;

typedef enum {
    GRPC_VOLATILE = 0,        /* sent with each call, not kept */
    GRPC_STRICTLY_VOLATILE,   /* the same */
    GRPC_STICKY,              /* kept where it was put or last written; never moved */
    GRPC_UNIQUE_STICKY,       /* sticky, in one copy */
    GRPC_PERSISTENT,          /* kept; the grid may hold further copies */
    GRPC_END_LIST
} grpc_data_mode_t;

/* Element types. GRPC_COMPLEX is a double complex (GRPC_DCOMPLEX); GRPC_CHAR to
 * GRPC_SCOMPLEX are Ninf's IDL types. GRPC_BOOL, GRPC_STRING, GRPC_FILE and
 * GRPC_CONTAINER_OF_GRPC_DATA are refused: data on the grid is an array of numbers. */
typedef enum {
    GRPC_BOOL = 0,
    GRPC_INT,
    GRPC_DOUBLE,
    GRPC_COMPLEX,
    GRPC_STRING,
    GRPC_FILE,
    GRPC_CONTAINER_OF_GRPC_DATA,
    GRPC_CHAR,
    GRPC_SHORT,
    GRPC_LONG,
    GRPC_FLOAT,
    GRPC_SCOMPLEX,
    GRPC_DCOMPLEX
} grpc_data_type_t;

/* What grpc_data_getinfo reports. */
typedef enum {
    GRPC_DATA_HANDLE = 0,     /* the id on the grid ("" until it is kept there) */
    GRPC_INPUT_URI,           /* one URI per line */
    GRPC_OUTPUT_URI,          /* one URI per line */
    GRPC_MANAGEMENT_MODE,     /* e.g. "GRPC_STICKY" */
    GRPC_TYPE,                /* e.g. "GRPC_DOUBLE" */
    GRPC_DIMENSIONS,          /* e.g. "60 60" */
    GRPC_LOCATIONS_LIST,      /* the compute servers holding a copy, one per line */
    GRPC_STATUS               /* "GRPC_IN_PLACE", "GRPC_TRANSFERING" or "GRPC_ERROR_TRANSFER" */
} grpc_data_info_type_t;

typedef enum {
    GRPC_WAIT_ALL = 0,
    GRPC_WAIT_ANY
} grpc_completion_mode_t;

/* Describes `data`; moves nothing (the first call or transfer does). A "ninf://grid/ID"
 * input binds to data already kept under that id, which must be the client's own and of
 * `data_type` and `data_dimensions`. */
grpc_error_t grpc_data_init(grpc_data_t *data, const char **list_of_URI_input,
                            const char **list_of_URI_output, grpc_data_type_t data_type,
                            const size_t *data_dimensions,
                            const grpc_data_mode_t *list_of_data_mode);

/* Starts moving the value from the first input URI (NULL: the data's own, its copy on the
 * grid once it has one) to every output URI (NULL: the data's own, with the data's own
 * modes). Returns at once; grpc_data_wait waits for it. */
grpc_error_t grpc_data_transfer(grpc_data_t *data, const char **list_of_input_URI,
                                const char **list_of_output_URI,
                                const grpc_data_mode_t *list_of_output_modes);

/* Waits for the transfers of a NULL-terminated list of data: all of them (GRPC_WAIT_ALL),
 * or the first to end (GRPC_WAIT_ANY, named in *returned_data). Data with no transfer in
 * flight counts as ended. The first failed transfer's code is returned. */
grpc_error_t grpc_data_wait(const grpc_data_t **list_of_data, grpc_completion_mode_t mode,
                            grpc_data_t **returned_data);

/* *info: a new NUL-terminated string (free it with free()). server_name is unused and may
 * be NULL. */
grpc_error_t grpc_data_getinfo(grpc_data_t *data, grpc_data_info_type_t info_tag,
                               const char *server_name, char **info);

/* Forgets the handle here; the data stays on the grid (renewed while this process lives),
 * where grpc_data_init with input "ninf://grid/ID" finds it again. */
grpc_error_t grpc_data_unbind(grpc_data_t *data);

/* Frees the data at the listed locations and forgets the handle: NULL frees it everywhere
 * on the grid; "ninf://grid" frees the grid's copies; "file:///PATH" deletes the file;
 * memory:// locations are the program's and left as they are. */
grpc_error_t grpc_data_free(grpc_data_t *data, const char **URI_locations);

/* Names client memory for memory://localhost/KEY URIs. The memory must stay alive while
 * data using the key is transferred or called with. */
grpc_error_t grpc_data_memory_mapping_set(const char *key, void *data);
grpc_error_t grpc_data_memory_mapping_get(const char *key, void **data);

#ifdef __cplusplus
}
#endif

#endif /* NINF_GRPC_DATA_H */
