/* The tests of test_rpc_sim in the files rpc_sim_*.c beside it; main() is in
 * test_rpc_sim.c. */
#ifndef ERMA_TESTS_RPC_SIM_H
#define ERMA_TESTS_RPC_SIM_H

/* rpc_sim_paths.c */
void test_multipath(void **state);
void test_multipath_errors(void **state);

/* rpc_sim_sessions.c */
void test_many_sessions(void **state);
void test_refusal(void **state);
void test_malformed(void **state);
void test_inconsistent_sizes(void **state);
void test_session_credits(void **state);

/* rpc_sim_failure.c */
void test_peer_failure(void **state);
void test_disconnect(void **state);
void test_request_timeout(void **state);
void test_deferred_request(void **state);
void test_unregistered_type(void **state);

/* rpc_sim_busy.c */
void test_stalled_server(void **state);

/* rpc_sim_connect.c */
void test_connect_flood(void **state);
void test_connect_under_loss(void **state);
void test_secure_sessions(void **state);
void test_secure_mismatch(void **state);
void test_secure_forged_answers(void **state);
void test_secure_forged_auth_race(void **state);

#endif
