package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awareness/awareness/bench/internal/wsresult"
)

// The goals' arithmetic and verdicts, with fixed inputs (no timing).

func lat(p50, p99 float64) wsresult.Latency {
	return wsresult.Latency{N: 100, P50: p50, P99: p99}
}

func TestP6RatioIsAgainstTheNoSubscriberPhase(t *testing.T) {
	during := func(p50 float64, opened int) *wsresult.Phase {
		return &wsresult.Phase{Received: 30000, TriggerMS: wsresult.Latency{N: 3, P50: p50}, Opened: opened,
			StoreAppendMS: wsresult.Latency{N: 3, P50: 12}}
	}
	none := func(p50 float64, opened, left, mismatch int) *wsresult.Phase {
		return &wsresult.Phase{TriggerMS: wsresult.Latency{N: 3, P50: p50}, Opened: opened, SubscribersLeft: left, Mismatch: mismatch,
			StoreAppendMS: wsresult.Latency{N: 3, P50: 11}}
	}
	for _, tc := range []struct {
		name          string
		during, none  *wsresult.Phase
		ratio, verdic string
	}{
		{"met at 1.5×", during(15, 30000), none(10, 30000, 0, 0), "1.50×", met},
		{"met below 1.5×", during(17.6, 30000), none(13, 30000, 0, 0), "1.35×", met},
		{"missed", during(40, 30000), none(13, 30000, 0, 0), "3.08×", missed},
		{"a trigger of b_none opened fewer notices: not comparable", during(15, 30000), none(10, 29999, 0, 0), "—",
			noData + ": b_none opened 29999 notices, want 30000"},
		{"b_big opened fewer", during(15, 20000), none(10, 30000, 0, 0), "—", noData + ": b_big opened 20000 notices, want 30000"},
		{"subscribers left", during(15, 30000), none(10, 30000, 4, 0), "—", noData + ": b_none began with 4 subscriptions"},
		{"follow-up notices at the acknowledgement", during(15, 30000), none(10, 30000, 0, 2), "—",
			noData + ": b_none: 2 mismatches (a trigger or an acknowledgement did other work)"},
		{"no b_none phase", during(15, 30000), nil, "", noData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p6Row(tc.during, tc.none, 10000)
			if got.ratio != tc.ratio || got.verdict != tc.verdic {
				t.Errorf("p6Row: ratio %q verdict %q, want %q %q (row %+v)", got.ratio, got.verdict, tc.ratio, tc.verdic, got)
			}
			if tc.none != nil && !strings.Contains(got.baseline, "Append transaction p50 11.0 ms") {
				t.Errorf("baseline %q does not state b_none's Append transaction", got.baseline)
			}
		})
	}
}

func TestP4LimitIsGqlgenPlusTheRawAppend(t *testing.T) {
	raw := rawAppend{cpuUS: 150, cpuOK: true}
	for _, tc := range []struct {
		name         string
		svc, gq      float64
		raw          rawAppend
		ratio, verdc string
	}{
		{"at the limit", 350, 200, raw, "1.00×", met},
		{"below", 300, 200, raw, "0.86×", met},
		{"above", 716, 212, raw, "1.98×", missed},
		{"no raw CPU", 300, 200, rawAppend{}, "", noData},
		{"no gqlgen", 300, 0, raw, "", noData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p4Row(tc.svc, tc.gq, tc.raw, true)
			if got.ratio != tc.ratio || got.verdict != tc.verdc {
				t.Errorf("p4Row: ratio %q verdict %q, want %q %q", got.ratio, got.verdict, tc.ratio, tc.verdc)
			}
		})
	}
	if got := p4Row(350, 200, raw, true).baseline; got != "gqlgen 200 µs + raw append 150 µs = 350 µs" {
		t.Errorf("baseline %q", got)
	}
}

func TestP3StatesTheFloorBesideTheGoal(t *testing.T) {
	svc := &wsresult.Phase{Received: 10000, FromSend: lat(0.8, 3.6)}
	gq := &wsresult.Phase{Received: 10000, FromSend: lat(0.3, 0.5)}
	dur := &wsresult.Phase{Received: 10000, FromSend: lat(0.6, 2.4)}
	raw := rawAppend{p50MS: 0.2, p99MS: 1.3, ok: true}
	rows := p3Rows(svc, gq, dur, raw)
	if len(rows) != 3 {
		t.Fatalf("p3Rows: %d rows, want 3 (goal, floor, durable peer): %+v", len(rows), rows)
	}
	want := []struct{ id, ratio, verdict string }{
		{"P3", "7.20×", missed},      // 3.6 / 0.5
		{"P3 floor", "2.00×", "—"},   // 3.6 / (0.5 + 1.3)
		{"P3 durable", "1.50×", "—"}, // 3.6 / 2.4
	}
	for i, w := range want {
		if rows[i].id != w.id || rows[i].ratio != w.ratio || rows[i].verdict != w.verdict {
			t.Errorf("row %d: %s %s %s, want %s %s %s", i, rows[i].id, rows[i].ratio, rows[i].verdict, w.id, w.ratio, w.verdict)
		}
	}
	if got := p3Rows(&wsresult.Phase{Received: 1, FromSend: lat(0.5, 0.7)}, gq, nil, rawAppend{}); len(got) != 1 || got[0].verdict != met {
		t.Errorf("p3Rows without the raw append or the durable peer: %+v, want the goal row alone, met (0.7 ≤ 1.5 × 0.5)", got)
	}
}

func TestP1P2P5Verdicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  row
		want string
	}{
		{"P1 met", p1Row(20, 25, 18), met},                  // 0.8× Node, 1.11× gorilla
		{"P1 missed on gorilla", p1Row(22, 30, 18), missed}, // 0.73×, 1.22×
		{"P1 missed on Node", p1Row(28.5, 29.54, 21.78), missed},
		{"P2 met", p2Row(13, 76, true), met},
		{"P2 missed", p2Row(31, 76, true), missed},
		{"P5 met", p5Row(&wsresult.Phase{Received: 1, FromSend: lat(77, 129)}, &wsresult.Phase{Received: 1, FromSend: lat(115, 248)}), met},
		{"P5 missed on p99", p5Row(&wsresult.Phase{Received: 1, FromSend: lat(77, 250)}, &wsresult.Phase{Received: 1, FromSend: lat(115, 248)}), missed},
	} {
		if tc.got.verdict != tc.want {
			t.Errorf("%s: verdict %q, want %q (%+v)", tc.name, tc.got.verdict, tc.want, tc.got)
		}
	}
}

// rawPoints are raw appender rates for a time per transaction of perTx + k × perOp µs.
func rawPoints(perTx, perOp float64, ks ...int) []sweepPoint {
	var out []sweepPoint
	for _, k := range ks {
		out = append(out, sweepPoint{n: k, rate: float64(k) * 1e6 / (perTx + float64(k)*perOp), opTx: float64(k)})
	}
	return out
}

func TestB3SweepFitsTheRawFloorAndFindsTheWriterCount(t *testing.T) {
	raw := rawPoints(200, 20, 1, 16, 32, 64, 100)
	svc := func(r16, r32, r64 float64) []sweepPoint {
		return []sweepPoint{{16, r16, 13}, {32, r32, 24}, {64, r64, 40}}
	}
	for _, tc := range []struct {
		name      string
		b1        float64
		svc       []sweepPoint
		reachedAt int
		verdict   string
		ratio     string
	}{
		{"met at 16", 4000, svc(21000, 30000, 33000), 16, met, "reached at 16 writers"},
		{"met at 32 only", 4600, svc(20575, 24000, 26000), 32, met + " at 32 writers", "reached at 32 writers (not at 16)"},
		{"met at 64 only", 4600, svc(20575, 22000, 23500), 64, met + " at 64 writers", "reached at 64 writers (not at 16)"},
		{"not reached", 4600, svc(15000, 16000, 17000), 0, missed, "not reached at 64 writers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sweepB3(tc.b1, tc.svc, raw)
			if !s.fitOK || math.Abs(s.perOpUS-20) > 1e-6 || math.Abs(s.perTxUS-200) > 1e-6 {
				t.Fatalf("fit: %.6f µs per op + %.6f µs per transaction (ok %v), want 20 + 200", s.perOpUS, s.perTxUS, s.fitOK)
			}
			if s.reachedAt != tc.reachedAt {
				t.Errorf("reachedAt %d, want %d", s.reachedAt, tc.reachedAt)
			}
			rw := s.row()
			if rw.verdict != tc.verdict || rw.ratio != tc.ratio {
				t.Errorf("row: ratio %q verdict %q, want %q %q", rw.ratio, rw.verdict, tc.ratio, tc.verdict)
			}
		})
	}
	// 5 × 4600 = 23000/s: 43.48 µs per append; raw needs 200 / (43.48 − 20) = 8.52 → 9.
	if s := sweepB3(4600, nil, raw); s.rawNeeds != 9 {
		t.Errorf("rawNeeds %d, want 9", s.rawNeeds)
	}
	// 5 × 12000 = 60000/s: 16.7 µs per append, under the 20 µs floor: no batch reaches it.
	s := sweepB3(12000, svc(1, 2, 3), raw)
	if s.rawNeeds != 0 || !strings.Contains(s.row().baseline, "no batch reaches it") {
		t.Errorf("rawNeeds %d, baseline %q: want 0 and the floor stated as out of reach", s.rawNeeds, s.row().baseline)
	}
	if got := (b3Sweep{}).row().verdict; got != noData {
		t.Errorf("empty sweep: verdict %q, want %q", got, noData)
	}
}

// TestReportReadsTheSweepAndRawMetrics runs the parsing end to end on go test -bench
// lines: the B3 sweep and the raw append's CPU and latency come from their
// benchmarks' names and units.
func TestReportReadsTheSweepAndRawMetrics(t *testing.T) {
	text := `BenchmarkAppendOne/impl=raw/db=sqlite-2  300  200000 ns/op  5000 appends/s  150000 cpu-ns/op  210000 p50-ns  1300000 p99-ns
BenchmarkAppendOne/impl=svc/db=sqlite-2  300  217000 ns/op  4600 appends/s  1.0 ops/tx
BenchmarkAppendConcurrent/impl=svc/db=sqlite-2  300  48000 ns/op  20575 appends/s  13.1 ops/tx
BenchmarkAppendConcurrent/impl=svc-w32/db=sqlite-2  300  40000 ns/op  24000 appends/s  24.0 ops/tx
BenchmarkAppendConcurrent/impl=svc-w64/db=sqlite-2  300  38000 ns/op  26000 appends/s  40.0 ops/tx
`
	path := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &report{bench: map[string]map[string][]float64{}}
	r.parseBench(path)
	raw := r.rawAppend("sqlite")
	if !raw.ok || !raw.cpuOK || raw.cpuUS != 150 || raw.p50MS != 0.21 || raw.p99MS != 1.3 {
		t.Errorf("rawAppend = %+v, want 150 µs CPU, p50 0.21 ms, p99 1.3 ms", raw)
	}
	s := r.sweepB3("sqlite")
	if len(s.svc) != 3 || s.reachedAt != 32 || s.target != 23000 {
		t.Errorf("sweep: %d points, reached at %d, target %.0f; want 3, 32, 23000", len(s.svc), s.reachedAt, s.target)
	}
}

func TestPostgreSQLNoticeSectionUsesThePostgreSQLRun(t *testing.T) {
	text := `BenchmarkNotifyWide/state=open/db=postgres-2  6  25000000 ns/op  540 wal-B/notice
BenchmarkAppendOne/impl=raw/db=postgres-2  300  900000 ns/op  1100 appends/s  200000 cpu-ns/op  800000 p50-ns  2000000 p99-ns
`
	path := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	phase := func(p50, p99 float64) *wsresult.Phase {
		return &wsresult.Phase{Received: 100, Expected: 100, FromSend: lat(p50, p99), FromCommit: lat(p50, p99)}
	}
	r := &report{bench: map[string]map[string][]float64{}}
	r.parseBench(path)
	var b strings.Builder
	r.pgNotice(&b)
	if !strings.Contains(b.String(), "25.0 ms") || !strings.Contains(b.String(), "did not run") {
		t.Errorf("without the WebSocket pass, want P2's 25.0 ms and the pass named as not run:\n%s", b.String())
	}
	r.gqlgen = &wsresult.Result{Phases: map[string]*wsresult.Phase{"a": phase(1, 2), "b_big": phase(10, 20)}}
	r.svc = &wsresult.Result{Phases: map[string]*wsresult.Phase{"a": phase(1, 2.5)}}
	r.svcPG = &wsresult.Result{Subs: 100, Phases: map[string]*wsresult.Phase{"a": phase(2, 4), "b_big": phase(15, 30)}}
	rows := r.pgNoticeGoals()
	got := map[string]row{}
	for _, rw := range rows {
		got[rw.id] = rw
	}
	if got["P2"].verdict != met || got["P3"].ratio != "2.00×" || got["P3"].verdict != missed ||
		got["P5"].ratio != "1.50× / 1.50×" || !strings.Contains(got["P3 floor"].baseline, "raw append p99 2.00 ms") {
		t.Errorf("rows = %+v", rows)
	}
	b.Reset()
	r.pgNotice(&b)
	if !strings.Contains(b.String(), "| a | SQLite |") || !strings.Contains(b.String(), "| a | PostgreSQL |") {
		t.Errorf("the phase table lacks a store:\n%s", b.String())
	}
}
