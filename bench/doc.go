// Package bench is the performance benchmark suite of the service. It has no code of
// its own outside tests, commands and what the commands share:
//
//   - store_bench_test.go: appends, one writer and 16 concurrent writers (B1, B3, with
//     a sweep of 32 and 64 writers and of the raw appender's batch size), and restart
//     to ready (B7), each against a raw database/sql baseline on the same database
//     settings; the raw append's latency and CPU per append are the floor that P3
//     and P4 state beside the in-memory peers;
//   - query_bench_test.go: sessionStatus(changesSince) through the GraphQL handler
//     against a raw range scan + encoding/json of the same rows (B4);
//   - cmd/wsload: the WebSocket load generator for notice latency, idle subscriber
//     memory and sessionStatus under load (L1, L2, L3), run as a separate process
//     against the real server binary and against the peers: cmd/wsbaseline, a bare
//     gorilla broadcast server, cmd/wsgqlgen, stock gqlgen (with -durable, stock
//     gqlgen + the raw durable append per trigger), and node/, graphql-ws; each run
//     ends with the big broadcast's triggers and no subscriber connected (P6's
//     baseline); no server sends keep-alives (the peers have none on
//     graphql-transport-ws), except one run of the service's phase a with its
//     default pings (-pings), which prices dead-peer detection;
//   - cmd/profserve: the service's handler composed like server.go, with pprof and
//     runtime counters, for profiling the L runs;
//   - cmd/benchreport: turns one run's outputs into RESULTS.md;
//   - cmd/pgscale: several serve processes on one PostgreSQL database (X1-X5);
//   - internal/: loadkeys (the session keys of a load run), rawappend (the raw durable
//     append: the baselines' and wsgqlgen -durable's), wsresult (wsload's JSON
//     result, which benchreport reads), proc (starting and measuring a server under
//     test: wsload, pgscale) and serve (serving, triggers and /debug/stats of the
//     peers and profserve);
//   - run.sh: runs everything and writes RESULTS.md.
//
// Benchmarks are named Benchmark<X>/impl=<raw|svc|…>/db=<sqlite|postgres>, so that
// `benchstat -col /impl` compares an implementation with its baseline. The append and
// query benchmarks also run on PostgreSQL (db=postgres) when TEST_DATABASE_URL names a
// database they may empty. Nothing here runs without -bench; TestVersions runs only
// with BENCH_VERSIONS=1.
package bench
