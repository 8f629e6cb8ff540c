package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Crash-safety harness (watch-semantics-and-fault-tests.md §7, §9 tests 1 and 10):
// several HTTP clients append, acknowledge and watch concurrently against the real
// binary; the server is killed with SIGKILL at a random instant; it restarts on the
// same database and a checker verifies, mechanically, the recorded history:
//
//   - set-full: every acknowledged append (HTTP 200, recorded: true) is in the log at
//     the sequence it was acknowledged with, carrying its unique runId;
//   - dense, increasing versions: each session's log is exactly 1..stateVersion, with
//     no history gap (nothing is pruned here);
//   - no version reused: a (session, sequence) once observed never changes its
//     runId, and a session's head never goes backwards across restarts;
//   - no phantom, no duplicate: every runId in a log was sent by a client for that
//     session, at most once; appends whose answer was lost (the kill) may be present
//     or absent; appends answered with an error are absent;
//   - cursors: L ≤ N ≤ M ≤ head of the target for every cursor;
//   - notices: every watcher behind its target (M > L) has exactly one pending
//     notice for it, changesSince L; a watcher not behind has none.
//
// Seeds: AWARENESS_CRASH_SEEDS rounds (default 20), starting at AWARENESS_CRASH_SEED
// (default: the clock). Each round runs the workload for 150–1150 ms before the kill.

// crashTargets are the sessions written; crashWatchers watch them.
var (
	crashTargets = []string{
		"agent:main:subagent:c0", "agent:main:subagent:c1", "agent:main:subagent:c2",
		"agent:main:subagent:c3", "agent:ops:subagent:d0", "agent:ops:direct:bob",
	}
	crashWatchers = []string{mainWatcher, "agent:ops:main", "agent:main:subagent:w1"}
	crashKinds    = []struct{ kind, actorType string }{
		{"human_direct_message", "human"}, {"goal_changed", "agent"}, {"run_completed", "system"}, {"compacted", "system"},
	}
)

// opOutcome is what a client learnt of one append.
type opOutcome int

const (
	opInfo opOutcome = iota // no answer (the kill): may or may not be committed
	opOK                    // acknowledged: recorded at seq
	opFail                  // answered with an error: must not be committed
)

type appendOp struct {
	session string
	outcome opOutcome
	seq     int64
	code    string
}

// crashHistory is what the clients did, across every round.
type crashHistory struct {
	mu  sync.Mutex
	ops map[string]*appendOp // by runId
	// seen is every (session, sequence) → runId ever observed, to detect reuse.
	seen  map[string]map[int64]string
	heads map[string]int64
}

func (h *crashHistory) invoke(runID, session string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[runID] = &appendOp{session: session}
}

func (h *crashHistory) settle(runID string, o opOutcome, seq int64, code string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op := h.ops[runID]
	op.outcome, op.seq, op.code = o, seq, code
}

type crashTotals struct {
	rounds, acked, info, infoPresent, failed, acks, watches int
	lost, reused, phantoms, duplicates, cursorViolations    int
	noticeViolations, gapViolations, regressions            int
	cursorsChecked, behindChecked                           int
}

func TestCrash_KillNineAtRandomInstants_SIG3_SIG7_NTC5(t *testing.T) {
	rounds := 20
	if v, err := strconv.Atoi(os.Getenv("AWARENESS_CRASH_SEEDS")); err == nil && v > 0 {
		rounds = v
	}
	base := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("AWARENESS_CRASH_SEED"), 10, 64); err == nil {
		base = v
	}
	t.Logf("crash harness: %d rounds from seed %d (AWARENESS_CRASH_SEED=%d reproduces)", rounds, base, base)

	db := filepath.Join(t.TempDir(), "awareness.db")
	// 16 writers at full speed exceed one address's query budget (ERR-4) on a fast run;
	// the harness is about durability, so it runs without that budget.
	s := startServerWith(t, db, crashServerOpts)
	// The parent watches its children from their spawn (WAT-2); the other watchers
	// register explicitly (WAT-3).
	for _, c := range crashTargets[:4] {
		s.spawn(t, c, mainWatcher)
	}
	for _, w := range crashWatchers[1:] {
		for _, c := range crashTargets {
			s.mustDo(t, "", `mutation($w: String!, $t: String!) { watch(input: {watcher: $w, target: $t}) { watched } }`,
				map[string]any{"w": w, "t": c}, nil)
		}
	}
	h := &crashHistory{ops: map[string]*appendOp{}, seen: map[string]map[int64]string{}, heads: map[string]int64{}}
	var tot crashTotals
	for r := range rounds {
		seed := base + uint64(r)
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		killAfter := 150*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond
		acks, watches := crashWorkload(s, h, seed, killAfter)
		tot.acks += acks
		tot.watches += watches
		s = startServerWith(t, db, crashServerOpts)
		checkCrashRound(t, s, h, &tot)
		tot.rounds++
		if t.Failed() {
			t.Fatalf("round %d (seed %d, kill after %v) broke an invariant", r, seed, killAfter)
		}
	}
	failCodes := map[string]int{}
	for _, op := range h.ops {
		switch op.outcome {
		case opOK:
			tot.acked++
		case opInfo:
			tot.info++
		case opFail:
			tot.failed++
			failCodes[op.code]++
		}
	}
	t.Logf("crash harness: %d rounds of kill -9; %d acknowledged appends checked, %d unanswered (%d of them committed), %d answered with an error, %d acks, %d watch calls; %d cursor checks (%d behind their target); lost %d, reused versions %d, phantoms %d, duplicates %d, gaps %d, head regressions %d, cursor violations %d, notice violations %d",
		tot.rounds, tot.acked, tot.info, tot.infoPresent, tot.failed, tot.acks, tot.watches, tot.cursorsChecked, tot.behindChecked,
		tot.lost, tot.reused, tot.phantoms, tot.duplicates, tot.gapViolations, tot.regressions, tot.cursorViolations, tot.noticeViolations)
	if tot.failed > 0 {
		t.Errorf("%d appends were answered with an error while the server was up (by code: %v)", tot.failed, failCodes)
	}
}

// crashServerOpts are the server's flags in the crash harness: no query budget.
var crashServerOpts = serverOpts{args: []string{"--query-rate", "0"}}

// crashWorkload runs the clients against s, kills s with SIGKILL after killAfter and
// returns once every client stopped.
func crashWorkload(s *server, h *crashHistory, seed uint64, killAfter time.Duration) (acks, watches int) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var nAcks, nWatches atomic.Int64
	const writers = 4
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; ctx.Err() == nil; i++ {
				runID := fmt.Sprintf("r%d-w%d-%d", seed, w, i)
				session := crashTargets[rng.IntN(len(crashTargets))]
				k := crashKinds[rng.IntN(len(crashKinds))]
				in := map[string]any{"sessionKey": session, "kind": k.kind, "actorType": k.actorType, "runId": runID}
				switch k.actorType {
				case "human":
					in["actorId"], in["channel"] = "user:alice", "webchat"
				case "agent":
					// Now and then a watcher acts itself (self-suppression, NTC-2).
					in["actorId"] = crashWatchers[rng.IntN(len(crashWatchers))]
				}
				h.invoke(runID, session)
				c := s.do("", recordMutation, map[string]any{"in": in})
				switch {
				case c.err != nil:
					h.settle(runID, opInfo, 0, "")
					return // the server is gone
				case len(c.resp.Errors) > 0:
					h.settle(runID, opFail, 0, c.code())
				default:
					var d struct {
						RecordEvent recordResult `json:"recordEvent"`
					}
					if err := json.Unmarshal(c.resp.Data, &d); err != nil || !d.RecordEvent.Recorded {
						h.settle(runID, opFail, 0, "UNDECODABLE")
						continue
					}
					h.settle(runID, opOK, d.RecordEvent.Event.Sequence, "")
				}
			}
		})
	}
	wg.Go(func() { // the gateway draining notices into its watchers' turns
		rng := rand.New(rand.NewPCG(seed, 100))
		for ctx.Err() == nil {
			w := crashWatchers[rng.IntN(len(crashWatchers))]
			if c := s.do("", `mutation($w: String!) { ackNotices(watcher: $w) { target } }`, map[string]any{"w": w}); c.err != nil {
				return
			}
			nAcks.Add(1)
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
		}
	})
	wg.Go(func() { // watch, re-watch and now and then unwatch
		rng := rand.New(rand.NewPCG(seed, 200))
		for ctx.Err() == nil {
			w, tg := crashWatchers[rng.IntN(len(crashWatchers))], crashTargets[rng.IntN(len(crashTargets))]
			op := `mutation($w: String!, $t: String!) { watch(input: {watcher: $w, target: $t}) { watched } }`
			if rng.IntN(10) == 0 {
				op = `mutation($w: String!, $t: String!) { unwatch(watcher: $w, target: $t) }`
			}
			if c := s.do("", op, map[string]any{"w": w, "t": tg}); c.err != nil {
				return
			}
			nWatches.Add(1)
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
	})
	wg.Go(func() { // a reader reconciling, which holds read transactions
		rng := rand.New(rand.NewPCG(seed, 300))
		for ctx.Err() == nil {
			tg := crashTargets[rng.IntN(len(crashTargets))]
			if c := s.do("", `query($k: String!) { sessionStatus(sessionKey: $k, changesSince: 0) { stateVersion } }`, map[string]any{"k": tg}); c.err != nil {
				return
			}
		}
	})
	time.Sleep(killAfter)
	s.kill() // SIGKILL
	stop()
	wg.Wait()
	s.client.CloseIdleConnections()
	return int(nAcks.Load()), int(nWatches.Load())
}

// checkCrashRound checks the invariants on the restarted server.
func checkCrashRound(t *testing.T, s *server, h *crashHistory, tot *crashTotals) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	heads := map[string]int64{}
	present := map[string]bool{} // runIds in the logs
	for _, session := range crashTargets {
		events, head, gap := s.readLog(t, "", session)
		heads[session] = head
		if gap {
			tot.gapViolations++
			t.Errorf("%s: historyGap reported with nothing pruned", session)
		}
		if head < h.heads[session] {
			tot.regressions++
			t.Errorf("%s: stateVersion went back from %d to %d", session, h.heads[session], head)
		}
		h.heads[session] = head
		if int64(len(events)) != head {
			tot.gapViolations++
			t.Errorf("%s: %d events for stateVersion %d", session, len(events), head)
		}
		if h.seen[session] == nil {
			h.seen[session] = map[int64]string{}
		}
		for i, e := range events {
			if want := int64(i + 1); e.Sequence != want {
				tot.gapViolations++
				t.Errorf("%s: event %d has sequence %d, want %d (dense, increasing)", session, i, e.Sequence, want)
				break
			}
			if prev, ok := h.seen[session][e.Sequence]; ok && prev != e.RunID {
				tot.reused++
				t.Errorf("%s: sequence %d was %q and is now %q (version reused)", session, e.Sequence, prev, e.RunID)
			}
			h.seen[session][e.Sequence] = e.RunID
			if e.RunID == "" {
				continue // set-up events
			}
			op, ok := h.ops[e.RunID]
			switch {
			case !ok || op.session != session:
				tot.phantoms++
				t.Errorf("%s: sequence %d carries runId %q that no client sent for it", session, e.Sequence, e.RunID)
			case present[e.RunID]:
				tot.duplicates++
				t.Errorf("runId %q is in the log twice", e.RunID)
			case op.outcome == opFail:
				tot.lost++ // counted as a violation: an error answer must mean "not written"
				t.Errorf("runId %q was answered %s but is in the log", e.RunID, op.code)
			case op.outcome == opOK && op.seq != e.Sequence:
				t.Errorf("runId %q was acknowledged at %d but is at %d", e.RunID, op.seq, e.Sequence)
				tot.lost++
			}
			present[e.RunID] = true
		}
	}
	for runID, op := range h.ops {
		switch {
		case op.outcome == opOK && !present[runID]:
			tot.lost++
			t.Errorf("acknowledged append %s (%s seq %d) is missing after the restart", runID, op.session, op.seq)
		case op.outcome == opInfo && present[runID] && !op.counted():
			tot.infoPresent++
			op.code = "present"
		}
	}

	// Cursors and notices.
	cs := s.cursors(t, "")
	pending := map[string][]notice{}
	for _, c := range cs {
		if c.LastAcked > c.Notified || c.Notified > c.Material || c.Material > heads[c.Target] {
			tot.cursorViolations++
			t.Errorf("cursor %s → %s: L=%d N=%d M=%d head=%d (want L ≤ N ≤ M ≤ head)", c.Watcher, c.Target, c.LastAcked, c.Notified, c.Material, heads[c.Target])
		}
		if _, ok := pending[c.Watcher]; !ok {
			pending[c.Watcher] = s.pendingNotices(t, c.Watcher)
		}
	}
	for _, c := range cs {
		var mine []notice
		for _, n := range pending[c.Watcher] {
			if n.Target == c.Target && n.TargetAgentID == c.TargetAgentID {
				mine = append(mine, n)
			}
		}
		behind := c.Material > c.LastAcked
		tot.cursorsChecked++
		if behind {
			tot.behindChecked++
		}
		switch {
		case behind && (len(mine) != 1 || mine[0].ChangesSince != c.LastAcked || c.Notified <= c.LastAcked):
			tot.noticeViolations++
			t.Errorf("cursor %s → %s is behind (L=%d N=%d M=%d) with notices %+v; want exactly one, changesSince L", c.Watcher, c.Target, c.LastAcked, c.Notified, c.Material, mine)
		case !behind && len(mine) != 0:
			tot.noticeViolations++
			t.Errorf("cursor %s → %s is not behind (L=M=%d) but has notices %+v", c.Watcher, c.Target, c.LastAcked, mine)
		}
	}
}

// counted reports whether an unanswered op was already counted as committed.
func (o *appendOp) counted() bool { return o.code == "present" }
