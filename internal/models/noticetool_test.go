package models

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// ntTool is the deployment's reconcile tool of the NTC-1 notice-tool tests.
const ntTool awareness.NoticeTool = "awareness_status"

// checkToolText fails unless n's text is NTC-1's text naming ntTool, byte for byte.
func checkToolText(t *testing.T, path string, n awareness.Notice) {
	t.Helper()
	want := ntTool.Text(n.Target, n.ChangesSince)
	if n.Text != want || strings.Contains(n.Text, awareness.DefaultNoticeTool) {
		t.Errorf("%s: text %q, want %q", path, n.Text, want)
	}
}

// Every path by which a store hands out a notice names the configured tool (NTC-1):
// the notice an append opens, the pending list, an acknowledgement's closed item and
// follow-up, an unwatch's closed item, a reset's, and the startup sweep.
func testNoticeToolEveryPath(t *testing.T, open func(t *testing.T) *Store) {
	ctx := context.Background()
	store := open(t)
	hub := awareness.NewHub()
	t.Cleanup(hub.Close)
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub})
	watcher, child, global := "agent:main:main", "agent:main:subagent:c", "global"
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	items, _, err := svc.SubscribeNotices(sctx, &watcher, true)
	if err != nil {
		t.Fatal(err)
	}
	next := func(path string) awareness.Notice {
		t.Helper()
		select {
		case n := <-items:
			checkToolText(t, path, n)
			return n
		case <-time.After(lsWait):
			t.Fatalf("%s: no item within %v", path, lsWait)
		}
		return awareness.Notice{}
	}
	main := "main"
	human := func(key string) {
		t.Helper()
		if _, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: key, AgentID: &main, Kind: awareness.HumanDirectMessage,
			ActorType: awareness.ActorHuman, Watchers: []string{watcher}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Watch(ctx, watcher, global, &main); err != nil {
		t.Fatal(err)
	}
	human(child)
	opened := next("append: opened")
	human(global)
	next("append: opened on a bare key")
	human(child) // M moves: the ack below opens a follow-up
	pending, err := svc.PendingNotices(ctx, watcher)
	if err != nil || len(pending) != 2 {
		t.Fatalf("PendingNotices = %v, %v; want 2 notices", pending, err)
	}
	for _, n := range pending {
		checkToolText(t, "PendingNotices", n)
	}
	follow, err := svc.AckNotices(ctx, watcher, nil, nil, []awareness.NoticeRef{{Target: child, NotifiedVersion: opened.NotifiedVersion}})
	if err != nil || len(follow) != 1 {
		t.Fatalf("AckNotices = %v, %v; want 1 follow-up", follow, err)
	}
	checkToolText(t, "AckNotices: follow-up", follow[0])
	if n := next("ack: closed"); !n.Closed {
		t.Errorf("after the ack: %+v, want the closed item", n)
	}
	if n := next("ack: follow-up"); n.Closed || n.ChangesSince != opened.NotifiedVersion {
		t.Errorf("after the closed item: %+v, want the follow-up from %d", n, opened.NotifiedVersion)
	}
	if ok, err := svc.Unwatch(ctx, watcher, global, &main); err != nil || !ok {
		t.Fatalf("Unwatch = %v, %v", ok, err)
	}
	if n := next("unwatch: closed"); !n.Closed || n.Target.Key != global {
		t.Errorf("after unwatch: %+v, want the closed item of %s", n, global)
	}
	if _, err := svc.ResetSession(ctx, watcher, nil); err != nil {
		t.Fatal(err)
	}
	if n := next("reset: closed"); !n.Closed || n.Target.Key != child {
		t.Errorf("after reset: %+v, want the closed item of %s", n, child)
	}
}

func TestNoticeTool_EveryPath_SQLite_NTC1(t *testing.T) {
	testNoticeToolEveryPath(t, func(t *testing.T) *Store {
		s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "a.db"), Options{NoticeTool: ntTool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func openPostgresTool(t *testing.T, dsn string) *Store {
	s, err := OpenPostgres(context.Background(), dsn, Options{NoticeTool: ntTool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestNoticeTool_EveryPath_Postgres_NTC1(t *testing.T) {
	testNoticeToolEveryPath(t, func(t *testing.T) *Store { return openPostgresTool(t, pgtest.NewDatabase(t)) })
}

// Across processes (PostgreSQL): a notice another process opened reaches this one's
// subscribers through the listener's read, and the closed item of another process's
// acknowledgement through its hint, which carries no text; both name the tool.
func TestNoticeTool_Listener_Postgres_NTC1(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	a, b := openPostgresTool(t, dsn), openPostgresTool(t, dsn)
	hub := awareness.NewHub()
	t.Cleanup(hub.Close)
	svcA := awareness.NewService(awareness.Config{Store: a, Hub: hub})
	svcB := awareness.NewService(awareness.Config{Store: b})
	lis, err := NewListener(ListenerConfig{Store: a, Hub: hub, Poll: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lis.Start(ctx)
	t.Cleanup(lis.Stop)
	for deadline := time.Now().Add(lsWait); lis.Connects() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the listener did not connect")
		}
	}
	w := lsWatcher
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	items, _, err := svcA.SubscribeNotices(sctx, &w, true)
	if err != nil {
		t.Fatal(err)
	}
	next := func(path string) awareness.Notice {
		t.Helper()
		select {
		case n := <-items:
			checkToolText(t, path, n)
			return n
		case <-time.After(lsWait):
			t.Fatalf("%s: no item within %v", path, lsWait)
		}
		return awareness.Notice{}
	}
	target := "agent:main:subagent:x"
	if _, err := svcB.RecordEvent(ctx, awareness.RecordInput{SessionKey: target, Kind: awareness.HumanDirectMessage,
		ActorType: awareness.ActorHuman, Watchers: []string{lsWatcher}}); err != nil {
		t.Fatal(err)
	}
	opened := next("listener: opened on B")
	if _, err := svcB.AckNotices(ctx, lsWatcher, nil, nil, []awareness.NoticeRef{{Target: target, NotifiedVersion: opened.NotifiedVersion}}); err != nil {
		t.Fatal(err)
	}
	if n := next("listener: closed on B (hint)"); !n.Closed {
		t.Errorf("after B's ack: %+v, want the closed item", n)
	}
}
