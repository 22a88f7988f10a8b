/* One-sided ops and a busy target (erma/rma.h, Busy hosts), on the sim
 * fabric in virtual time: a target whose loop stalls says so in its
 * answers, and the initiator's RTO remembers the stall, so that a longer
 * one, up to twice as long, times nothing out. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "rma_util.h"

#define REGION_LEN 4096

struct busy {
    struct world w;
    uint8_t *mem, buf[64];
    struct erma_rkey k;
    int peer;
};

static void busy_up(struct busy *b)
{
    world_up(&b->w, true, 2);
    b->mem = calloc(1, REGION_LEN);
    assert_non_null(b->mem);
    uint32_t region;
    assert_int_equal(erma_region_register(b->w.rma[0], b->mem, REGION_LEN, ERMA_RMA_PERM_READ,
                                          &region),
                     ERMA_OK);
    char uri[128];
    assert_int_equal(erma_rma_uri(b->w.rma[1], uri, sizeof uri), ERMA_OK);
    assert_int_equal(erma_region_export_uri(b->w.rma[0], region, erma_rma_identity(b->w.rma[1]),
                                            uri, &b->k),
                     ERMA_OK);
    b->peer = erma_rma_peer(b->w.rma[1], b->w.uri[0], 0);
    assert_true(b->peer >= 0);
}

static uint64_t rto(const struct busy *b)
{
    struct erma_rma_rtt r;
    assert_int_equal(erma_rma_peer_rtt(b->w.rma[1], b->peer, &r), ERMA_OK);
    return r.rto_ns;
}

/* One 64 B READ while the target's loop is away for stall_ns: only the
 * initiator runs meanwhile, the request waiting at the target's port. */
static int stalled_read(struct busy *b, uint64_t stall_ns)
{
    struct erma_rma_cmd c = cmd_of(ERMA_RMA_READ, b->peer, &b->k, 0, b->buf, sizeof b->buf, 0);
    const int slot = erma_rma_submit(b->w.rma[1], &c);
    assert_true(slot >= 0);
    struct erma_endpoint *initiator[1] = {b->w.ep[1]};
    struct erma_rma_completion out;
    struct gather g = {b->w.rma[1], &out, 1, 0};
    erma_sim_run(b->w.sim, initiator, 1, stall_ns, gather_done, &g);
    if (!g.got)
        assert_int_equal(world_wait(&b->w, 1, &out, 1, 1000000000ull), 1);
    return out.status;
}

static void test_rto_remembers_a_stall(void **state)
{
    (void)state;
    struct busy b;
    busy_up(&b);
    for (int i = 0; i < 20; i++) /* RTT samples of a quiet target */
        assert_int_equal(stalled_read(&b, 0), ERMA_OK);
    const uint64_t quiet = rto(&b);
    /* a stall within the RTO: answered, and remembered */
    const uint64_t first = quiet * 8 / 10;
    assert_int_equal(stalled_read(&b, first), ERMA_OK);
    const uint64_t after = rto(&b);
    /* a longer one, past the quiet RTO: still answered */
    const uint64_t second = quiet * 3 / 2;
    const int status = stalled_read(&b, second);
    print_message("  RTO %.1f us quiet; a %.1f us stall answered, RTO %.1f us; a %.1f us stall "
                  "then: %s\n",
                  quiet / 1e3, first / 1e3, after / 1e3, second / 1e3, erma_strerror(status));
    assert_true(after >= 2 * first);
    assert_int_equal(status, ERMA_OK);
    world_down(&b.w);
    free(b.mem);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rto_remembers_a_stall),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
