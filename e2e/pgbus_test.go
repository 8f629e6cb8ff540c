package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/bus/natstest"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// busPoll is the safety poll of the bus tests: long enough that only the bus (its
// hints, and the rescans of its reconnects) can deliver what the tests wait for.
const busPoll = 10 * time.Minute

// Three real processes on one PostgreSQL database with the hints on a NATS bus (a
// private nats-server, which the test kills and starts again; never the machine's).
// A has one subscriber per watcher of four, B a dashboard (every watcher), C one
// subscriber that leaves while the bus server is down and subscribes again before it
// is back. Appends go round-robin through A, B and C throughout. Every subscriber gets
// every notice it is owed exactly once: none lost to the outage (the notices opened
// meanwhile come with the rescan of each reconnect; the safety poll is 10 minutes),
// to the interest filter or to C's subscription made while the bus could not confirm
// it, none twice (a message nats.go kept through the outage and the rescan name the
// same notice).
func TestPostgres_ThreeProcesses_Bus_ServerKilledAndRestarted(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	nats := natstest.Start(t)
	start := func() *server {
		return startServerWith(t, dsn, serverOpts{args: []string{"--bus", nats.URL, "--notice-poll", busPoll.String()}})
	}
	a, b, c := start(), start(), start()
	procs := []*server{a, b, c}
	watcher := func(i int) string { return fmt.Sprintf("agent:main:subagent:obs%d", i) }
	const watchers, appends = 4, 64

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
	collectUntil := func(ws *wsClient, enough func() bool, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !enough() && time.Now().Before(deadline) {
			f, ok := ws.nextFrame(time.Until(deadline))
			if !ok {
				continue
			}
			if f.Type == "complete" && f.ID == "c" {
				continue
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

	for i := range appends {
		procs[i%3].mustRecord(t, map[string]any{"sessionKey": fmt.Sprintf("agent:main:subagent:t%02d", i),
			"kind": "human_direct_message", "actorType": "human", "watchers": []string{watcher(i % watchers)}})
		switch i {
		case appends / 4:
			nats.Stop()
		case 3 * appends / 8:
			wsC.complete("c") // C's only subscriber leaves
		case appends / 2:
			wsC.subscribe("c2", watcher(1)) // and comes back while the bus is down
		case 5 * appends / 8:
			nats.Start()
		}
	}
	within := 2 * wait
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
	owed := func(w int) []string {
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
}
