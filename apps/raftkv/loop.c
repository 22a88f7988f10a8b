/* raftkv's event loop (loop.h). */
#include "erma/clock.h"
#include "erma/errors.h"
#include "raftkv/loop.h"

struct hook {
    int (*poll)(void *obj);
    void *obj;
    bool (*stop)(void *ctx);
    void *ctx;
    bool stopped;
};

static bool after_pass(void *ctx)
{
    struct hook *h = ctx;
    const int work = h->poll(h->obj);
    h->stopped = h->stop && h->stop(h->ctx);
    return h->stopped || work > 0;
}

int raftkv__run(struct erma_endpoint *ep, int (*poll)(void *obj),
                uint64_t (*next_timer)(const void *obj), void *obj, bool (*stop)(void *ctx),
                void *ctx, uint64_t timeout_ns)
{
    const uint64_t start = erma_now_ns();
    const uint64_t end = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
    struct hook h = {poll, obj, stop, ctx, false};
    for (;;) {
        const uint64_t now = erma_now_ns();
        if (now >= end)
            return ERMA_ETIMEDOUT;
        uint64_t until = next_timer(obj);
        until = until < end ? until : end;
        erma_endpoint_run_until(ep, after_pass, &h, until > now ? until - now : 0);
        if (h.stopped)
            return ERMA_OK;
    }
}
