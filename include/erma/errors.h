/*
 * erma/errors.h - error codes shared by every layer of erma.
 *
 * For applications (included by erma/erma.h) and every layer.
 *
 * Every erma function that can fail returns int: 0 (ERMA_OK) on success or
 * one of the negative codes below. Completions (RPC continuations, RMA
 * completions) carry the same codes. erma_strerror() gives a short English
 * description of any code, including unknown ones.
 */
#ifndef ERMA_ERRORS_H
#define ERMA_ERRORS_H

#include "erma/api.h"

ERMA_BEGIN_DECLS

enum erma_err {
    ERMA_OK = 0,
    ERMA_EINVAL = -1,          /* invalid argument or configuration */
    ERMA_ENOMEM = -2,          /* out of memory or buffers */
    ERMA_E2BIG = -3,           /* message or packet larger than allowed */
    ERMA_EAGAIN = -4,          /* resource busy, try again (queue full) */
    ERMA_ESYS = -5,            /* system call failed; errno holds the cause */
    ERMA_ENOTSUP = -6,         /* transport or feature not built or not supported */
    ERMA_EADDR = -7,           /* malformed URI or unresolvable address */
    ERMA_ETIMEDOUT = -8,       /* operation timed out */
    ERMA_EPEERFAILED = -9,     /* remote endpoint declared dead */
    ERMA_ESESSRESET = -10,     /* session reset or disconnected locally */
    ERMA_ECANCELLED = -11,     /* cancelled: by the application, or a fenced write whose earlier write failed */
    ERMA_ENOSLOTS = -12,       /* no free slot / session / command slot */
    ERMA_EREFUSED = -13,       /* peer refused (e.g. credits would overflow its ring) */
    ERMA_ENOENT = -14,         /* no such handler, session or object */
    ERMA_EBADPKT = -15,        /* malformed, truncated or stale packet */
    /* One-sided (RMA) outcomes, see rma.h. */
    ERMA_ENACK = -16,          /* target overloaded, request not queued */
    ERMA_EDISPATCH = -17,      /* DISPATCH_TIMEOUT: waited too long locally */
    ERMA_EAUTH = -18,          /* AUTH_FAILED: verification failed (key, tamper) */
    ERMA_ENOREGION = -19,      /* NO_SUCH_REGION */
    ERMA_EBOUNDS = -20,        /* OUT_OF_BOUNDS */
    ERMA_EPERM = -21,          /* PERMISSION_DENIED */
    ERMA_ENOBUFS = -22,        /* no room in the receiver's budget for messages
                                  being received (rpc.h, Budgets) */
    ERMA_ENOHANDLER = -23,     /* the server has no handler for the request type */
    ERMA_ESUPERSEDED = -24,    /* KEY_SUPERSEDED: the rkey's generation was
                                  retired by a REKEY; fetch the current key */
    ERMA_ERR_LAST = -25
};

/* Returns a static, never-NULL description of err (0 or a negative code;
 * "unknown error" for any other value). */
const char *erma_strerror(int err);

ERMA_END_DECLS

#endif
