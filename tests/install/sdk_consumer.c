/* A program on the driver SDK (erma/sdk/, installed with
 * -DERMA_INSTALL_SDK=ON): it sizes Timely and the 1RMA windows for a link,
 * encodes a wire header, writes and reads a bundle and draws from the
 * random sequence, and checks the answers. Exits 0 when all hold. */
#include <stdint.h>
#include <stdio.h>

#include <erma/erma.h>
#include <erma/sdk/bundle.h>
#include <erma/sdk/cc.h>
#include <erma/sdk/rand.h>
#include <erma/sdk/transport_driver.h>
#include <erma/sdk/wire.h>

int main(void)
{
    const struct erma_timely_cfg t = erma_timely_cfg_for(25e9, 10000);
    const struct erma_window_cfg w = erma_window_cfg_for(25e9, 10000);
    uint8_t buf[8];
    erma_put_le(buf, 0x0102030405060708ull, 8);
    uint8_t bundle[ERMA_HDR_SIZE + ERMA_BUNDLE_LEN_SIZE + 1] = {0};
    erma_bundle_hdr(bundle, 1);
    erma_bundle_len(bundle + ERMA_HDR_SIZE, 1);
    bundle[ERMA_HDR_SIZE + ERMA_BUNDLE_LEN_SIZE] = 42;
    struct erma_bundle_reader r;
    const uint8_t *pkt = NULL;
    uint32_t len = 0;
    const int bundled = erma_bundle_open(&r, bundle, sizeof bundle) &&
                        erma_bundle_next(&r, &pkt, &len) && len == 1 && *pkt == 42 &&
                        erma_bundle_done(&r);
    uint64_t seed = 1;
    const uint64_t a = erma_splitmix64(&seed), b = erma_splitmix64(&seed);
    const int ok = t.link_bps == 25e9 && w.init_cwnd > 1 && buf[0] == 8 && buf[7] == 1 &&
                   erma_get_le(buf, 8) == 0x0102030405060708ull && a != b && bundled;
    printf("sdk consumer: timely link %.0f bps, window init %.1f ops, wire and rand %s\n",
           t.link_bps, w.init_cwnd, ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
