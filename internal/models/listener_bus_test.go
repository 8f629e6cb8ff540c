package models

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/bus/natstest"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// With the bus, a process receives only the hints of its interest: B opens notices
// and records events while A has no subscriber, and A's bus receives no message and
// A sends no statement. Once A subscribes to a watcher, a notice for it arrives (one
// message, one read); a notice for another watcher sends A nothing; an event
// subscription to one session receives that session's spans only; a dashboard (every
// watcher) receives them all.
func TestListener_Bus_OnlyInterestArrives(t *testing.T) {
	r := newInterestRigOn(t, time.Hour, natstest.URL(t))
	other := "agent:main:subagent:other"
	stmts0, _ := r.count.snapshot()
	in0 := r.busQuiet()
	const hints = 20
	for i := range hints {
		r.record(fmt.Sprintf("agent:main:subagent:t%02d", i), lsWatcher, other)
	}
	if in := r.busQuiet(); in != in0 {
		t.Fatalf("A without subscribers received %d bus messages, want 0", in-in0)
	}
	if stmts, _ := r.count.snapshot(); stmts != stmts0 {
		t.Fatalf("A without subscribers sent %d statements, want 0", stmts-stmts0)
	}

	w := lsWatcher
	notes, _ := r.subscribeNotices(&w)
	for range hints {
		select {
		case <-notes:
		case <-time.After(lsWait):
			t.Fatal("pending notices did not arrive")
		}
	}
	in1 := r.busQuiet()
	reads1 := r.lis.Stats().Reads
	r.record("agent:main:subagent:u0", other)
	if in := r.busQuiet(); in != in1 {
		t.Fatalf("a notice of another watcher sent A %d messages, want 0", in-in1)
	}
	r.record("agent:main:subagent:u1", lsWatcher, other)
	select {
	case n := <-notes:
		if n.Target.Key != "agent:main:subagent:u1" || n.Watcher != lsWatcher {
			t.Fatalf("notice %+v", n)
		}
	case <-time.After(lsWait):
		t.Fatal("the cross-process notice did not arrive")
	}
	if in := r.busQuiet(); in != in1+1 {
		t.Fatalf("a notice of the subscribed watcher sent A %d messages, want 1", in-in1)
	}
	if reads := r.lis.Stats().Reads; reads != reads1+1 {
		t.Fatalf("a notice of the subscribed watcher cost %d reads, want 1", reads-reads1)
	}

	ectx, ecancel := context.WithCancel(context.Background())
	defer ecancel()
	key := "agent:main:subagent:events"
	evs, _, err := r.svcA.SubscribeEvents(ectx, &key, nil)
	if err != nil {
		t.Fatal(err)
	}
	in2 := r.busQuiet()
	r.record("agent:main:subagent:quiet")
	if in := r.busQuiet(); in != in2 {
		t.Fatalf("an event of another session sent A %d messages, want 0", in-in2)
	}
	r.record(key)
	select {
	case e := <-evs:
		if e.Session.Key != key || e.Sequence != 1 {
			t.Fatalf("event %+v", e)
		}
	case <-time.After(lsWait):
		t.Fatal("the cross-process event did not arrive")
	}

	dash, _ := r.subscribeNotices(nil)
	for range (hints + 1) + (hints + 2) { // the pending notices of lsWatcher and other, read by the dashboard itself
		<-dash
	}
	r.record("agent:main:subagent:u2", "agent:main:subagent:third")
	select {
	case n := <-dash:
		if n.Watcher != "agent:main:subagent:third" {
			t.Fatalf("dashboard notice %+v", n)
		}
	case <-time.After(lsWait):
		t.Fatal("the dashboard's notice did not arrive")
	}
}

// A process's own hints cost it nothing: a notice A opens for its own subscriber
// reaches it from A's service, and A's listener reads nothing for it (with NOTIFY it
// receives its own hint and skips it; on the bus it does not receive it at all).
func TestListener_OwnHintsReadNothing(t *testing.T) {
	for _, mode := range []string{"notify", "bus"} {
		t.Run(mode, func(t *testing.T) {
			url := ""
			if mode == "bus" {
				url = natstest.URL(t)
			}
			r := newInterestRigOn(t, time.Hour, url)
			w := lsWatcher
			notes, _ := r.subscribeNotices(&w)
			st0 := r.lis.Stats()
			var in0 uint64
			if r.busA != nil {
				in0 = r.busQuiet()
			}
			const n = 5
			for i := range n {
				target := fmt.Sprintf("agent:main:subagent:own%d", i)
				if _, err := r.svcA.RecordEvent(context.Background(), awareness.RecordInput{SessionKey: target,
					Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Watchers: []string{lsWatcher}}); err != nil {
					t.Fatal(err)
				}
				select {
				case got := <-notes:
					if got.Target.Key != target {
						t.Fatalf("notice %+v, want %s", got, target)
					}
				case <-time.After(lsWait):
					t.Fatalf("own notice %d did not arrive", i)
				}
			}
			if r.busA != nil {
				if in := r.busQuiet(); in != in0 {
					t.Fatalf("A's bus received %d of A's own messages", in-in0)
				}
			} else {
				r.waitStats("received its own hints", func(s ListenerStats) bool { return s.Hints >= st0.Hints+n })
			}
			if st := r.lis.Stats(); st.Reads != st0.Reads {
				t.Fatalf("A's listener read %d times for A's own notices, want 0", st.Reads-st0.Reads)
			}
		})
	}
}

// The bus server killed and restarted while B opens notices: A's subscriber gets every
// notice exactly once, those opened during the outage through the rescan of A's
// reconnect (the safety poll is an hour), and the later ones as hints again.
func TestListener_Bus_ServerRestart_NothingLost(t *testing.T) {
	srv := natstest.Start(t)
	r := newInterestRigOn(t, time.Hour, srv.URL)
	w := lsWatcher
	notes, _ := r.subscribeNotices(&w)
	got := map[string]int{}
	expect := func(targets ...string) {
		t.Helper()
		deadline := time.After(lsWait)
		for _, target := range targets {
			for got[target] == 0 {
				select {
				case n := <-notes:
					got[n.Target.Key]++
				case <-deadline:
					t.Fatalf("notice of %s did not arrive; got %v", target, got)
				}
			}
		}
	}
	var targets []string
	record := func(prefix string, n int) []string {
		var ts []string
		for i := range n {
			target := fmt.Sprintf("agent:main:subagent:%s%d", prefix, i)
			r.record(target, lsWatcher)
			ts = append(ts, target)
		}
		targets = append(targets, ts...)
		return ts
	}
	expect(record("before", 3)...)
	conns := r.lis.Stats().Connects
	srv.Stop()
	during := record("during", 5)
	srv.Start()
	r.waitStats("reconnected", func(s ListenerStats) bool { return s.Connects > conns })
	expect(during...)
	expect(record("after", 3)...)
	time.Sleep(lsQuiet) // late duplicates
	for {
		select {
		case n := <-notes:
			got[n.Target.Key]++
			continue
		default:
		}
		break
	}
	for _, target := range targets {
		if got[target] != 1 {
			t.Errorf("%s: %d notices, want 1", target, got[target])
		}
	}
	if len(got) != len(targets) {
		t.Errorf("notices of %d targets, want %d: %v", len(got), len(targets), got)
	}
}

func TestSubjectToken(t *testing.T) {
	for in, want := range map[string]string{
		"agent:main:subagent:x": "agent:main:subagent:x",
		"a.b":                   "a%2Eb",
		"a*b>c d":               "a%2Ab%3Ec%20d",
		"":                      "%",
		"é":                     "%C3%A9",
		"%":                     "%25",
	} {
		if got := subjectToken(in); got != want {
			t.Errorf("subjectToken(%q) = %q, want %q", in, got, want)
		}
	}
	if noticeSubject("") != "awareness.hint.w.>" || eventSubject(nil) != "awareness.hint.e.>" {
		t.Error("wildcard subjects")
	}
	if got := eventSubject(&awareness.SessionRef{Key: "global"}); got != "awareness.hint.e.*.global" {
		t.Errorf("key under every agent: %s", got)
	}
}

// The hint options: NOTIFY after the commit by default; a bus replaces NOTIFY and
// excludes a hint mode; SQLite takes no bus.
func TestOpen_HintOptions(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s := mustOpenPostgresAt(t, dsn)
	if !s.hintsAfterCommit || s.bus != nil || !s.d.notify {
		t.Errorf("default: after commit %v, bus %v, notify %v; want NOTIFY after the commit", s.hintsAfterCommit, s.bus, s.d.notify)
	}
	b := openBus(t, natstest.URL(t))
	sb, err := OpenPostgres(context.Background(), dsn, Options{Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if sb.bus == nil || sb.hintsAfterCommit {
		t.Errorf("with a bus: bus %v, after commit %v", sb.bus, sb.hintsAfterCommit)
	}
	if _, err := OpenPostgres(context.Background(), dsn, Options{Bus: b, Hints: HintsInCommit}); err == nil {
		t.Error("a bus with a hint mode opened")
	}
	if _, err := OpenSQLite(context.Background(), t.TempDir()+"/x.db", Options{Bus: b}); err == nil {
		t.Error("SQLite opened with a bus")
	}
}
