#include "erma/errors.h"

static const char *const messages[] = {
    [0] = "success",
    [-ERMA_EINVAL] = "invalid argument",
    [-ERMA_ENOMEM] = "out of memory",
    [-ERMA_E2BIG] = "message too large",
    [-ERMA_EAGAIN] = "resource temporarily unavailable",
    [-ERMA_ESYS] = "system call failed",
    [-ERMA_ENOTSUP] = "not supported",
    [-ERMA_EADDR] = "bad or unresolvable address",
    [-ERMA_ETIMEDOUT] = "timed out",
    [-ERMA_EPEERFAILED] = "peer failed",
    [-ERMA_ESESSRESET] = "session reset",
    [-ERMA_ECANCELLED] = "cancelled",
    [-ERMA_ENOSLOTS] = "no free slots",
    [-ERMA_EREFUSED] = "refused by peer",
    [-ERMA_ENOENT] = "no such object",
    [-ERMA_EBADPKT] = "malformed packet",
    [-ERMA_ENACK] = "NACK: target overloaded",
    [-ERMA_EDISPATCH] = "dispatch timeout",
    [-ERMA_EAUTH] = "authentication failed",
    [-ERMA_ENOREGION] = "no such region",
    [-ERMA_EBOUNDS] = "out of bounds",
    [-ERMA_EPERM] = "permission denied",
    [-ERMA_ENOBUFS] = "receiver's message memory budget exhausted",
    [-ERMA_ENOHANDLER] = "no handler for the request type",
    [-ERMA_ESUPERSEDED] = "key superseded by a rekey",
};

const char *erma_strerror(int err)
{
    if (err > 0 || err <= ERMA_ERR_LAST)
        return "unknown error";
    return messages[-err];
}
