#!/usr/bin/env bash
# Runs the performance benchmark suite and writes bench/RESULTS.md.
#
#   bench/run.sh                      # everything, ~15 minutes on 2 cores (~40 with PostgreSQL)
#   TEST_DATABASE_URL=postgres://… bench/run.sh   # also PostgreSQL (a fresh database:
#                                                 # the benchmarks truncate its tables)
#
# Environment (all optional):
#   BENCH_OUT      directory for databases, raw outputs and profiles (default: a new
#                  directory under /var/tmp, kept and printed at the end)
#   BENCH_COUNT    runs of the Go benchmarks, interleaved (4)   BENCH_TIME  -benchtime (1s)
#   BENCH_SUBS     WebSocket subscribers (10000)          BENCH_SMALL small broadcast (1000)
#   BENCH_ROUNDS_BIG  rounds of the broadcast to all, the first a warm-up (6); as many
#                  again with no subscriber connected (b_none, P6's baseline)
#   BENCH_PROFILE  0 skips the profiling pass of the WebSocket runs (1)
#   BENCH_RESULTS  where to write the report (bench/RESULTS.md)
#   BENCH_PGSCALE  0 skips the PostgreSQL scale-out run (bench/cmd/pgscale) (1)
#   BENCH_PGWS     0 skips the WebSocket run of the service on PostgreSQL (1; with
#                  TEST_DATABASE_URL: phases b_small, b_big, a, fewer rounds, ~2 minutes)
# Every step is bounded: go test -timeout, wsload -timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$(date +%s)

out=${BENCH_OUT:-$(mktemp -d /var/tmp/awareness-bench.XXXXXX)}
mkdir -p "$out/db" "$out/prof"
count=${BENCH_COUNT:-4}
btime=${BENCH_TIME:-1s}
subs=${BENCH_SUBS:-10000}
small=${BENCH_SMALL:-1000}
rbig=${BENCH_ROUNDS_BIG:-6}
results=${BENCH_RESULTS:-$root/bench/RESULTS.md}
export BENCH_DIR="$out/db"
export PATH="$PATH:$(go env GOPATH)/bin"

step() { printf '\n== %s (%ds) ==\n' "$*" $(( $(date +%s) - start )); }

# 10k WebSocket clients need ~10k descriptors in the load generator's process.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((subs + 1000)) ]; then
  echo "run.sh: the file descriptor limit $(ulimit -n) is below $((subs + 1000)); lower BENCH_SUBS" >&2
  exit 1
fi

step "build"
go build -o "$out/awareness" .
for c in wsload wsbaseline wsgqlgen profserve benchreport pgscale; do go build -o "$out/$c" "./bench/cmd/$c"; done
# The Node graphql-ws peer (bench/node): skipped when node/npm are missing.
nodepeer=""
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  (cd bench/node && npm ci --no-audit --no-fund --loglevel=error) && nodepeer="$root/bench/node/wsnode"
else
  echo "run.sh: node/npm missing: the Node graphql-ws peer is skipped" >&2
fi
go test -c -o "$out/bench.test" ./bench/

step "machine facts"
{
  echo "date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nproc:    $(nproc)"
  echo "cpu:      $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "memory:   $(free -m | awk '/Mem:/ {print $2 " MiB"}')"
  echo "kernel:   $(uname -r)"
  echo "go:       $(go version | cut -d' ' -f3-)"
  echo "disk:     $(df -T "$out" | awk 'NR==2 {print $2 " on " $1}') (databases in $out/db)"
  echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, at start)"
  echo "ulimit-n: $(ulimit -n)"
  (cd "$out" && BENCH_VERSIONS=1 ./bench.test -test.run '^TestVersions$' -test.v | grep -E '^(sqlite|postgres):')
} | tee "$out/facts.txt"

# -count would run each sub-benchmark's repetitions back to back; separate runs
# interleave raw and svc, so that the machine's drift hits both alike.
step "Go benchmarks: append (B1, B3 and its writer sweep, the raw append's latency and CPU for P3/P4), sessionStatus (B4), notice to 10k watchers (P2), $count interleaved runs"
: >"$out/bench.txt"
for i in $(seq "$count"); do
  (cd "$out" && ./bench.test -test.run '^$' -test.bench '^Benchmark(AppendOne|AppendConcurrent|SessionStatus|NotifyWide)$' \
    -test.benchtime="$btime" -test.count=1 -test.timeout=10m) | tee -a "$out/bench.txt"
done

step "Go benchmarks: restart (B7), 3 interleaved runs"
: >"$out/bench-restart.txt"
for i in 1 2 3; do
  (cd "$out" && ./bench.test -test.run '^$' -test.bench '^BenchmarkRestart$' \
    -test.benchtime=3x -test.count=1 -test.timeout=10m) | tee -a "$out/bench-restart.txt"
done

# summarize BINARY PROFILE OUT: the flat top (where the CPU is), then the cumulative
# top restricted to the project's frames and the library calls that explain them.
show='github.com/awareness/awareness/(internal|graph/resolvers)|wsgorilla|gorm\.io/gorm\.\(\*DB\)\.(Transaction|Exec|Rows|Scan)$|database/sql\.\(\*Tx\)\.StmtContext$|sqlite3_prepare|sqlite3_step|memeqbody|MarshalSliceConcurrently$|_StateEvent$|_StaleNotice$|encoding/json\.Marshal$|runtime\.mallocgc$|runtime\.gcBgMarkWorker$'
summarize() {
  {
    go tool pprof -top -nodecount=12 -ignore='seed|fresh|openSQLiteStore|openPGStore|copyFile' "$1" "$2" 2>/dev/null | sed -n '5,30p'
    echo "--- cumulative, project frames and the library calls under them"
    go tool pprof -top -cum -nodecount=24 -ignore='seed|fresh|openSQLiteStore|openPGStore|copyFile' -show="$show" "$1" "$2" 2>/dev/null \
      | sed -n '/flat  flat%/,$p' | tail -n +2
  } >"$3" || true
}

step "CPU profiles of the service side of B1, B3, B4, B7"
prof() { # id pattern benchtime
  (cd "$out" && ./bench.test -test.run '^$' -test.bench "$2" -test.benchtime="$3" -test.timeout=5m \
    -test.cpuprofile "prof/cpu-$1.pprof" >/dev/null)
  summarize "$out/bench.test" "$out/prof/cpu-$1.pprof" "$out/prof/top-$1.txt"
}
prof B1-sqlite 'AppendOne/^impl=svc$/^db=sqlite$' 1000x
prof B3-sqlite 'AppendConcurrent/^impl=svc$/^db=sqlite$' 4000x
prof B4-sqlite 'SessionStatus/^impl=svc$/^db=sqlite$' 500x
prof B7-sqlite 'Restart/^impl=svc$/^db=sqlite$/^refreeze=all$' 3x
if [ -n "${TEST_DATABASE_URL:-}" ]; then
  prof B1-postgres 'AppendOne/^impl=svc$/^db=postgres$' 300x
  prof B3-postgres 'AppendConcurrent/^impl=svc$/^db=postgres$' 1000x
  prof B4-postgres 'SessionStatus/^impl=svc$/^db=postgres$' 300x
fi

step "WebSocket: service (real binary), L1 L2 L3"
"$out/wsload" -mode service -bin "$out/awareness" -db "$out/db/ws-service.db" -subs "$subs" -small "$small" \
  -rounds-small 6 -rounds-big "$rbig" -save-template "$out/db/ws-template.db" \
  -out "$out/ws-service.json" -server-log "$out/server-service.log" -timeout 6m || echo "wsload service failed (see above)"
# The service runs above without keep-alives, like the peers; this run keeps its default
# pings (every 20 s, a pong read per ping) in phase a, for what dead-peer detection costs.
step "WebSocket: service with its default pings, phase a"
pings=""
if [ -f "$out/db/ws-template.db" ] && "$out/wsload" -mode service -pings -bin "$out/awareness" -db "$out/db/ws-pings.db" \
  -from-template "$out/db/ws-template.db" -subs "$subs" -small "$small" -phases a -no-l3 \
  -out "$out/ws-service-pings.json" -server-log "$out/server-service-pings.log" -timeout 4m; then
  pings="$out/ws-service-pings.json"
else
  echo "wsload service with pings failed (see above)"
fi
pgws=""
if [ -n "${TEST_DATABASE_URL:-}" ] && [ "${BENCH_PGWS:-1}" = 1 ]; then
  # The same service on a fresh PostgreSQL database (created and dropped by wsload):
  # the broadcasts and the own notice at 500/s, without L3 and b_none.
  step "WebSocket: service (real binary) on PostgreSQL, b_small b_big a"
  if "$out/wsload" -mode service -bin "$out/awareness" -pg "$TEST_DATABASE_URL" -subs "$subs" -small "$small" \
    -rounds-small 4 -rounds-big 3 -phases b_small,b_big,a -no-l3 \
    -out "$out/ws-service-pg.json" -server-log "$out/server-service-pg.log" -timeout 5m; then
    pgws="$out/ws-service-pg.json"
  else
    echo "wsload service on PostgreSQL failed (see above)"
  fi
fi
frame=$(grep -o '"frame_bytes": [0-9]*' "$out/ws-service.json" 2>/dev/null | grep -o '[0-9]*$' || true)
[ "${frame:-0}" -gt 0 ] 2>/dev/null || frame=400

# The peers: the same load and subscription type, -mode baseline (the
# wsbaseline triggers), between the service and gorilla. Every run ends with b_none,
# the big broadcast's triggers with no subscriber connected (P6's baseline).
step "WebSocket: stock-gqlgen peer (bench/cmd/wsgqlgen)"
"$out/wsload" -mode baseline -bin "$out/wsgqlgen" -subs "$subs" -small "$small" -rounds-small 6 -rounds-big "$rbig" \
  -out "$out/ws-gqlgen.json" -server-log "$out/server-gqlgen.log" -timeout 4m || echo "wsload gqlgen failed (see above)"
step "WebSocket: stock gqlgen + the raw durable append per trigger (bench/cmd/wsgqlgen -durable)"
"$out/wsload" -mode baseline -bin "$out/wsgqlgen" -server-args "-durable $out/db/ws-gqlgen-durable.db" -subs "$subs" -small "$small" -rounds-small 6 -rounds-big "$rbig" \
  -out "$out/ws-gqlgen-durable.json" -server-log "$out/server-gqlgen-durable.log" -timeout 4m || echo "wsload gqlgen -durable failed (see above)"
if [ -n "$nodepeer" ]; then
  step "WebSocket: Node graphql-ws peer (bench/node)"
  "$out/wsload" -mode baseline -bin "$nodepeer" -subs "$subs" -small "$small" -rounds-small 6 -rounds-big "$rbig" \
    -out "$out/ws-node.json" -server-log "$out/server-node.log" -timeout 4m || echo "wsload node failed (see above)"
fi

step "WebSocket: bare gorilla baseline, frames of $frame bytes"
"$out/wsload" -mode baseline -bin "$out/wsbaseline" -frame-bytes "$frame" -subs "$subs" -small "$small" -rounds-small 6 -rounds-big "$rbig" \
  -out "$out/ws-baseline.json" -server-log "$out/server-baseline.log" -timeout 4m || echo "wsload baseline failed (see above)"

profjson=""
if [ "${BENCH_PROFILE:-1}" = 1 ]; then
  step "WebSocket: profiling pass (bench/cmd/profserve, same handler, pprof), b_big, a and a_l3"
  if [ -f "$out/db/ws-template.db" ] && "$out/wsload" -mode service -bin "$out/profserve" -db "$out/db/ws-prof.db" \
    -from-template "$out/db/ws-template.db" -subs "$subs" -small "$small" -phases b_big,a,a_l3 -rounds-big 2 \
    -out "$out/ws-prof.json" -server-log "$out/server-prof.log" -profile-dir "$out/prof" -timeout 4m; then
    profjson="$out/ws-prof.json"
  fi
  for p in b_small b_big a a_l3; do
    if [ -f "$out/prof/cpu-$p.pprof" ]; then summarize "$out/profserve" "$out/prof/cpu-$p.pprof" "$out/prof/top-L-$p.txt"; fi
  done
  [ -f "$out/prof/heap-idle.pprof" ] && go tool pprof -top -sample_index=inuse_space -nodecount=30 "$out/profserve" \
    "$out/prof/heap-idle.pprof" 2>/dev/null | sed -n '4,40p' >"$out/prof/top-L-heap-idle.txt" || true
fi

step "report"
stat=""
if command -v benchstat >/dev/null 2>&1; then
  cat "$out/bench.txt" "$out/bench-restart.txt" >"$out/bench-all.txt"
  benchstat -col /impl "$out/bench-all.txt" >"$out/benchstat.txt" 2>&1 || true
  stat="$out/benchstat.txt"
fi
elapsed=$(( $(date +%s) - start ))
"$out/benchreport" -bench "$out/bench.txt,$out/bench-restart.txt" -svc "$out/ws-service.json" -svc-pg "$pgws" -svc-pings "$pings" \
  -base "$out/ws-baseline.json" -gqlgen "$out/ws-gqlgen.json" -gqlgen-durable "$out/ws-gqlgen-durable.json" -node "$out/ws-node.json" -prof "$profjson" -facts "$out/facts.txt" -profiles "$out/prof" \
  -benchstat "$stat" -out "$results" -notes "$root/bench/GAPS.md" \
  -run-info "bench/run.sh in ${elapsed}s; Go benchmarks -count=$count -benchtime=$btime; $subs WebSocket subscribers; raw outputs in $out"
if [ -n "${TEST_DATABASE_URL:-}" ] && [ "${BENCH_PGSCALE:-1}" = 1 ]; then
  # Several serve processes on one PostgreSQL (X1-X5, ~17 minutes on 2 cores): a
  # private cluster, fresh databases in it. -timeout bounds the whole of pgscale;
  # at 9m it ended two full runs in phase x3 or hints, before x4 and start.
  step "PostgreSQL scale-out: bench/cmd/pgscale, P = 1, 3, 5 processes"
  if (cd "$out" && ./pgscale -bin ./awareness -label "this tree" -out "$out/pgscale.md" -timeout 25m); then
    { echo; echo "## PostgreSQL scale-out (bench/cmd/pgscale, generated)"; echo; cat "$out/pgscale.md"; } >>"$results"
  else
    echo "pgscale failed (see above)"
  fi
fi
step "done: $results (raw outputs and profiles in $out)"
