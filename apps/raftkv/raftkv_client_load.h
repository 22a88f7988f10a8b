/* raftkv_client's load command (raftkv_client_load.c; raftkv_client.c
 * says what it does). */
#ifndef RAFTKV_CLIENT_LOAD_H
#define RAFTKV_CLIENT_LOAD_H

#include "raftkv/raftkv.h"

#define OP_TIMEOUT_NS 10000000000ull /* the longest op, which bounds the waits */

/* load [--seconds S] [--keys K] [--inflight W] [--history FILE], argv[0]
 * "load": the exit code, 2 on bad arguments (the caller shows the usage). */
int load_command(struct raftkv_client *c, int argc, char **argv);

#endif
