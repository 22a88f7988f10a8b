/* The raft messages on the wire (raftkv.h, "Network"): each is
 * [u64 sender id][u16 len][sender address] and the body of its kind. */
#ifndef RAFTKV_MSG_H
#define RAFTKV_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <raft.h>

/* Bytes of m sent by addr; 0 when m is of no kind known. */
size_t raftkv__msg_size(const struct raft_message *m, const char *addr);
/* Writes m, sent by (id, addr), to out[raftkv__msg_size()). */
void raftkv__msg_encode(const struct raft_message *m, raft_id id, const char *addr,
                        uint8_t *out);
/* Decodes a message of the kind type into m, its sender's address into
 * addr[ADDR_MAX] (m->server_address points there). False when malformed
 * or out of memory, m then owning nothing. A received AppendEntries'
 * entries share one raft_malloc() batch, as libraft requires. */
bool raftkv__msg_decode(unsigned type, const uint8_t *data, size_t len, struct raft_message *m,
                        char *addr);
/* Frees what a decoded message owns, when it is not handed to raft. */
void raftkv__msg_release(struct raft_message *m);

#endif
