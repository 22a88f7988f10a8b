/* test_rpc_sim (the RPC layer over the sim fabric, virtual time): a server
 * whose loop stalls, as a busy host's does (rpc.h, Busy hosts). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "erma/clock.h"
#include "erma/sim.h"
#include "rpc/internal.h"
#include "rpc_util.h"
#include "rpc_world.h"
#include "test_rpc_sim.h"

#define STALL_NS 2000000ull /* 10 x the sim's 200 us rto_ns */
#define REQ_SIZE (64u << 10)

/* One 64 KiB echo whose server stalls STALL_NS while the client's first
 * window waits on it; the client's counters after it. */
static void stalled_call(struct world *w, int s, uint32_t id, struct erma_rpc_stats *after)
{
    struct call c = {0};
    assert_int_equal(erma_msgbuf_alloc(w->rpc[0], REQ_SIZE, &c.req), ERMA_OK);
    assert_int_equal(erma_msgbuf_alloc(w->rpc[0], 64, &c.resp), ERMA_OK);
    fill_req(&c.req, id, 64);
    assert_int_equal(erma_rpc_call(w->rpc[0], s, ECHO, &c.req, &c.resp, on_call, &c), ERMA_OK);
    /* only the client runs: its packets queue at the server's port */
    struct erma_endpoint *client[1] = {w->ep[0]};
    assert_int_equal(erma_sim_run(w->sim, client, 1, STALL_NS, flag_set, &c.done),
                     ERMA_ETIMEDOUT);
    assert_int_equal(run_until(w, &c.done, 1000000000ull), ERMA_OK);
    assert_int_equal(c.status, ERMA_OK);
    assert_int_equal(check_resp(&c.resp, id, 64), 0);
    erma_msgbuf_free(w->rpc[0], &c.req);
    erma_msgbuf_free(w->rpc[0], &c.resp);
    erma_rpc_get_stats(w->rpc[0], after);
}

/* The first stall times out, and the answers, which say how long the
 * packets waited in the server, show the timeout spurious; the timeout
 * then covers such stalls, so the second one sends nothing again. Timely
 * sees only the network's part: the session stays at line rate. */
void test_stalled_server(void **state)
{
    (void)state;
    struct world w;
    world_up(&w, "stall", 2, 0, 0);
    world_start(&w);
    const int s = connect(&w, 0, 1);
    call_once(&w, 0, s, ECHO, REQ_SIZE, 64, 1, ERMA_OK); /* RTT samples, no stall */
    struct erma_rpc_stats first, second;
    stalled_call(&w, s, 2, &first);
    print_message("  first stall: %llu timeouts, %llu spurious, %llu packets sent again\n",
                  (unsigned long long)first.retransmits,
                  (unsigned long long)first.spurious_timeouts,
                  (unsigned long long)first.retransmitted_pkts);
    assert_true(first.retransmits >= 1);
    assert_true(first.spurious_timeouts >= 1);
    stalled_call(&w, s, 3, &second);
    assert_int_equal(second.retransmits, first.retransmits);
    assert_int_equal(second.retransmitted_pkts, first.retransmitted_pkts);
    struct erma_session_cc cc;
    assert_int_equal(erma_session_cc_stats(w.rpc[0], s, &cc), ERMA_OK);
    print_message("  after both: rate %.2f Gb/s, last sample %.1f us\n", cc.rate_bps / 1e9,
                  cc.last_rtt_ns / 1e3);
    assert_true(cc.last_rtt_ns < STALL_NS / 10);
    assert_true(cc.rate_bps >= w.rpc[0]->cc.timely_cfg.link_bps * 0.99);
    world_down(&w);
}
