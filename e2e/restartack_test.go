package e2e

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/bus/natstest"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// A restart of the service (kill -9 or SIGTERM; on PostgreSQL also of another process
// sharing the database) between a gateway's drain and its exact acknowledgement leaves
// every pending notice unchanged (NTC-5), so the acknowledgement matches and no notice
// is handed out twice (NTC-3). Before, the startup sweep set N := M: the exact ack
// matched nothing, ackNotices answered [] and the same notice came back.

// restartKind is how a round restarts the service.
type restartKind struct {
	name string
	sig  syscall.Signal
}

var restartKinds = []restartKind{{"SIGKILL", syscall.SIGKILL}, {"SIGTERM", syscall.SIGTERM}}

// restartVariant is a database, and which process a round restarts how.
type restartVariant struct {
	name  string
	pg    bool
	other bool // PostgreSQL: restart another process, not the one the gateway uses
	kind  restartKind
}

// start starts the gateway's process on a fresh database of the variant, and with
// other, a second process on it.
func (v restartVariant) start(t *testing.T) (s, other *server) {
	t.Helper()
	if !v.pg {
		return startServer(t, filepath.Join(t.TempDir(), "awareness.db")), nil
	}
	dsn := pgtest.NewDatabase(t)
	s = startPGServer(t, dsn)
	if v.other {
		other = startPGServer(t, dsn)
	}
	return s, other
}

// restartOf stops s with k's signal and starts a new process on the same database.
func restartOf(t *testing.T, s *server, k restartKind, pg bool) *server {
	t.Helper()
	if k.sig == syscall.SIGKILL {
		s.kill()
	} else if st := s.stop(k.sig); !st.Success() {
		t.Fatalf("SIGTERM exit: %v", st)
	}
	if pg {
		return startPGServer(t, s.db)
	}
	return startServer(t, s.db)
}

const acknowledgeNoticesDoc = `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) {
  target targetAgentId notifiedVersion outcome followUp { ` + noticeFields + ` } pending { ` + noticeFields + ` } } }`

type noticeAck struct {
	Target          string  `json:"target"`
	TargetAgentID   string  `json:"targetAgentId"`
	NotifiedVersion int64   `json:"notifiedVersion"`
	Outcome         string  `json:"outcome"`
	FollowUp        *notice `json:"followUp"`
	Pending         *notice `json:"pending"`
}

// acknowledge acknowledges exactly the notices given, with acknowledgeNotices.
func (s *server) acknowledge(t *testing.T, watcher string, ns []notice) []noticeAck {
	t.Helper()
	refs := []map[string]any{}
	for _, n := range ns {
		refs = append(refs, map[string]any{"target": n.Target, "targetAgentId": n.TargetAgentID, "notifiedVersion": n.NotifiedVersion})
	}
	var d struct {
		AcknowledgeNotices []noticeAck `json:"acknowledgeNotices"`
	}
	s.mustGQL(t, acknowledgeNoticesDoc, map[string]any{"w": watcher, "n": refs}, &d)
	return d.AcknowledgeNotices
}

func (s *server) watch(t *testing.T, watcher, target string) {
	t.Helper()
	s.mustGQL(t, `mutation($w: String!, $t: String!) { watch(input: {watcher: $w, target: $t}) { watched } }`,
		map[string]any{"w": watcher, "t": target}, nil)
}

// TestExactAckAcrossRestart_NTC5 is the curl reproduction against the real
// binary: watch, a person types, pendingNotices (N=1), the person types again (M=2),
// restart, then the exact ackNotices of N=1 acknowledges it (its answer is the
// follow-up for M, and pendingNotices shows that follow-up, not the old text again).
// On SQLite and PostgreSQL, kill -9 and SIGTERM, and on PostgreSQL also when another
// process sharing the database restarts while the gateway talks to the first.
func TestExactAckAcrossRestart_NTC5(t *testing.T) {
	t.Parallel()
	var vs []restartVariant
	for _, k := range restartKinds {
		vs = append(vs, restartVariant{"sqlite/" + k.name, false, false, k}, restartVariant{"postgres/" + k.name, true, false, k},
			restartVariant{"postgres/other-process-" + k.name, true, true, k})
	}
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s, other := v.start(t)
			target := "agent:main:subagent:child"
			s.watch(t, mainWatcher, target)
			first := s.humanTurn(t, target)
			drained := s.pendingNotices(t, mainWatcher)
			if len(drained) != 1 || drained[0].NotifiedVersion != first.Event.Sequence {
				t.Fatalf("drained %+v, want one notice N=%d", drained, first.Event.Sequence)
			}
			second := s.humanTurn(t, target) // M > N
			if v.other {
				other = restartOf(t, other, v.kind, true)
			} else {
				s = restartOf(t, s, v.kind, v.pg)
			}
			after := s.pendingNotices(t, mainWatcher)
			want := drained[0]
			want.MaterialVersion = second.Event.Sequence
			if len(after) != 1 || after[0] != want {
				t.Fatalf("pending after the restart: %+v, want the drained notice unchanged but for M: %+v", after, want)
			}
			var d struct {
				AckNotices []notice `json:"ackNotices"`
			}
			s.mustGQL(t, `mutation($w: String!, $t: String!, $n: Int!) { ackNotices(watcher: $w, notices: [{target: $t, notifiedVersion: $n}]) { `+noticeFields+` } }`,
				map[string]any{"w": mainWatcher, "t": target, "n": drained[0].NotifiedVersion}, &d)
			if len(d.AckNotices) != 1 {
				t.Fatalf("the exact ack after the restart answered %+v, want the follow-up: it matched nothing", d.AckNotices)
			}
			follow := d.AckNotices[0]
			wantNotice(t, follow, mainWatcher, target, first.Event.Sequence)
			if follow.NotifiedVersion != second.Event.Sequence {
				t.Errorf("follow-up N = %d, want %d", follow.NotifiedVersion, second.Event.Sequence)
			}
			if p := s.pendingNotices(t, mainWatcher); len(p) != 1 || p[0] != follow {
				t.Fatalf("pending after the ack: %+v, want the follow-up %+v", p, follow)
			}
			// And the follow-up, across one more restart, with acknowledgeNotices.
			if v.other {
				restartOf(t, other, v.kind, true)
			} else {
				s = restartOf(t, s, v.kind, v.pg)
			}
			acks := s.acknowledge(t, mainWatcher, []notice{follow})
			if len(acks) != 1 || acks[0].Outcome != "acknowledged" || acks[0].FollowUp != nil {
				t.Fatalf("acknowledgeNotices of the follow-up after a restart: %+v, want acknowledged, no follow-up", acks)
			}
			if again := s.acknowledge(t, mainWatcher, []notice{follow}); again[0].Outcome != "alreadyAcknowledged" {
				t.Fatalf("the same acknowledgement again: %+v, want alreadyAcknowledged", again)
			}
		})
	}
}

// noticeID is what a gateway tells notices apart by when it puts them into a prompt:
// the pair and changesSince (the text).
type noticeID struct {
	target       string
	changesSince int64
}

// TestRestartBetweenDrainAndAck_20Rounds_NTC5_NTC3: 20 rounds per database and signal
// (and on PostgreSQL with another process restarting): a person types into some of the
// watcher's targets, the gateway drains (pendingNotices), the person types again into
// some, the service restarts, the gateway acknowledges exactly what it drained. A
// subscriber reconnected after each restart and the drains count every notice handed
// out; one handed out after the gateway acknowledged it is handed out twice (0
// allowed), and every exact acknowledgement must answer acknowledged.
func TestRestartBetweenDrainAndAck_20Rounds_NTC5_NTC3(t *testing.T) {
	t.Parallel()
	const rounds = 20
	var vs []restartVariant
	for _, k := range restartKinds {
		vs = append(vs, restartVariant{"sqlite/" + k.name, false, false, k}, restartVariant{"postgres/" + k.name, true, false, k})
	}
	vs = append(vs, restartVariant{"postgres/other-process-SIGKILL", true, true, restartKinds[0]})
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			s, other := v.start(t)
			targets := []string{"agent:main:subagent:r0", "agent:main:subagent:r1", "agent:main:subagent:r2"}
			for _, tg := range targets {
				s.watch(t, mainWatcher, tg)
			}
			seed := fnv.New64a()
			seed.Write([]byte(v.name))
			rng := rand.New(rand.NewPCG(seed.Sum64(), 25))
			acked := map[noticeID]bool{}
			var twice, handed, drainedTotal, notAcked int
			hand := func(how string, n notice) {
				handed++
				if id := (noticeID{n.Target, n.ChangesSince}); acked[id] {
					twice++
					t.Errorf("%s handed out %s changesSince %d again after its exact ack", how, n.Target, n.ChangesSince)
				}
			}
			ws := dialWS(t, s.wsURL)
			ws.subscribe("n", mainWatcher)
			for round := range rounds {
				for _, tg := range targets {
					if rng.IntN(3) > 0 {
						s.humanTurn(t, tg)
					}
				}
				for _, n := range receivedNotices(t, ws, "n") {
					hand("the subscription", n)
				}
				drained := s.pendingNotices(t, mainWatcher)
				for _, n := range drained {
					hand("a drain", n)
				}
				drainedTotal += len(drained)
				for _, tg := range targets {
					if rng.IntN(2) == 0 {
						s.humanTurn(t, tg) // M > N for a drained notice
					}
				}
				if v.other {
					other = restartOf(t, other, v.kind, true)
				} else {
					ws.close()
					s = restartOf(t, s, v.kind, v.pg)
					ws = dialWS(t, s.wsURL)
					ws.subscribe("n", mainWatcher)
				}
				for _, n := range receivedNotices(t, ws, "n") {
					hand("the subscription after the restart", n)
				}
				if len(drained) == 0 {
					continue
				}
				for i, a := range s.acknowledge(t, mainWatcher, drained) {
					acked[noticeID{drained[i].Target, drained[i].ChangesSince}] = true
					if a.Outcome != "acknowledged" {
						notAcked++
						t.Errorf("round %d: the exact ack of %s N=%d after the restart: %s", round, a.Target, a.NotifiedVersion, a.Outcome)
					}
				}
			}
			for _, n := range receivedNotices(t, ws, "n") {
				hand("the subscription", n)
			}
			for _, n := range s.pendingNotices(t, mainWatcher) {
				hand("the last drain", n)
			}
			t.Logf("%s: %d rounds, %d notices drained and acknowledged exactly, %d handed out in all, %d handed out twice, %d exact acks that did not acknowledge, %v",
				v.name, rounds, drainedTotal, handed, twice, notAcked, time.Since(began).Round(time.Millisecond))
		})
	}
}

// receivedNotices returns the notices subscription id delivers until none arrives
// for the quiet window.
func receivedNotices(t *testing.T, ws *wsClient, id string) []notice {
	t.Helper()
	var out []notice
	for {
		f, ok := ws.nextFrame(quiet)
		if !ok {
			return out
		}
		if f.ID != id {
			continue
		}
		if f.Type != "next" {
			t.Fatalf("got %s frame for %q: %s", f.Type, id, f.Payload)
		}
		out = append(out, decodeNotice(t, f.Payload))
	}
}

// TestPostgres_RollingRestartKeepsPendingNotices_NTC5: three processes on one
// database; each is restarted in turn (SIGTERM, then a new process), and after each
// restart every pending notice, read through another process, is exactly what it was
// (N, M, text, opening time): a rolling deploy changes no pending notice. The exact
// acknowledgements of the notices drained before the deploy then all acknowledge.
func TestPostgres_RollingRestartKeepsPendingNotices_NTC5(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	procs := []*server{startPGServer(t, dsn), startPGServer(t, dsn), startPGServer(t, dsn)}
	watchers := []string{mainWatcher, "agent:main:subagent:w1", "agent:ops:main"}
	targets := []string{"agent:main:subagent:t0", "agent:main:subagent:t1", "agent:ops:subagent:t2"}
	for i, w := range watchers {
		for _, tg := range targets {
			procs[i].watch(t, w, tg)
		}
	}
	for i, tg := range targets {
		procs[i].humanTurn(t, tg)
		if i != 1 {
			procs[(i+1)%3].humanTurn(t, tg) // M > N on two of the three
		}
	}
	snapshot := func(s *server) string {
		all := map[string][]notice{}
		for _, w := range watchers {
			all[w] = s.pendingNotices(t, w)
		}
		b, _ := json.Marshal(all)
		return string(b)
	}
	before := snapshot(procs[0])
	drained := map[string][]notice{}
	for _, w := range watchers {
		drained[w] = procs[0].pendingNotices(t, w)
		if len(drained[w]) != len(targets) {
			t.Fatalf("%s has %d pending notices, want %d", w, len(drained[w]), len(targets))
		}
	}
	for i := range procs {
		procs[i] = restartOf(t, procs[i], restartKinds[1], true)
		if got := snapshot(procs[(i+1)%3]); got != before {
			t.Fatalf("after restarting process %d the pending notices changed:\nbefore %s\nafter  %s", i, before, got)
		}
	}
	if got := snapshot(procs[2]); got != before {
		t.Fatalf("after the rolling restart:\nbefore %s\nafter  %s", before, got)
	}
	for i, w := range watchers {
		for _, a := range procs[i].acknowledge(t, w, drained[w]) {
			if a.Outcome != "acknowledged" {
				t.Errorf("%s: the exact ack of %s N=%d after the rolling restart: %s", w, a.Target, a.NotifiedVersion, a.Outcome)
			}
		}
	}
	for _, w := range watchers {
		for _, n := range procs[0].pendingNotices(t, w) {
			if n.ChangesSince == 0 {
				t.Errorf("%s: the notice %s changesSince 0 is still pending after its exact ack", w, fmt.Sprint(n.Target))
			}
		}
	}
}

// TestPostgres_StartBesideAcks_NoNoticeChanged_NTC5: process A serves a gateway that
// acknowledges, one notice after another, while process B starts on the same database
// over 10,000 pending notices of other watchers (half of them with M > N). Every
// acknowledgement acknowledges exactly its notice, A's subscriber gets each pending
// notice once and nothing again (B's start publishes nothing), and B's start changes
// no pending notice of the others: the same rows, N, M and opening times (a start that
// blocks nobody; its timing is bench/cmd/pgscale -phases start). With NOTIFY and
// with the hints on a NATS bus.
func TestPostgres_StartBesideAcks_NoNoticeChanged_NTC5(t *testing.T) {
	t.Parallel()
	for _, hints := range []string{"notify", "bus"} {
		t.Run(hints, func(t *testing.T) {
			t.Parallel()
			args := []string{"--notice-poll", pgPoll.String()}
			if hints == "bus" {
				args = append(args, "--bus", natstest.URL(t))
			}
			startBesideAcks(t, func(dsn string) *server { return startServerWith(t, dsn, serverOpts{args: args}) })
		})
	}
}

func startBesideAcks(t *testing.T, startPGServer func(dsn string) *server) {
	dsn := pgtest.NewDatabase(t)
	a := startPGServer(dsn)
	const others, acked = 10000, 300
	acker := "agent:main:subagent:acker"
	seed := fmt.Sprintf(`INSERT INTO cursors (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at)
SELECT 'agent:main:subagent:other' || (i %% 100), 'main', 'agent:main:subagent:t' || (i / 100), 0, 1, 1 + i %% 2, %[1]d + i, %[1]d
FROM generate_series(0, %[2]d - 1) AS i
UNION ALL
SELECT '%[3]s', 'main', 'agent:main:subagent:a' || i, 0, 1, 1, %[1]d + i, %[1]d FROM generate_series(0, %[4]d - 1) AS i`,
		time.Now().UnixNano(), others, acker, acked)
	var inserted int64
	pgQuery(t, dsn, &inserted, "WITH ins AS ("+seed+" RETURNING 1) SELECT count(*) FROM ins")
	if inserted != others+acked {
		t.Fatalf("seeded %d cursors", inserted)
	}
	const othersSum = `SELECT count(*)::text || ' ' || sum(l)::text || ' ' || sum(n)::text || ' ' || sum(m)::text || ' ' || sum(opened_at)::text
FROM cursors WHERE n > l AND watcher_key <> 'agent:main:subagent:acker'`
	var before string
	pgQuery(t, dsn, &before, othersSum)

	ws := dialWS(t, a.wsURL)
	ws.subscribe("n", acker)
	pending := map[string]notice{}
	for range acked {
		n, _ := ws.nextNotice("n")
		if _, dup := pending[n.Target]; dup {
			t.Fatalf("the subscription sent %s twice", n.Target)
		}
		pending[n.Target] = n
	}
	type result struct {
		acks []noticeAck
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		for i := range acked {
			n := pending[fmt.Sprintf("agent:main:subagent:a%d", i)]
			resp, err := a.gql(acknowledgeNoticesDoc, map[string]any{"w": acker, "n": []map[string]any{
				{"target": n.Target, "targetAgentId": n.TargetAgentID, "notifiedVersion": n.NotifiedVersion}}})
			var d struct {
				AcknowledgeNotices []noticeAck `json:"acknowledgeNotices"`
			}
			if err == nil {
				err = json.Unmarshal(resp.Data, &d)
			}
			if err != nil {
				r.err = err
				break
			}
			r.acks = append(r.acks, d.AcknowledgeNotices...)
		}
		done <- r
	}()
	b := startPGServer(dsn)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	acks := res.acks
	for _, k := range acks {
		if k.Outcome != "acknowledged" {
			t.Errorf("the ack of %s N=%d beside B's start: %s", k.Target, k.NotifiedVersion, k.Outcome)
		}
	}
	if len(acks) != acked {
		t.Fatalf("%d answers for %d acknowledgements", len(acks), acked)
	}
	ws.none("n")
	var after string
	pgQuery(t, dsn, &after, othersSum)
	if after != before {
		t.Errorf("B's start changed the pending notices of the others: %s, were %s", after, before)
	}
	if !strings.Contains(b.logs.String(), `msg="startup sweep done" notices_opened=0`) {
		t.Errorf("B's start opened notices:\n%s", tail(b.logs.String(), 2000))
	}
	if p := a.pendingNotices(t, acker); len(p) != 0 {
		t.Errorf("%d notices of the acker still pending", len(p))
	}
}
