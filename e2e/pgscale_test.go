package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/models/pgtest"
)

// Three real processes on one PostgreSQL database, with subscribers on some of them
// only: every listener reads only what its own process has subscribers for (SCALE.md's
// X5). A has one subscriber per watcher of four; B has a dashboard (every
// watcher); C has none, then one of obs1 that leaves and comes back. Appends go
// round-robin through A, B and C while A's listener connection and then B's are killed
// (pg_terminate_backend). Every subscriber gets every notice it is owed exactly once:
// none lost to the kills, to the interest filter or to C's re-subscription (its
// interest is announced before it reads the pending notices), none twice.
func TestPostgres_ThreeProcesses_InterestDeliveryUnderListenerKills(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b, c := startPGServer(t, dsn), startPGServer(t, dsn), startPGServer(t, dsn)
	procs := []*server{a, b, c}
	watcher := func(i int) string { return fmt.Sprintf("agent:main:subagent:obs%d", i) }
	const watchers, appends = 4, 60

	wsA, wsB, wsC := dialWS(t, a.wsURL), dialWS(t, b.wsURL), dialWS(t, c.wsURL)
	for i := range watchers {
		wsA.subscribe("a"+strconv.Itoa(i), watcher(i))
	}
	wsB.subscribe("dash", "")
	wsC.subscribe("c", watcher(1))
	got := map[*wsClient]map[string]map[string]int{} // connection → subscription → target → frames
	for _, ws := range []*wsClient{wsA, wsB, wsC} {
		got[ws] = map[string]map[string]int{}
	}
	// collectUntil reads the frames of ws until enough() or the deadline.
	collectUntil := func(ws *wsClient, enough func() bool, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if enough() || time.Now().After(deadline) {
				return
			}
			f, ok := ws.nextFrame(time.Until(deadline))
			if !ok {
				continue
			}
			if f.Type == "complete" && f.ID == "c" {
				continue // the server confirms C's first subscriber's end
			}
			if f.Type != "next" {
				t.Fatalf("%s frame on %q: %s", f.Type, f.ID, f.Payload)
			}
			no := decodeNotice(t, f.Payload)
			if got[ws][f.ID] == nil {
				got[ws][f.ID] = map[string]int{}
			}
			got[ws][f.ID][no.Target]++
		}
	}
	// collect reads until ws's subscriptions have want targets in all.
	collect := func(ws *wsClient, want int, within time.Duration) {
		t.Helper()
		collectUntil(ws, func() bool {
			n := 0
			for _, m := range got[ws] {
				n += len(m)
			}
			return n >= want
		}, within)
	}

	// Warm-up through C: one notice per watcher proves every subscription live.
	for i := range watchers {
		c.mustRecord(t, map[string]any{"sessionKey": fmt.Sprintf("agent:main:subagent:warm%d", i),
			"kind": "human_direct_message", "actorType": "human", "watchers": []string{watcher(i)}})
	}
	collect(wsA, watchers, wait)
	collect(wsB, watchers, wait)
	collect(wsC, 1, wait)

	pidOf := func(s *server) string { return "awareness-listener/" + strconv.Itoa(s.cmd.Process.Pid) }
	waitListeners(t, dsn, pidOf(a), 1)
	waitListeners(t, dsn, pidOf(b), 1)
	for i := range appends {
		procs[i%3].mustRecord(t, map[string]any{"sessionKey": fmt.Sprintf("agent:main:subagent:t%02d", i),
			"kind": "human_direct_message", "actorType": "human", "watchers": []string{watcher(i % watchers)}})
		switch i {
		case appends / 4:
			if n := pgTerminate(t, dsn, pidOf(a)); n != 1 {
				t.Fatalf("terminated %d listener backends of A, want 1", n)
			}
		case appends / 2:
			if n := pgTerminate(t, dsn, pidOf(b)); n != 1 {
				t.Fatalf("terminated %d listener backends of B, want 1", n)
			}
			wsC.complete("c") // C's only subscriber leaves: C is of no interest
		case 3 * appends / 4:
			wsC.subscribe("c2", watcher(1)) // and comes back: pending first, then live
		}
	}
	within := pgPoll + 10*time.Second
	collect(wsA, watchers+appends, within)
	collect(wsB, watchers+appends, within)
	collectUntil(wsC, func() bool { return len(got[wsC]["c2"]) >= 1+appends/watchers }, within)
	for _, ws := range []*wsClient{wsA, wsB, wsC} {
		collect(ws, 1<<30, quiet) // late duplicates
	}

	check := func(who string, m map[string]int, want []string) {
		t.Helper()
		for _, target := range want {
			if m[target] != 1 {
				t.Errorf("%s: %d notices for %s, want 1", who, m[target], target)
			}
		}
		if len(m) != len(want) {
			t.Errorf("%s: notices for %d targets, want %d", who, len(m), len(want))
		}
	}
	owed := func(w int) []string { // the targets naming watcher w
		out := []string{fmt.Sprintf("agent:main:subagent:warm%d", w)}
		for i := w; i < appends; i += watchers {
			out = append(out, fmt.Sprintf("agent:main:subagent:t%02d", i))
		}
		return out
	}
	var all []string
	for w := range watchers {
		check("A's subscriber of "+watcher(w), got[wsA]["a"+strconv.Itoa(w)], owed(w))
		all = append(all, owed(w)...)
	}
	check("B's dashboard", got[wsB]["dash"], all)
	check("C's returning subscriber of "+watcher(1), got[wsC]["c2"], owed(1))
	for target, n := range got[wsC]["c"] {
		if n != 1 {
			t.Errorf("C's first subscriber: %d notices for %s", n, target)
		}
	}
	waitListeners(t, dsn, pidOf(a), 1) // both reconnected
	waitListeners(t, dsn, pidOf(b), 1)
}
