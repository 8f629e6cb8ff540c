package main

import (
	"fmt"
	"strings"

	"github.com/awareness/awareness/bench/internal/wsresult"
)

// The notice path on PostgreSQL: P2 from the Go benchmark, and the WebSocket phases of
// the service run on a fresh PostgreSQL database (wsload -pg, bench/run.sh), beside
// the same phases of the service on SQLite and of the peers in the same run.

// pgNoticeGoals are P2, P3 and P5 with the service on PostgreSQL; the peers are the
// same as in the SQLite rows, and P3's floor is PostgreSQL's raw durable append.
func (r *report) pgNoticeGoals() []row {
	phase := func(x *wsresult.Result, name string) *wsresult.Phase { return x.Phase(name) }
	commit, okC := r.med("NotifyWide/state=open/db=postgres", "ns/op")
	wal, _ := r.med("NotifyWide/state=open/db=postgres", "wal-B/notice")
	rows := []row{p2Row(commit/1e6, wal, okC)}
	rows = append(rows, p3Rows(phase(r.svcPG, "a"), phase(r.gqlgen, "a"), nil, r.rawAppend("postgres"))...)
	rows = append(rows, p5Row(phase(r.svcPG, "b_big"), phase(r.gqlgen, "b_big")))
	return rows
}

// pgNotice writes the section; it says so when the PostgreSQL pass did not run.
func (r *report) pgNotice(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	_, okP2 := r.med("NotifyWide/state=open/db=postgres", "ns/op")
	if r.svcPG == nil && !okP2 {
		w("\nThe notice path on PostgreSQL: not run (TEST_DATABASE_URL unset, or its WebSocket pass failed).\n")
		return
	}
	w("\n## The notice path on PostgreSQL (informational)\n\n")
	w("P2 is BenchmarkNotifyWide on PostgreSQL; P3 and P5 are the service's WebSocket run on a fresh PostgreSQL database (`wsload -pg`: phases b_small, b_big and a, fewer rounds than on SQLite), against the same peers as the SQLite rows.\n\n")
	r.table(b, r.pgNoticeGoals())
	if r.svcPG == nil {
		w("\nThe WebSocket pass on PostgreSQL did not run or failed.\n")
		return
	}
	w("\n| phase | store | frames | lost | dupes | p50 | p99 | max | p99 from send | trigger p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range []string{"b_small", "b_big", "a"} {
		for _, x := range []struct {
			name string
			w    *wsresult.Result
		}{{"SQLite", r.svc}, {"PostgreSQL", r.svcPG}} {
			p := x.w.Phase(ph)
			if p == nil {
				continue
			}
			w("| %s | %s | %d/%d | %d | %d | %s | %s | %s | %s | %s / %s |\n", ph, x.name, p.Received, p.Expected, p.Lost, p.Dupes,
				ms(p.FromCommit.P50), ms(p.FromCommit.P99), ms(p.FromCommit.Max), ms(p.FromSend.P99), ms(p.TriggerMS.P50), ms(p.TriggerMS.P99))
		}
	}
	w("\nPostgreSQL run: %d subscribers, setup %d appends in %.1f s, restart → /readyz %s, clients ended early %d.\n",
		r.svcPG.Subs, r.svcPG.SetupAppends, r.svcPG.SetupSeconds, ms(r.svcPG.RestartReadyMS), r.svcPG.ClientsEnded)
	for _, e := range r.svcPG.Errors {
		w("\n- PostgreSQL run error: %s", e)
	}
}
