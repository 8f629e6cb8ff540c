// Command benchreport writes bench/RESULTS.md from the outputs of one bench/run.sh run:
// the go test -bench text (medians over -count runs), the wsload JSON results of the
// service, the baseline and the profiling pass, the machine facts and the pprof tops.
// Every goal is a ratio against a baseline measured in the same run.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/awareness/awareness/bench/internal/wsresult"
)

func main() {
	var (
		benchFiles = flag.String("bench", "", "comma-separated go test -bench outputs")
		svcFile    = flag.String("svc", "", "wsload result of the service")
		svcPGFile  = flag.String("svc-pg", "", "wsload result of the service on PostgreSQL (optional)")
		pingsFile  = flag.String("svc-pings", "", "wsload result of the service with its default pings, phase a (optional)")
		baseFile   = flag.String("base", "", "wsload result of the baseline")
		profFile   = flag.String("prof", "", "wsload result of the profiling pass (optional)")
		factsFile  = flag.String("facts", "", "machine facts")
		profDir    = flag.String("profiles", "", "directory of top-*.txt pprof summaries")
		statFile   = flag.String("benchstat", "", "benchstat output (optional)")
		runInfo    = flag.String("run-info", "", "one line about the run (duration, parameters)")
		out        = flag.String("out", "RESULTS.md", "output file")
		notesFile  = flag.String("notes", "", "hand-written reading of the gaps to append (optional)")
		gqlgenFile = flag.String("gqlgen", "", "wsload result of the stock-gqlgen peer (optional)")
		nodeFile   = flag.String("node", "", "wsload result of the Node graphql-ws peer (optional)")
		durFile    = flag.String("gqlgen-durable", "", "wsload result of the stock-gqlgen peer with -durable (optional)")
	)
	flag.Parse()
	r := &report{bench: map[string]map[string][]float64{}, profDir: *profDir}
	for _, f := range strings.Split(*benchFiles, ",") {
		if f != "" {
			r.parseBench(f)
		}
	}
	r.svc, r.base, r.prof = loadWS(*svcFile), loadWS(*baseFile), loadWS(*profFile)
	r.svcPG, r.svcPings = loadWS(*svcPGFile), loadWS(*pingsFile)
	r.gqlgen, r.node, r.gqlgenDurable = loadWS(*gqlgenFile), loadWS(*nodeFile), loadWS(*durFile)
	facts, _ := os.ReadFile(*factsFile)
	stat, _ := os.ReadFile(*statFile)
	md := r.render(string(facts), string(stat), *runInfo)
	if notes, err := os.ReadFile(*notesFile); *notesFile != "" && err == nil {
		// The reading is written by hand for one run; it says which, so that a newer
		// run's numbers are never read as its subject.
		md += "\n" + string(notes)
	}
	if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	fmt.Println("benchreport: wrote", *out)
}

// pingsNote says where the cost of the service's default pings is, or that this run
// kept them.
func pingsNote(svc, pings *wsresult.Result) string {
	switch {
	case svc != nil && svc.Pings:
		return "in this run it kept its default pings, every 20 s"
	case pings != nil:
		return "row P4 pings sets its default pings, every 20 s, beside it"
	}
	return "its default pings were not measured in this run"
}

// ---------------------------------------------------------------------------------------
// Inputs

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

type report struct {
	bench           map[string]map[string][]float64 // name → unit → values (one per -count run)
	order           []string
	svc, base, prof *wsresult.Result
	gqlgen, node    *wsresult.Result // the peers, optional
	gqlgenDurable   *wsresult.Result // stock gqlgen + the raw durable append, optional
	svcPG           *wsresult.Result // the service on PostgreSQL, optional
	svcPings        *wsresult.Result // the service with its default pings (phase a), optional
	profDir         string
	missed          []string // ids of missed goals, for the profile section
}

func (r *report) parseBench(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		name := strings.TrimPrefix(m[1], "Benchmark")
		fields := strings.Fields(m[2])
		if r.bench[name] == nil {
			r.bench[name] = map[string][]float64{}
			r.order = append(r.order, name)
		}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			r.bench[name][fields[i+1]] = append(r.bench[name][fields[i+1]], v)
		}
	}
}

// med returns the median of a benchmark's metric over the -count runs.
func (r *report) med(name, unit string) (float64, bool) {
	vs := r.bench[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func (r *report) runs(name, unit string) int { return len(r.bench[name][unit]) }

// loadWS reads a wsload result; nil when path is empty or unreadable (the report then
// says what is missing).
func loadWS(path string) *wsresult.Result {
	if path == "" {
		return nil
	}
	w, err := wsresult.Read(path)
	if err != nil {
		return nil
	}
	return w
}

// ---------------------------------------------------------------------------------------
// Goals

type row struct {
	id, what, baseline, measured, ratio, goal, verdict string
}

// latencyFloorMS is the smallest baseline p99 a latency ratio divides by.
const latencyFloorMS = 0.1

const (
	met    = "**met**"
	missed = "**missed**"
	noData = "no data"
)

func verdict(ok bool) string {
	if ok {
		return met
	}
	return missed
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

func (r *report) goals(db string) []row {
	var rows []row
	add := func(rw row) {
		if rw.verdict == missed {
			r.missed = append(r.missed, rw.id+"/"+db)
		}
		rows = append(rows, rw)
	}
	n := func(b, impl string) string { return b + "/impl=" + impl + "/db=" + db }

	// B1
	raw1, ok1 := r.med(n("AppendOne", "raw"), "appends/s")
	svc1, ok2 := r.med(n("AppendOne", "svc"), "appends/s")
	if ok1 && ok2 {
		ratio := svc1 / raw1
		add(row{"B1", "append, 1 writer, durable", fmt.Sprintf("raw insert+head upsert: %.0f/s", raw1),
			fmt.Sprintf("RecordEvent: %.0f/s", svc1), fmt.Sprintf("%.0f%%", 100*ratio), "≥ 70%", verdict(ratio >= 0.70)})
	} else {
		rows = append(rows, row{"B1", "append, 1 writer, durable", noData, "", "", "≥ 70%", noData})
	}
	// B3
	raw3, ok3 := r.med(n("AppendConcurrent", "raw"), "appends/s")
	svc3, ok4 := r.med(n("AppendConcurrent", "svc"), "appends/s")
	batch, _ := r.med(n("AppendConcurrent", "svc"), "ops/tx")
	if ok3 && ok4 && ok2 {
		a, b := svc3/raw3, svc3/svc1
		add(row{"B3", "append, 16 writers, durable", fmt.Sprintf("raw, 100/tx: %.0f/s", raw3),
			fmt.Sprintf("16× RecordEvent: %.0f/s (%.1f ops/tx)", svc3, batch),
			fmt.Sprintf("%.0f%% of raw; %.1f× B1", 100*a, b), "≥ 50% and ≥ 5× B1", verdict(a >= 0.5 && b >= 5)})
	} else {
		rows = append(rows, row{"B3", "append, 16 writers, durable", noData, "", "", "≥ 50% and ≥ 5× B1", noData})
	}
	add(r.sweepB3(db).row())
	// B4
	rawP99, ok5 := r.med(n("SessionStatus", "raw"), "p99-ns")
	svcP99, ok6 := r.med(n("SessionStatus", "svc"), "p99-ns")
	rawP50, _ := r.med(n("SessionStatus", "raw"), "p50-ns")
	svcP50, _ := r.med(n("SessionStatus", "svc"), "p50-ns")
	if ok5 && ok6 {
		ratio := svcP99 / rawP99
		add(row{"B4", "sessionStatus, 200 events, GraphQL handler", fmt.Sprintf("scan+json p99 %s (p50 %s)", ms(rawP99/1e6), ms(rawP50/1e6)),
			fmt.Sprintf("p99 %s (p50 %s)", ms(svcP99/1e6), ms(svcP50/1e6)), fmt.Sprintf("%.1f×", ratio), "p99 ≤ 3×", verdict(ratio <= 3)})
	} else {
		rows = append(rows, row{"B4", "sessionStatus, 200 events", noData, "", "", "p99 ≤ 3×", noData})
	}
	if db != "sqlite" {
		return rows
	}
	// B7
	for _, mode := range []string{"none", "all"} {
		raw, okR := r.med("Restart/impl=raw/db=sqlite/refreeze="+mode, "ns/op")
		svc, okS := r.med("Restart/impl=svc/db=sqlite/refreeze="+mode, "ns/op")
		what := "restart, 100k cursors, 10k pending (frozen)"
		if mode == "all" {
			what = "restart, 100k cursors, 10k pending to re-freeze"
		}
		if !okR || !okS {
			rows = append(rows, row{"B7", what, noData, "", "", "≤ 3× + 100 ms, ≤ 1 s", noData})
			continue
		}
		limit := 3*raw/1e6 + 100
		add(row{"B7", what, fmt.Sprintf("select cursors: %s", ms(raw/1e6)), fmt.Sprintf("open+sweep: %s", ms(svc/1e6)),
			fmt.Sprintf("%.1f× (limit %s)", svc/raw, ms(limit)), "≤ 3× + 100 ms, ≤ 1 s", verdict(svc/1e6 <= limit && svc/1e6 <= 1000)})
	}
	// L1
	for _, p := range []struct{ id, name, what string }{
		{"L1a", "a", "notice latency, own targets, 500 appends/s"},
		{"L1b", "b_small", "notice latency, broadcast to %d"},
		{"L1b", "b_big", "notice latency, broadcast to %d"},
	} {
		what := p.what
		if strings.Contains(what, "%d") {
			subs := 0
			if r.svc != nil {
				subs = r.svc.Subs
				if p.name == "b_small" {
					subs = r.svc.Small
				}
			}
			what = fmt.Sprintf(what, subs)
		}
		sp, bp := r.svc.Phase(p.name), r.base.Phase(p.name)
		if sp == nil || bp == nil {
			rows = append(rows, row{p.id, what, noData, "", "", "p99 ≤ 2×, 0 lost", noData})
			continue
		}
		// A frame can be read before the trigger's answer; a baseline p99 below the
		// scheduling resolution is floored so that the ratio stays meaningful.
		ratio := sp.FromCommit.P99 / max(bp.FromCommit.P99, latencyFloorMS)
		ok := ratio <= 2 && sp.Lost == 0 && sp.Dupes == 0 && sp.Expected > 0
		add(row{p.id, what, fmt.Sprintf("gorilla p99 %s", ms(bp.FromCommit.P99)),
			fmt.Sprintf("p99 %s, lost %d/%d, dupes %d", ms(sp.FromCommit.P99), sp.Lost, sp.Expected, sp.Dupes),
			fmt.Sprintf("%.1f×", ratio), "p99 ≤ 2×, 0 lost", verdict(ok)})
	}
	// L2
	if r.svc != nil && r.base != nil && r.base.PerSubKB > 0 {
		ratio := r.svc.PerSubKB / r.base.PerSubKB
		add(row{"L2", fmt.Sprintf("idle memory per subscriber (%d)", r.svc.Subs), fmt.Sprintf("gorilla %.1f KiB", r.base.PerSubKB),
			fmt.Sprintf("%.1f KiB", r.svc.PerSubKB), fmt.Sprintf("%.1f×", ratio), "≤ 3× and ≤ 32 KiB",
			verdict(ratio <= 3 && r.svc.PerSubKB <= 32)})
	} else {
		rows = append(rows, row{"L2", "idle memory per subscriber", noData, "", "", "≤ 3× and ≤ 32 KiB", noData})
	}
	// L3
	if r.svc != nil && r.svc.L3 != nil && ok5 {
		l3 := r.svc.L3
		ratio := l3.P99 / (rawP99 / 1e6)
		add(row{"L3", "sessionStatus over HTTP, 200/s, during L1(a)", fmt.Sprintf("B4 raw p99 %s", ms(rawP99/1e6)),
			fmt.Sprintf("p99 %s (p50 %s), %d requests, %d errors", ms(l3.P99), ms(l3.P50), l3.N, l3.Errors),
			fmt.Sprintf("%.1f×", ratio), "p99 ≤ 4×, 0 errors", verdict(ratio <= 4 && l3.Errors == 0)})
	} else {
		rows = append(rows, row{"L3", "sessionStatus over HTTP during L1(a)", noData, "", "", "p99 ≤ 4×, 0 errors", noData})
	}
	return rows
}

// ---------------------------------------------------------------------------------------
// Rendering

func (r *report) render(facts, stat, runInfo string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmark results\n\n")
	w("Written by `bench/run.sh` (bench/cmd/benchreport) from one run. Every goal is a ratio against a baseline measured in the same run; absolute numbers drift with the machine's load, ratios hold better. ")
	w("Go benchmarks are the median of `-count` interleaved runs (raw and svc alternate). WebSocket latencies are measured in the load generator's process, on one clock, to the frame read from the first sign of the commit the generator sees: the trigger's HTTP answer (append committed and acknowledged) or the first frame the trigger caused, whichever came first (a server busy fanning out answers late). They are also given from the answer alone and from the request's sending (which includes the commit).\n\n")
	if runInfo != "" {
		w("Run: %s\n\n", runInfo)
	}
	w("## Machine\n\n```\n%s```\n\n", facts)

	sqliteRows := r.goals("sqlite")
	w("## Goals (SQLite, the default store)\n\n")
	r.table(&b, sqliteRows)
	w("\nB3 is met at 16 writers (its first reading) or, when the raw floor says 16 appends per transaction cannot reach 5× B1, at the writer count where the sweep reaches it (its second); the floor is a least-squares fit of the raw appender's time per append at k = 1, 16, 32, 64 and 100 appends per transaction, as (per append) + (per transaction) / k (BenchmarkAppendOne/impl=raw and BenchmarkAppendConcurrent/impl=raw-txN, impl=raw).\n")
	if r.svc != nil || r.gqlgen != nil {
		w("\n## Goals on the notice path, against the peers (SQLite, one run)\n\n")
		r.table(&b, r.peerGoals())
		w("\nP3's goal divides by stock gqlgen, which writes nothing to disk; the rows under it state the floor a durable service cannot go below in this run: the raw durable append (BenchmarkAppendOne/impl=raw, in-process, one writer) added to gqlgen's p99, and the peer that performs that append in each trigger. P4's limit is gqlgen's CPU per own notice plus the raw append's CPU per append (getrusage of the benchmark process, the database's work included). P6's baseline is phase b_none: after every client has gone, the same broadcast triggers on the same targets, the cursors acknowledged back to synced over the API, so that each trigger opens the same notices as in b_big (the counts, and the Append transaction's time from the service's /metrics, are in the row).\n")
	}
	if _, ok := r.med("AppendOne/impl=raw/db=postgres", "appends/s"); ok {
		w("\n## PostgreSQL (same benchmarks, same goals, informational)\n\n")
		r.table(&b, r.goals("postgres"))
	} else {
		w("\nPostgreSQL: not run (TEST_DATABASE_URL unset).\n")
	}
	r.pgNotice(&b)

	r.peers(&b)

	w("\n## Go benchmarks (medians)\n\n")
	w("| benchmark | runs | ns/op | appends/s | ops/tx | p50 | p99 | CPU/op |\n|---|---|---|---|---|---|---|---|\n")
	for _, name := range r.order {
		cell := func(unit string, f func(float64) string) string {
			if v, ok := r.med(name, unit); ok {
				return f(v)
			}
			return ""
		}
		w("| %s | %d | %s | %s | %s | %s | %s | %s |\n", name, r.runs(name, "ns/op"),
			cell("ns/op", func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			cell("appends/s", func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			cell("ops/tx", func(v float64) string { return fmt.Sprintf("%.1f", v) }),
			cell("p50-ns", func(v float64) string { return ms(v / 1e6) }),
			cell("p99-ns", func(v float64) string { return ms(v / 1e6) }),
			cell("cpu-ns/op", func(v float64) string { return fmt.Sprintf("%.0f µs", v/1e3) }))
	}

	w("\n## WebSocket runs (L1, L2, L3)\n\n")
	if r.svc == nil || r.base == nil {
		w("Not run or failed (no wsload result).\n")
	} else {
		w("Service: the real binary (`serve --addr --db`), `staleNotices(watcher:)` over graphql-transport-ws; baseline: `bench/cmd/wsbaseline`, bare gorilla, one goroutine (the read loop) per connection, synchronous writes under a per-connection mutex, a broadcast marshals its frame once and writes it to each subscriber in turn; frames padded to the service's mean frame size (%.0f bytes). Load generator: `bench/cmd/wsload`, one process, %d gorilla clients.\n\n", r.svc.FrameBytes, r.svc.Subs)
		w("| phase | impl | frames | lost | dupes | p50 | p90 | p99 | max | p99 from answer | p99 from send | trigger p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, ph := range []string{"b_small", "b_big", "a", "a_l3", "b_none"} {
			for _, x := range []struct {
				name string
				w    *wsresult.Result
			}{{"service", r.svc}, {"gorilla", r.base}} {
				p := x.w.Phase(ph)
				if p == nil {
					continue
				}
				if ph == "b_none" {
					w("| %s | %s | no subscriber | | | | | | | | | %s / %s |\n", ph, x.name, ms(p.TriggerMS.P50), ms(p.TriggerMS.P99))
					continue
				}
				w("| %s | %s | %d/%d | %d | %d | %s | %s | %s | %s | %s | %s | %s / %s |\n", ph, x.name, p.Received, p.Expected, p.Lost, p.Dupes,
					ms(p.FromCommit.P50), ms(p.FromCommit.P90), ms(p.FromCommit.P99), ms(p.FromCommit.Max), ms(p.FromResp.P99), ms(p.FromSend.P99),
					ms(p.TriggerMS.P50), ms(p.TriggerMS.P99))
			}
		}
		w("\nPhases: b_small = broadcast to %d subscribers (only they are connected), b_big = broadcast to all %d, a = 500 appends/s each on one subscriber's own target, a_l3 = the same with L3's queries alongside, b_none = b_big's triggers again on the same targets once every client has disconnected (no frames; the service's cursors acknowledged back to synced first). The first round of b_* is a warm-up and not counted.\n\n", r.svc.Small, r.svc.Subs)
		w("| memory (VmRSS) | before clients | %d clients | %d clients | per subscriber |\n|---|---|---|---|---|\n", r.svc.Small, r.svc.Subs)
		for _, x := range []*wsresult.Result{r.svc, r.base} {
			w("| %s | %d KiB | %d KiB | %d KiB | %.1f KiB |\n", x.Mode, x.RSS0KB, x.RSSSmallKB, x.RSS1KB, x.PerSubKB)
		}
		w("\nService setup through the API: %d appends in %.1f s. Restart of the set-up service (%d cursors), process start → /readyz: %s. Clients ended early: service %d, baseline %d.\n",
			r.svc.SetupAppends, r.svc.SetupSeconds, r.svc.CursorsAtRestart, ms(r.svc.RestartReadyMS), r.svc.ClientsEnded, r.base.ClientsEnded)
		for _, x := range []*wsresult.Result{r.svc, r.base} {
			for _, e := range x.Errors {
				w("\n- %s error: %s", x.Mode, e)
			}
		}
		w("\n")
		if r.prof != nil {
			gs := func(x *wsresult.Result) string {
				if x == nil || x.Stats1 == nil || x.Stats0 == nil {
					return "n/a"
				}
				g := (x.Stats1["goroutines"] - x.Stats0["goroutines"]) / float64(x.Subs)
				st := (x.Stats1["stack_inuse"] - x.Stats0["stack_inuse"]) / float64(x.Subs) / 1024
				hp := (x.Stats1["heap_inuse"] - x.Stats0["heap_inuse"]) / float64(x.Subs) / 1024
				return fmt.Sprintf("%.1f goroutines, %.1f KiB stack, %.1f KiB heap per subscriber", g, st, hp)
			}
			w("\nRuntime counters at %d idle subscribers (profiling pass on `bench/cmd/profserve`, the same handler with pprof): service %s; gorilla baseline %s.\n", r.prof.Subs, gs(r.prof), gs(r.base))
		}
	}

	if len(r.missed) > 0 && r.profDir != "" {
		w("\n## Where the time goes (goals missed)\n\n")
		seen := map[string]bool{}
		for _, id := range r.missed {
			base := strings.SplitN(id, "/", 2)[0]
			db := strings.SplitN(id, "/", 2)[1]
			for _, f := range profileFiles(base, db) {
				path := filepath.Join(r.profDir, f)
				if seen[path] {
					continue
				}
				seen[path] = true
				data, err := os.ReadFile(path)
				if err != nil {
					continue
				}
				w("### %s (%s): `%s`\n\n```\n%s```\n\n", base, db, f, trimLines(string(data), 44))
			}
		}
	}
	if strings.TrimSpace(stat) != "" {
		w("\n## benchstat\n\n```\n%s```\n", stat)
	}
	return b.String()
}

// profileFiles names the pprof summaries that explain a goal.
func profileFiles(id, db string) []string {
	switch id {
	case "B1":
		return []string{"top-B1-" + db + ".txt"}
	case "B3":
		return []string{"top-B3-" + db + ".txt"}
	case "B4":
		return []string{"top-B4-" + db + ".txt"}
	case "L3":
		return []string{"top-L-a_l3.txt", "top-B4-" + db + ".txt"}
	case "B7":
		return []string{"top-B7-sqlite.txt"}
	case "L1a":
		return []string{"top-L-a.txt", "top-L-a_l3.txt"}
	case "L1b":
		return []string{"top-L-b_big.txt", "top-L-b_small.txt"}
	case "L2", "P1":
		return []string{"top-L-heap-idle.txt"}
	case "P3", "P4":
		return []string{"top-L-a.txt"}
	case "P5", "P6":
		return []string{"top-L-b_big.txt"}
	case "B3 sweep":
		return []string{"top-B3-sqlite.txt"}
	}
	return nil
}

func trimLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…\n")
	}
	return strings.Join(lines, "")
}

func (r *report) table(b *strings.Builder, rows []row) {
	fmt.Fprintf(b, "| id | what | baseline (same run) | measured | ratio | goal | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, rw := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", rw.id, rw.what, rw.baseline, rw.measured, rw.ratio, rw.goal, rw.verdict)
	}
}

// ---------------------------------------------------------------------------------------
// Peers: the service beside stock gqlgen, Node graphql-ws and gorilla, the
// same load, one run.

// peers writes the P1–P6 table: ratio = service ÷ peer (above 1 is worse).
func (r *report) peers(b *strings.Builder) {
	if r.gqlgen == nil && r.node == nil {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	type col struct {
		name string
		res  *wsresult.Result
	}
	cols := []col{{"service", r.svc}, {"stock gqlgen", r.gqlgen}}
	if r.gqlgenDurable != nil {
		cols = append(cols, col{"gqlgen + durable append", r.gqlgenDurable})
	}
	cols = append(cols, col{"graphql-ws (Node)", r.node}, col{"gorilla (bound)", r.base})
	type measure struct {
		what string
		get  func(*wsresult.Result) (float64, bool)
		unit string
		// own: the value is a ratio within each server; no ÷ peer columns.
		own bool
	}
	lat := func(phase string, pick func(*wsresult.Phase) float64) func(*wsresult.Result) (float64, bool) {
		return func(x *wsresult.Result) (float64, bool) {
			p := x.Phase(phase)
			if p == nil || p.Received == 0 {
				return 0, false
			}
			return pick(p), true
		}
	}
	// trig is a phase's trigger answer p50 (b_none receives no frames).
	trig := func(phase string) func(*wsresult.Result) (float64, bool) {
		return func(x *wsresult.Result) (float64, bool) {
			p := x.Phase(phase)
			if p == nil || p.TriggerMS.N == 0 {
				return 0, false
			}
			return p.TriggerMS.P50, true
		}
	}
	ms := []measure{
		{"P1 idle memory per subscriber (KiB)", func(x *wsresult.Result) (float64, bool) {
			if x == nil || x.PerSubKB == 0 {
				return 0, false
			}
			return x.PerSubKB, true
		}, "KiB", false},
		{"P3 own notice p50, from the trigger's send (ms)", lat("a", func(p *wsresult.Phase) float64 { return p.FromSend.P50 }), "ms", false},
		{"P3 own notice p99, from the trigger's send (ms)", lat("a", func(p *wsresult.Phase) float64 { return p.FromSend.P99 }), "ms", false},
		{"P4 server CPU per own notice (µs)", lat("a", func(p *wsresult.Phase) float64 { return p.CPUPerFrameUS }), "µs", false},
		{"P5 broadcast p50, from the trigger's send (ms)", lat("b_big", func(p *wsresult.Phase) float64 { return p.FromSend.P50 }), "ms", false},
		{"P5 broadcast p99, from the trigger's send (ms)", lat("b_big", func(p *wsresult.Phase) float64 { return p.FromSend.P99 }), "ms", false},
		{"P6 the trigger's answer during the broadcast (b_big), p50 (ms)", lat("b_big", func(p *wsresult.Phase) float64 { return p.TriggerMS.P50 }), "ms", false},
		{"P6 the trigger's answer with no subscriber connected (b_none), p50 (ms)", trig("b_none"), "ms", false},
		{"P6 answer during the broadcast ÷ answer with no subscriber", func(x *wsresult.Result) (float64, bool) {
			d, ok1 := trig("b_big")(x)
			n, ok2 := trig("b_none")(x)
			if !ok1 || !ok2 || n <= 0 {
				return 0, false
			}
			return d / max(n, latencyFloorMS), true
		}, "×", true},
		{"the trigger's answer in L1(a) (one subscriber), p50 (ms)", lat("a", func(p *wsresult.Phase) float64 { return p.TriggerMS.P50 }), "ms", false},
	}
	subs := 0
	if r.svc != nil {
		subs = r.svc.Subs
	}
	w("\n## Peers: the service beside stock gqlgen, Node graphql-ws and gorilla\n\n")
	w("The same load generator (bench/cmd/wsload), %d subscribers, the same `staleNotices` subscription; the peers are in memory (bench/cmd/wsgqlgen, bench/node/server.mjs) and answer a trigger before publishing, except \"gqlgen + durable append\" (bench/cmd/wsgqlgen -durable), which first performs the raw durable append of BenchmarkAppendOne/impl=raw (SQLite WAL, synchronous=FULL, head upsert + event insert, one transaction per trigger). No server sends keep-alives: the peers send none on graphql-transport-ws, and the service runs with `--ws-ping-interval 1h` (%s). Ratio = service ÷ peer (above 1 is worse).\n\n", subs, pingsNote(r.svc, r.svcPings))
	w("| measure |")
	for _, c := range cols {
		w(" %s |", c.name)
	}
	for _, c := range cols[1:] {
		w(" ÷ %s |", c.name)
	}
	w("\n|---|")
	for range cols {
		w("---|")
	}
	for range cols[1:] {
		w("---|")
	}
	w("\n")
	for _, m := range ms {
		w("| %s |", m.what)
		vals := make([]float64, len(cols))
		oks := make([]bool, len(cols))
		for i, c := range cols {
			vals[i], oks[i] = m.get(c.res)
			if oks[i] {
				w(" %.2f |", vals[i])
			} else {
				w(" %s |", noData)
			}
		}
		for i := 1; i < len(cols); i++ {
			if !m.own && oks[0] && oks[i] && vals[i] > 0 {
				w(" %.2f× |", vals[0]/vals[i])
			} else {
				w(" — |")
			}
		}
		w("\n")
	}
	w("\nLost / duplicate frames per server and phase:")
	for _, c := range cols {
		if c.res == nil {
			continue
		}
		lost, dup := 0, 0
		for _, p := range c.res.Phases {
			lost += p.Lost
			dup += p.Dupes
		}
		w(" %s %d / %d;", c.name, lost, dup)
	}
	w("\n\nGoals (verdicts in the table above this one): P1 ≤ 0.9× Node and ≤ 1.2× gorilla; P3 p99 ≤ 1.5× gqlgen; P4 ≤ gqlgen's + the raw durable append's CPU; P5 ≤ gqlgen's; P6 the answer during the broadcast ≤ 1.5× the same server's answer with no subscriber connected (b_none; the answer in L1(a), a different append to a target with one watcher, is additional information). P2 is `BenchmarkNotifyWide` below (≤ 30 ms).\n")
}
