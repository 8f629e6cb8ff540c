package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/internal/models/pgtest"
)

// Two real server processes on one PostgreSQL database (TEST_DATABASE_URL; a fresh
// database per test). Notices cross processes through LISTEN/NOTIFY hints, and every
// process falls back to scanning the cursor rows (on reconnect, and every
// --notice-poll).

// pgPoll is the safety poll of the servers under test.
const pgPoll = time.Second

func startPGServer(t *testing.T, dsn string) *server {
	t.Helper()
	return startServerWith(t, dsn, serverOpts{args: []string{"--notice-poll", pgPoll.String()}})
}

// A watcher subscribed on both processes: a notice opened by an event recorded on B
// reaches the subscriber on A exactly once; the ack on B opens the follow-up, which
// A's subscriber sees once; a foreign event recorded on A notifies both once; an ack
// on A's side opens a follow-up that B's subscriber sees once.
func TestPostgres_TwoProcesses_NoticesAcksFollowUps_NTC2_NTC3(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := startPGServer(t, dsn), startPGServer(t, dsn)
	wsA, wsB := dialWS(t, a.wsURL), dialWS(t, b.wsURL)
	wsA.subscribe("a", mainWatcher)
	wsB.subscribe("b", mainWatcher)
	child := "agent:main:subagent:research"
	both := func(check func(n notice)) {
		t.Helper()
		na, _ := wsA.nextNotice("a")
		nb, _ := wsB.nextNotice("b")
		check(na)
		check(nb)
		if na != nb {
			t.Fatalf("the processes disagree: A %+v, B %+v", na, nb)
		}
		wsA.none("a")
		wsB.none("b")
	}

	seed := b.spawn(t, child, mainWatcher)
	first := b.humanTurn(t, child)
	if first.NoticesOpened != 1 {
		t.Fatalf("human turn on B opened %d notices", first.NoticesOpened)
	}
	both(func(n notice) { wantNotice(t, n, mainWatcher, child, seed) })

	second := b.humanTurn(t, child) // M > N: no second notice anywhere
	wsA.none("a")
	wsB.none("b")

	follow := b.ack(t, mainWatcher)
	if len(follow) != 1 {
		t.Fatalf("ack on B opened %d follow-ups, want 1", len(follow))
	}
	both(func(n notice) {
		wantNotice(t, n, mainWatcher, child, first.Event.Sequence)
		if n.NotifiedVersion != second.Event.Sequence {
			t.Fatalf("follow-up N = %d, want %d", n.NotifiedVersion, second.Event.Sequence)
		}
	})
	if f := b.ack(t, mainWatcher); len(f) != 0 {
		t.Fatalf("second ack opened %d follow-ups", len(f))
	}

	third := a.mustRecord(t, map[string]any{
		"sessionKey": child, "kind": "goal_changed", "actorType": "agent", "actorId": "agent:ops:main",
	})
	if third.NoticesOpened != 1 {
		t.Fatalf("foreign change on A opened %d notices", third.NoticesOpened)
	}
	both(func(n notice) { wantNotice(t, n, mainWatcher, child, second.Event.Sequence) })

	fourth := a.humanTurn(t, child) // M > N again, then the ack on A opens the rest
	if f := a.ack(t, mainWatcher); len(f) != 1 {
		t.Fatalf("ack on A opened %d follow-ups, want 1", len(f))
	}
	both(func(n notice) {
		wantNotice(t, n, mainWatcher, child, third.Event.Sequence)
		if n.NotifiedVersion != fourth.Event.Sequence {
			t.Fatalf("follow-up N = %d, want %d", n.NotifiedVersion, fourth.Event.Sequence)
		}
	})
	if p := a.pendingNotices(t, mainWatcher); len(p) != 1 {
		t.Fatalf("pending on A: %+v", p)
	}
}

// Listener loss: A's listener connection is terminated (pg_terminate_backend, found by
// its application_name) while B records; every notice opened meanwhile reaches A's
// subscriber after the reconnect, within the safety-poll interval, and none twice.
func TestPostgres_ListenerTerminated_NoNoticeLost(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := startPGServer(t, dsn), startPGServer(t, dsn)
	wsA := dialWS(t, a.wsURL)
	wsA.subscribe("a", mainWatcher)
	listenerOfA := "awareness-listener/" + strconv.Itoa(a.cmd.Process.Pid)
	waitListeners(t, dsn, listenerOfA, 1)

	const targets = 40
	var last time.Time
	for i := range targets {
		b.mustRecord(t, map[string]any{
			"sessionKey": fmt.Sprintf("agent:main:subagent:t%02d", i), "kind": "human_direct_message",
			"actorType": "human", "watchers": []string{mainWatcher},
		})
		if i == targets/4 {
			if n := pgTerminate(t, dsn, listenerOfA); n != 1 {
				t.Fatalf("terminated %d listener backends of A, want 1", n)
			}
		}
		last = time.Now()
	}
	got := map[string]int{}
	var lastAt time.Time
	for range targets {
		n, at := wsA.nextNotice("a")
		got[n.Target]++
		lastAt = at
	}
	wsA.none("a")
	for k, c := range got {
		if c != 1 {
			t.Errorf("%s: %d notices, want 1", k, c)
		}
	}
	if len(got) != targets {
		t.Errorf("notices for %d targets, want %d", len(got), targets)
	}
	if d := lastAt.Sub(last); d > pgPoll+2*time.Second {
		t.Errorf("the last notice came %v after the last append; the safety poll is %v", d, pgPoll)
	}
	waitListeners(t, dsn, listenerOfA, 1) // reconnected
	if logs := a.logs.String(); !strings.Contains(logs, "connection lost") {
		t.Errorf("A's log does not mention the lost listener connection:\n%s", tail(logs, 2000))
	}
}

// pgTerminate terminates the backends with the given application_name in the test's
// database and returns how many.
func pgTerminate(t *testing.T, dsn, appName string) int {
	t.Helper()
	var n int
	pgQuery(t, dsn, &n, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = $1 AND datname = current_database()`, appName)
	return n
}

// waitListeners waits until n backends with the application_name are connected.
func waitListeners(t *testing.T, dsn, appName string, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var got int
		pgQuery(t, dsn, &got, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND datname = current_database()`, appName)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backends named %s, want %d", got, appName, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pgQuery(t *testing.T, dsn string, dst any, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
		t.Fatalf("%s: %v", firstLine(sql), err)
	}
}

// TestMeasurePostgresNoticeLatency measures, on real binaries, the time from the
// recordEvent HTTP response (the append is committed) to the notice frame read by a
// subscriber: on SQLite (one process), on PostgreSQL within one process, and on
// PostgreSQL across processes (recorded on B, subscribed on A: NOTIFY, then the
// listener's read). It only logs numbers.
//
//	AWARENESS_MEASURE=1 TEST_DATABASE_URL=postgres://… go test -run TestMeasurePostgresNoticeLatency -v ./e2e/
func TestMeasurePostgresNoticeLatency(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") != "1" {
		t.Skip("set AWARENESS_MEASURE=1 to measure notice latency")
	}
	dsn := pgtest.NewDurableDatabase(t)
	lite := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	a, b := startPGServer(t, dsn), startPGServer(t, dsn)
	for phase, m := range []struct {
		name            string
		writer, watched *server
	}{
		{"sqlite, one process", lite, lite},
		{"postgres, one process", a, a},
		{"postgres, across processes", b, a},
	} {
		// A watcher and targets of its own per phase: nothing pending from another.
		watcher := fmt.Sprintf("agent:main:subagent:watcher%d", phase)
		ws := dialWS(t, m.watched.wsURL)
		id := strings.ReplaceAll(m.name, " ", "")
		ws.subscribe(id, watcher)
		const warm, samples = 30, 300
		var afterResp, rtt []time.Duration
		for i := range warm + samples {
			target := fmt.Sprintf("agent:main:subagent:p%dt%d", phase, i)
			t0 := time.Now()
			m.writer.mustRecord(t, map[string]any{
				"sessionKey": target, "kind": "human_direct_message", "actorType": "human",
				"watchers": []string{watcher},
			})
			t1 := time.Now()
			n, at := ws.nextNotice(id)
			if n.Target != target {
				t.Fatalf("%s sample %d: notice for %s, want %s", m.name, i, n.Target, target)
			}
			if i >= warm {
				afterResp = append(afterResp, at.Sub(t1))
				rtt = append(rtt, t1.Sub(t0))
			}
		}
		r, q := summarize(afterResp), summarize(rtt)
		t.Logf("%-28s notice after the HTTP response: p50 %v p90 %v p99 %v max %v; recordEvent round trip p50 %v p99 %v",
			m.name, r.p50, r.p90, r.p99, r.max, q.p50, q.p99)
		ws.close()
	}
}
