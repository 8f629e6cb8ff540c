package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/awareness/awareness/bench/internal/wsresult"
)

// The goals against the peers (P1–P6) and B3's writer sweep, each stated as its goal
// defines it, with the floors that explain a gap. The functions take measured numbers
// and return rows, so that main_test.go checks the arithmetic and the verdicts with
// fixed inputs.

// rawAppend is the raw durable append of the same run (BenchmarkAppendOne/impl=raw):
// the floor a durable service cannot go below, absent from the in-memory peers.
type rawAppend struct {
	p50MS, p99MS float64 // latency per append
	cpuUS        float64 // the process's CPU per append
	ok, cpuOK    bool
}

func (r *report) rawAppend(db string) rawAppend {
	name := "AppendOne/impl=raw/db=" + db
	p50, ok1 := r.med(name, "p50-ns")
	p99, ok2 := r.med(name, "p99-ns")
	cpu, ok3 := r.med(name, "cpu-ns/op")
	return rawAppend{p50MS: p50 / 1e6, p99MS: p99 / 1e6, cpuUS: cpu / 1e3, ok: ok1 && ok2, cpuOK: ok3}
}

// p1Row: idle memory per subscriber ≤ 0.9× the Node peer's and ≤ 1.2× gorilla's.
func p1Row(svc, node, gorilla float64) row {
	const goal = "≤ 0.9× Node and ≤ 1.2× gorilla"
	if svc <= 0 || node <= 0 || gorilla <= 0 {
		return row{"P1", "idle memory per subscriber", noData, "", "", goal, noData}
	}
	a, b := svc/node, svc/gorilla
	return row{"P1", "idle memory per subscriber", fmt.Sprintf("Node %.1f KiB, gorilla %.1f KiB", node, gorilla),
		fmt.Sprintf("%.1f KiB", svc), fmt.Sprintf("%.2f× Node, %.2f× gorilla", a, b), goal, verdict(a <= 0.9 && b <= 1.2)}
}

// p2Row: a notifying append to a target with 10k watchers commits in ≤ 30 ms; the WAL
// written per notice is stated.
func p2Row(commitMS, walPerNotice float64, ok bool) row {
	const goal = "≤ 30 ms, WAL per notice stated"
	if !ok {
		return row{"P2", "notifying append to 10k watchers, commit", noData, "", "", goal, noData}
	}
	wal := "WAL per notice not measured"
	if walPerNotice > 0 {
		wal = fmt.Sprintf("WAL %.0f B per notice", walPerNotice)
	}
	return row{"P2", "notifying append to 10k watchers, commit", "30 ms (absolute)",
		fmt.Sprintf("%s; %s", ms(commitMS), wal), fmt.Sprintf("%.2f× the limit", commitMS/30), goal, verdict(commitMS <= 30)}
}

// p3Rows: the own notice's p99 from the trigger's send ≤ 1.5× stock gqlgen's (the goal),
// and beside it the floor: the raw durable append's latency, and the service's p99 ÷
// (gqlgen's p99 + the raw append's p99); with the "gqlgen + durable append" peer, the
// service ÷ that peer (informational).
func p3Rows(svc, gq, gqDurable *wsresult.Phase, raw rawAppend) []row {
	const goal = "p99 ≤ 1.5× gqlgen"
	what := "own notice p99 from the trigger's send, 500/s"
	if svc == nil || gq == nil || svc.Received == 0 || gq.Received == 0 {
		return []row{{"P3", what, noData, "", "", goal, noData}}
	}
	ratio := svc.FromSend.P99 / max(gq.FromSend.P99, latencyFloorMS)
	rows := []row{{"P3", what, fmt.Sprintf("stock gqlgen p99 %s (p50 %s)", ms(gq.FromSend.P99), ms(gq.FromSend.P50)),
		fmt.Sprintf("p99 %s (p50 %s)", ms(svc.FromSend.P99), ms(svc.FromSend.P50)), fmt.Sprintf("%.2f×", ratio), goal, verdict(ratio <= 1.5)}}
	if raw.ok {
		floor := gq.FromSend.P99 + raw.p99MS
		rows = append(rows, row{"P3 floor", "the same, beside gqlgen's p99 + the raw durable append's p99",
			fmt.Sprintf("%s + raw append p99 %s (p50 %s) = %s", ms(gq.FromSend.P99), ms(raw.p99MS), ms(raw.p50MS), ms(floor)),
			fmt.Sprintf("p99 %s", ms(svc.FromSend.P99)), fmt.Sprintf("%.2f×", svc.FromSend.P99/max(floor, latencyFloorMS)),
			"informational", "—"})
	}
	if gqDurable != nil && gqDurable.Received > 0 {
		rows = append(rows, row{"P3 durable", "the same, beside stock gqlgen + the raw durable append",
			fmt.Sprintf("p99 %s (p50 %s)", ms(gqDurable.FromSend.P99), ms(gqDurable.FromSend.P50)),
			fmt.Sprintf("p99 %s", ms(svc.FromSend.P99)), fmt.Sprintf("%.2f×", svc.FromSend.P99/max(gqDurable.FromSend.P99, latencyFloorMS)),
			"informational", "—"})
	}
	return rows
}

// p4Row: the server's CPU per own notice ≤ stock gqlgen's + the raw durable append's
// CPU per append, both measured in the same run.
func p4Row(svcUS, gqUS float64, raw rawAppend, haveWS bool) row {
	const goal = "≤ gqlgen's + the raw append's"
	what := "server CPU per own notice (trigger + frame)"
	if !haveWS || !raw.cpuOK || svcUS <= 0 || gqUS <= 0 {
		return row{"P4", what, noData, "", "", goal, noData}
	}
	limit := gqUS + raw.cpuUS
	return row{"P4", what, fmt.Sprintf("gqlgen %.0f µs + raw append %.0f µs = %.0f µs", gqUS, raw.cpuUS, limit),
		fmt.Sprintf("%.0f µs", svcUS), fmt.Sprintf("%.2f×", svcUS/limit), goal, verdict(svcUS <= limit)}
}

// pingsRow sets the own notice of the service as run (no pings, like the peers) beside
// the same phase with its default pings: what dead-peer detection costs.
func pingsRow(svc, pings *wsresult.Phase) (row, bool) {
	if svc == nil || pings == nil || svc.Received == 0 || pings.Received == 0 {
		return row{}, false
	}
	return row{"P4 pings", "the same with the service's default pings (every 20 s, a pong read per ping)",
		fmt.Sprintf("no pings: %.0f µs, p99 %s", svc.CPUPerFrameUS, ms(svc.FromSend.P99)),
		fmt.Sprintf("%.0f µs, p99 %s", pings.CPUPerFrameUS, ms(pings.FromSend.P99)),
		fmt.Sprintf("%.2f×", pings.CPUPerFrameUS/svc.CPUPerFrameUS), "informational", "—"}, true
}

// p5Row: the broadcast to 10k, p50 and p99 from the trigger's send, ≤ stock gqlgen's.
func p5Row(svc, gq *wsresult.Phase) row {
	const goal = "p50 and p99 ≤ gqlgen's"
	what := "broadcast to all, from the trigger's send"
	if svc == nil || gq == nil || svc.Received == 0 || gq.Received == 0 {
		return row{"P5", what, noData, "", "", goal, noData}
	}
	a, b := svc.FromSend.P50/gq.FromSend.P50, svc.FromSend.P99/gq.FromSend.P99
	return row{"P5", what, fmt.Sprintf("gqlgen p50 %s, p99 %s", ms(gq.FromSend.P50), ms(gq.FromSend.P99)),
		fmt.Sprintf("p50 %s, p99 %s", ms(svc.FromSend.P50), ms(svc.FromSend.P99)), fmt.Sprintf("%.2f× / %.2f×", a, b),
		goal, verdict(a <= 1 && b <= 1)}
}

// p6Row: the trigger's answer during the broadcast to all (b_big), p50, ≤ 1.5× its
// answer with no subscriber connected (b_none: the same triggers on the same targets,
// the cursors acknowledged back to synced). The ratio compares like with like only if
// every counted trigger of both phases opened one notice per watcher (Opened =
// watchers × counted rounds) and b_none began with no subscription; otherwise the
// verdict is "no data" and the row says why. The Append transaction's time (the
// service's /metrics) is stated for both phases.
func p6Row(during, none *wsresult.Phase, watchers int) row {
	const goal = "p50 ≤ 1.5× with no subscriber"
	what := fmt.Sprintf("the trigger's answer during the broadcast to %d, p50", watchers)
	if during == nil || none == nil || during.TriggerMS.N == 0 || none.TriggerMS.N == 0 {
		return row{"P6", what, noData + " (no b_none phase)", "", "", goal, noData}
	}
	var wrong []string
	if want := watchers * during.TriggerMS.N; during.Opened != want {
		wrong = append(wrong, fmt.Sprintf("b_big opened %d notices, want %d", during.Opened, want))
	}
	if want := watchers * none.TriggerMS.N; none.Opened != want {
		wrong = append(wrong, fmt.Sprintf("b_none opened %d notices, want %d", none.Opened, want))
	}
	if none.SubscribersLeft != 0 {
		wrong = append(wrong, fmt.Sprintf("b_none began with %d subscriptions", none.SubscribersLeft))
	}
	if none.Mismatch != 0 {
		wrong = append(wrong, fmt.Sprintf("b_none: %d mismatches (a trigger or an acknowledgement did other work)", none.Mismatch))
	}
	tx := func(p *wsresult.Phase) string {
		if p.StoreAppendMS.N == 0 {
			return ""
		}
		return fmt.Sprintf("; Append transaction p50 %s", ms(p.StoreAppendMS.P50))
	}
	base := fmt.Sprintf("no subscriber: p50 %s (%d triggers, %d notices opened%s)", ms(none.TriggerMS.P50), none.TriggerMS.N, none.Opened, tx(none))
	meas := fmt.Sprintf("p50 %s (%d triggers, %d notices opened%s)", ms(during.TriggerMS.P50), during.TriggerMS.N, during.Opened, tx(during))
	if len(wrong) > 0 {
		return row{"P6", what, base, meas, "—", goal, noData + ": " + strings.Join(wrong, "; ")}
	}
	ratio := during.TriggerMS.P50 / max(none.TriggerMS.P50, latencyFloorMS)
	return row{"P6", what, base, meas, fmt.Sprintf("%.2f×", ratio), goal, verdict(ratio <= 1.5)}
}

// named is one server's wsload result under its column name.
type named struct {
	name string
	res  *wsresult.Result
}

// lostRow: 0 lost and 0 duplicate frames in every phase of every server (those
// without a result are left out).
func lostRow(servers []named) row {
	const goal = "0 / 0 in every phase"
	var parts []string
	ok := true
	for _, x := range servers {
		if x.res == nil {
			continue
		}
		lost, dup := 0, 0
		for _, p := range x.res.Phases {
			lost += p.Lost
			dup += p.Dupes
		}
		ok = ok && lost == 0 && dup == 0
		parts = append(parts, fmt.Sprintf("%s %d / %d", x.name, lost, dup))
	}
	if len(parts) == 0 {
		return row{"—", "lost / duplicate frames", noData, "", "", goal, noData}
	}
	return row{"—", "lost / duplicate frames", "", strings.Join(parts, "; "), "", goal, verdict(ok)}
}

// ---------------------------------------------------------------------------------------
// B3's writer sweep

// b3Sweep is what BenchmarkAppendConcurrent's sweep says about "16 concurrent writers ≥
// 5× B1 (or, with the measured per-op floor, the writer count where it is reached)".
type b3Sweep struct {
	target float64 // 5× B1, appends/s
	// svc is the service's rate and mean batch by writer count (16, 32, 64).
	svc []sweepPoint
	// perOpUS and perTxUS: the raw floor, a least-squares fit of the raw appender's time
	// per append at k appends per transaction (k = 1, 16, 32, 64, 100) as
	// perOpUS + perTxUS / k. perOpUS bounds any batch to 1e6/perOpUS appends/s.
	perOpUS, perTxUS float64
	fitOK            bool
	// rawNeeds is the smallest batch at which the raw floor reaches target (0: none can,
	// the target being above 1e6/perOpUS).
	rawNeeds int
	// reachedAt is the smallest swept writer count whose rate reaches target (0: none).
	reachedAt int
}

type sweepPoint struct {
	n          int     // writers (svc) or appends per transaction (raw)
	rate, opTx float64 // appends/s and mean ops per transaction
}

// sweepB3 computes the sweep from B1's rate, the service's points and the raw points.
func sweepB3(b1 float64, svc, raw []sweepPoint) b3Sweep {
	s := b3Sweep{target: 5 * b1, svc: svc}
	// y = µs per append against x = 1/k: intercept perOpUS, slope perTxUS (each point
	// weighs the same in the unit the floor is stated in).
	var n, sx, sy, sxx, sxy float64
	for _, p := range raw {
		if p.rate <= 0 || p.n <= 0 {
			continue
		}
		x, y := 1/float64(p.n), 1e6/p.rate
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	if d := n*sxx - sx*sx; n >= 2 && d > 0 {
		s.perTxUS = (n*sxy - sx*sy) / d
		s.perOpUS = (sy - s.perTxUS*sx) / n
		s.fitOK = s.perOpUS > 0
	}
	if s.fitOK && b1 > 0 {
		budget := 1e6 / s.target // µs per append at the target
		if budget > s.perOpUS {
			s.rawNeeds = max(1, int(math.Ceil(max(s.perTxUS, 0)/(budget-s.perOpUS))))
		}
	}
	for _, p := range svc {
		if b1 > 0 && p.rate >= s.target && (s.reachedAt == 0 || p.n < s.reachedAt) {
			s.reachedAt = p.n
		}
	}
	return s
}

// row is the sweep's goal row: met when some swept writer count reaches 5× B1 (the
// second reading of B3; the first, 16 writers, is the B3 row itself).
func (s b3Sweep) row() row {
	const goal = "≥ 5× B1 at 16 writers, or the writer count where it is reached"
	what := "append, writer sweep: where 5× B1 is reached"
	if len(s.svc) == 0 || s.target <= 0 {
		return row{"B3 sweep", what, noData, "", "", goal, noData}
	}
	floor := "raw per-op floor: not measured"
	if s.fitOK {
		floor = fmt.Sprintf("raw floor %.1f µs per append + %.0f µs per transaction (bound %.0f/s)", s.perOpUS, s.perTxUS, 1e6/s.perOpUS)
		if s.rawNeeds > 0 {
			floor += fmt.Sprintf("; raw reaches 5× B1 (%.0f/s) from %d appends per transaction", s.target, s.rawNeeds)
		} else {
			floor += fmt.Sprintf("; 5× B1 (%.0f/s) is above it: no batch reaches it", s.target)
		}
	}
	var pts []string
	for _, p := range s.svc {
		pts = append(pts, fmt.Sprintf("%d writers %.0f/s (%.1f ops/tx, %.1f× B1)", p.n, p.rate, p.opTx, 5*p.rate/s.target))
	}
	ratio, v := "not reached", missed
	if s.reachedAt == 16 {
		ratio, v = "reached at 16 writers", met
	} else if s.reachedAt > 0 {
		ratio, v = fmt.Sprintf("reached at %d writers (not at 16)", s.reachedAt), met+fmt.Sprintf(" at %d writers", s.reachedAt)
	} else if n := len(s.svc); n > 0 {
		ratio = fmt.Sprintf("not reached at %d writers", s.svc[n-1].n)
	}
	return row{"B3 sweep", what, floor, strings.Join(pts, "; "), ratio, goal, v}
}

func (r *report) sweepB3(db string) b3Sweep {
	b1, _ := r.med("AppendOne/impl=svc/db="+db, "appends/s")
	point := func(name string, n int) (sweepPoint, bool) {
		rate, ok := r.med(name, "appends/s")
		opTx, _ := r.med(name, "ops/tx")
		return sweepPoint{n: n, rate: rate, opTx: opTx}, ok
	}
	var svc, raw []sweepPoint
	if p, ok := point("AppendConcurrent/impl=svc/db="+db, concurrentWriters); ok {
		svc = append(svc, p)
	}
	for _, w := range []int{32, 64} {
		if p, ok := point(fmt.Sprintf("AppendConcurrent/impl=svc-w%d/db=%s", w, db), w); ok {
			svc = append(svc, p)
		}
	}
	if p, ok := point("AppendOne/impl=raw/db="+db, 1); ok {
		raw = append(raw, p)
	}
	for _, k := range []int{16, 32, 64} {
		if p, ok := point(fmt.Sprintf("AppendConcurrent/impl=raw-tx%d/db=%s", k, db), k); ok {
			raw = append(raw, p)
		}
	}
	if p, ok := point("AppendConcurrent/impl=raw/db="+db, 100); ok {
		raw = append(raw, p)
	}
	return sweepB3(b1, svc, raw)
}

// concurrentWriters is B3's writer count (bench/store_bench_test.go).
const concurrentWriters = 16

// peerGoals are the rows of the goals against the peers, in the order.
func (r *report) peerGoals() []row {
	phase := func(x *wsresult.Result, name string) *wsresult.Phase { return x.Phase(name) }
	perSub := func(x *wsresult.Result) float64 {
		if x == nil {
			return 0
		}
		return x.PerSubKB
	}
	raw := r.rawAppend("sqlite")
	var rows []row
	rows = append(rows, p1Row(perSub(r.svc), perSub(r.node), perSub(r.base)))
	commit, okC := r.med("NotifyWide/state=open/db=sqlite", "ns/op")
	wal, _ := r.med("NotifyWide/state=open/db=sqlite", "wal-B/notice")
	rows = append(rows, p2Row(commit/1e6, wal, okC))
	rows = append(rows, p3Rows(phase(r.svc, "a"), phase(r.gqlgen, "a"), phase(r.gqlgenDurable, "a"), raw)...)
	svcA, gqA := phase(r.svc, "a"), phase(r.gqlgen, "a")
	var svcCPU, gqCPU float64
	if svcA != nil && gqA != nil {
		svcCPU, gqCPU = svcA.CPUPerFrameUS, gqA.CPUPerFrameUS
	}
	rows = append(rows, p4Row(svcCPU, gqCPU, raw, svcA != nil && gqA != nil))
	if rw, ok := pingsRow(svcA, phase(r.svcPings, "a")); ok {
		rows = append(rows, rw)
	}
	rows = append(rows, p5Row(phase(r.svc, "b_big"), phase(r.gqlgen, "b_big")))
	watchers := 0
	if r.svc != nil {
		watchers = r.svc.Subs
	}
	rows = append(rows, p6Row(phase(r.svc, "b_big"), phase(r.svc, "b_none"), watchers))
	rows = append(rows, lostRow([]named{{"service", r.svc}, {"stock gqlgen", r.gqlgen},
		{"gqlgen + durable append", r.gqlgenDurable}, {"graphql-ws (Node)", r.node}, {"gorilla (bound)", r.base}}))
	for _, rw := range rows {
		if strings.HasPrefix(rw.verdict, missed) {
			r.missed = append(r.missed, rw.id+"/sqlite")
		}
	}
	return rows
}
