/* A compute server killed under a running call. Arguments: GRID_FILE SERVER. The program
 * prints "started" after each asynchronous call and reads a line from standard input before
 * waiting for it: the test kills a server in between.
 *  - through a handle on the named SERVER, killed: the session is GRPC_SESSION_FAILED and
 *    writes nothing (a named server is what the caller asked for; nothing else may run it);
 *  - through a default handle, its server killed: the proxy runs the call again on another
 *    server and the caller sees only success (a transparent retry). */
#define _POSIX_C_SOURCE 200809L
#include <grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

enum { N = 16 };

static void started(const char *what) {
    char line[64];
    printf("started %s\n", what);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) exit(3);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    EXPECT(grpc_initialize(argv[1]), GRPC_NO_ERROR);
    grpc_function_handle_t named, placed;
    /* The servers register with the metaserver as they come up. */
    for (int tries = 0; grpc_function_handle_default(&placed, "slow_echo") != GRPC_NO_ERROR; tries++) {
        if (tries == 300) {
            printf("FAILED: no server serves slow_echo: %s\n", ninf_error_message());
            return 1;
        }
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    EXPECT(grpc_function_handle_init(&named, argv[2], "slow_echo"), GRPC_NO_ERROR);
    double x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = i * 1.5, y[i] = -1;

    grpc_sessionid_t id;
    EXPECT(grpc_call_async(&named, &id, 4000, (long)N, x, y), GRPC_NO_ERROR);
    started("named");
    EXPECT(grpc_wait(id), GRPC_SESSION_FAILED);
    EXPECT(grpc_get_error(id), GRPC_COMMUNICATION_FAILED);
    for (int i = 0; i < N; i++)
        if (y[i] != -1) return printf("FAILED: a failed call wrote y\n"), 1;
    printf("ok a named server killed under its call: GRPC_SESSION_FAILED (%s), nothing written\n",
           ninf_session_error_message(id));

    EXPECT(grpc_call_async(&placed, &id, 4000, (long)N, x, y), GRPC_NO_ERROR);
    started("placed");
    EXPECT(grpc_wait(id), GRPC_NO_ERROR);
    for (int i = 0; i < N; i++)
        if (y[i] != x[i]) return printf("FAILED: y[%d] = %g\n", i, y[i]), 1;
    printf("ok a placed call whose server was killed ran again elsewhere: y = x\n");
    EXPECT(grpc_function_handle_destruct(&named), GRPC_NO_ERROR);
    EXPECT(grpc_function_handle_destruct(&placed), GRPC_NO_ERROR);
    EXPECT(grpc_finalize(), GRPC_NO_ERROR);
    printf("all passed\n");
    return 0;
}
