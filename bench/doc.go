// Package bench is the performance benchmark suite of the service. It has no code of
// its own outside tests, commands and what the commands share:
//
//   - store_bench_test.go: appends, one writer and 16 concurrent writers (B1, B3), and
//     restart to ready (B7), each against a raw database/sql baseline on the same
//     database settings;
//   - query_bench_test.go: sessionStatus(changesSince) through the GraphQL handler
//     against a raw range scan + encoding/json of the same rows (B4);
//   - cmd/wsload: the WebSocket load generator for notice latency, idle subscriber
//     memory and sessionStatus under load (L1, L2, L3), run as a separate process
//     against the real server binary and against the peers: cmd/wsbaseline, a bare
//     gorilla broadcast server, cmd/wsgqlgen, stock gqlgen, and node/, graphql-ws;
//   - cmd/profserve: the service's handler composed like server.go, with pprof and
//     runtime counters, for profiling the L runs;
//   - cmd/benchreport: turns one run's outputs into RESULTS.md;
//   - cmd/pgscale: several serve processes on one PostgreSQL database (X1-X5);
//   - internal/: loadkeys (the session keys of a load run), wsresult (wsload's JSON
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
