package awareness_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

func ptr[T any](v T) *T { return &v }

// Every Service method checks the caller's principal after resolving its keys: an
// agent principal acts on its own agent's sessions only; unfiltered listings and
// streams are narrowed to its agent (TestUnfilteredStreamsNarrowToOwnAgent_CLT1), any
// other call without an agent is admin-only; a refused call writes
// nothing (ERR-2). No principal (no auth file) allows everything.
func TestAuthorizeAgentPrincipal_ERR1_ERR2(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	st := newMemStore()
	svc := awareness.NewService(awareness.Config{Store: st})
	t.Cleanup(func() {
		svc.Hub().Close()
		st.Close()
	})
	// Seed as the service itself (no principal): one session of each agent.
	for _, k := range []string{"agent:ops:main", "agent:main:subagent:x"} {
		if _, err := svc.RecordEvent(bg, awareness.RecordInput{SessionKey: k, Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent}); err != nil {
			t.Fatal(err)
		}
	}
	ops := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "ops", Name: "gw"})
	admin := awareness.WithPrincipal(bg, awareness.Principal{Admin: true})
	sessions := `{"agent:main:imported":{"sessionId":"s1","updatedAt":1767225600000}}`
	opsSessions := `{"agent:ops:imported":{"sessionId":"s1","updatedAt":1767225600000}}`

	calls := []struct {
		name      string
		call      func(ctx context.Context) error
		forbidden bool // for the ops principal
	}{
		{"record own", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent})
			return err
		}, false},
		{"record other agent", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:main:subagent:x", Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent})
			return err
		}, true},
		{"record bare key of another agent", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "global", Kind: awareness.Compacted, ActorType: awareness.ActorSystem})
			return err
		}, true},
		{"record with another agent's watcher", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:subagent:c", Kind: awareness.ChildSpawned, ActorType: awareness.ActorAgent, Watchers: []string{"agent:main:main"}})
			return err
		}, true},
		{"status own", func(ctx context.Context) error {
			_, err := svc.SessionStatus(ctx, "agent:ops:main", nil, ptr(int64(0)), nil)
			return err
		}, false},
		{"status other", func(ctx context.Context) error {
			_, err := svc.SessionStatus(ctx, "agent:main:subagent:x", nil, nil, nil)
			return err
		}, true},
		{"list other agent", func(ctx context.Context) error {
			_, err := svc.SessionsList(ctx, awareness.SessionFilter{AgentID: ptr("main")}, 10, nil)
			return err
		}, true},
		{"watch as own", func(ctx context.Context) error {
			_, err := svc.Watch(ctx, "agent:ops:main", "agent:ops:subagent:x", nil)
			return err
		}, false},
		{"watch another agent's session (no grant)", func(ctx context.Context) error {
			_, err := svc.Watch(ctx, "agent:ops:main", "agent:main:subagent:x", nil)
			return err
		}, true},
		{"record crediting another agent's session", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent, ActorID: ptr("agent:main:main")})
			return err
		}, true},
		{"record an agent actor that looks like another agent's session", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorAgent, ActorID: ptr("agent:\u043eps:main")})
			return err
		}, true},
		{"record an agent actor named by a bare key", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent, ActorID: ptr("cron:nightly")})
			return err
		}, true},
		{"record an agent actor of its own", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent, ActorID: ptr(" Agent:OPS:subagent:x ")})
			return err
		}, false},
		{"record a system actor with a free name", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.Compacted, ActorType: awareness.ActorSystem, ActorID: ptr("scheduler")})
			return err
		}, false},
		{"record crediting a person", func(ctx context.Context) error {
			_, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:ops:main", Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, ActorID: ptr("telegram:12345")})
			return err
		}, false},
		{"watch as other", func(ctx context.Context) error {
			_, err := svc.Watch(ctx, "agent:main:main", "agent:ops:main", nil)
			return err
		}, true},
		{"unwatch as other", func(ctx context.Context) error {
			_, err := svc.Unwatch(ctx, "agent:main:main", "agent:ops:main", nil)
			return err
		}, true},
		{"ack as other", func(ctx context.Context) error {
			_, err := svc.AckNotices(ctx, "agent:main:main", nil, nil, nil)
			return err
		}, true},
		{"pending as other", func(ctx context.Context) error {
			_, err := svc.PendingNotices(ctx, "agent:main:main")
			return err
		}, true},
		{"pending own", func(ctx context.Context) error {
			_, err := svc.PendingNotices(ctx, "agent:ops:main")
			return err
		}, false},
		{"every cursor", func(ctx context.Context) error {
			_, err := svc.Watches(ctx, nil, nil, nil)
			return err
		}, true},
		{"cursors on another agent's target", func(ctx context.Context) error {
			_, err := svc.Watches(ctx, nil, ptr("agent:main:subagent:x"), nil)
			return err
		}, true},
		{"reset other", func(ctx context.Context) error {
			_, err := svc.ResetSession(ctx, "agent:main:main", nil)
			return err
		}, true},
		{"delete other", func(ctx context.Context) error {
			_, err := svc.DeleteSession(ctx, "agent:main:subagent:x", nil)
			return err
		}, true},
		{"notices of every watcher (narrowed to its own)", func(ctx context.Context) error {
			_, _, err := svc.SubscribeNotices(ctx, nil, false)
			return err
		}, false},
		{"notices of another watcher", func(ctx context.Context) error {
			_, _, err := svc.SubscribeNotices(ctx, ptr("agent:main:main"), false)
			return err
		}, true},
		{"events of every session (narrowed to its own)", func(ctx context.Context) error {
			_, _, err := svc.SubscribeEvents(ctx, nil, nil)
			return err
		}, false},
		{"events of another agent's session", func(ctx context.Context) error {
			_, _, err := svc.SubscribeEvents(ctx, ptr("agent:main:subagent:x"), nil)
			return err
		}, true},
		{"import for another agent", func(ctx context.Context) error {
			_, err := svc.ImportSessions(ctx, "main", []byte(sessions))
			return err
		}, true},
		{"import own", func(ctx context.Context) error {
			_, err := svc.ImportSessions(ctx, "ops", []byte(opsSessions))
			return err
		}, false},
		{"upsert other", func(ctx context.Context) error {
			_, err := svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "agent:main:main"})
			return err
		}, true},
		{"memory flush other", func(ctx context.Context) error {
			_, err := svc.RecordMemoryFlush(ctx, "agent:main:main", nil)
			return err
		}, true},
		{"compaction policy other", func(ctx context.Context) error {
			_, err := svc.CompactionPolicy(ctx, awareness.CompactionQuery{SessionKey: "agent:main:main", ContextWindow: 1000})
			return err
		}, true},
		{"upstream links of another agent", func(ctx context.Context) error {
			_, err := svc.UpstreamLinks(ctx, ptr("main"))
			return err
		}, true},
		{"own prompt for another agent", func(ctx context.Context) error {
			_, err := svc.RecordOwnPrompt(ctx, "agent:main:main", nil, "hello")
			return err
		}, true},
	}
	for _, c := range calls {
		if !c.forbidden {
			continue
		}
		before, err := st.Stats(bg)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ops)
		err = c.call(cctx)
		cancel()
		if got := awareness.ErrorCode(err); got != awareness.EFORBIDDEN {
			t.Errorf("%s as agent:ops = %v, want FORBIDDEN", c.name, err)
		}
		after, err := st.Stats(bg)
		if err != nil {
			t.Fatal(err)
		}
		if before.Sessions != after.Sessions || before.Events != after.Events || before.Cursors != after.Cursors || before.PendingNotices != after.PendingNotices {
			t.Errorf("%s: a refused call wrote: stats %+v → %+v", c.name, before, after)
		}
	}
	for _, c := range calls {
		for _, who := range []struct {
			name string
			ctx  context.Context
			only bool // only calls allowed for ops
		}{{"agent:ops", ops, true}, {"admin", admin, false}, {"no principal", bg, false}} {
			if who.only && c.forbidden {
				continue
			}
			cctx, cancel := context.WithCancel(who.ctx)
			err := c.call(cctx)
			cancel()
			if code := awareness.ErrorCode(err); code == awareness.EFORBIDDEN || code == awareness.EUNAUTHENTICATED {
				t.Errorf("%s as %s = %v, want allowed", c.name, who.name, err)
			}
		}
	}

	// Listings without an agent filter are narrowed to the principal's agent.
	page, err := svc.SessionsList(ops, awareness.SessionFilter{}, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Sessions) == 0 {
		t.Fatal("ops sees no session of its own")
	}
	for _, s := range page.Sessions {
		if s.Ref.AgentID != "ops" {
			t.Errorf("agent:ops lists %+v", s.Ref)
		}
	}
	all, err := svc.SessionsList(admin, awareness.SessionFilter{}, 100, nil)
	if err != nil || len(all.Sessions) <= len(page.Sessions) {
		t.Errorf("admin lists %d sessions (err %v), ops %d", len(all.Sessions), err, len(page.Sessions))
	}
}

// stubCatalog is a catalog whose every thread exists and is empty.
type stubCatalog struct{ id string }

func (c stubCatalog) ID() string { return c.id }
func (c stubCatalog) Resolve(_ context.Context, threadID string) (awareness.CatalogThread, error) {
	return awareness.CatalogThread{ThreadID: threadID, Source: c.id + "/" + threadID}, nil
}
func (c stubCatalog) Scan(_ context.Context, req awareness.ScanRequest) (awareness.ScanResult, error) {
	return awareness.ScanResult{Next: req.Marker}, nil
}

// Cross-agent watching and adoption are explicit grants (CLT-1): without one an agent
// may not watch another agent's sessions (and learns nothing of them: FORBIDDEN comes
// before any read), with one it may, in the granted direction only; a catalog named
// in the grants is adoptable by its agents only. Bare-key cursor listings are the
// resolved agent's only.
func TestGrants_CLT1(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	newSvc := func(g awareness.Grants) *awareness.Service {
		st := newMemStore()
		svc := awareness.NewService(awareness.Config{Store: st, Grants: g, Catalogs: []awareness.Catalog{stubCatalog{"open"}, stubCatalog{"opsonly"}}})
		t.Cleanup(func() {
			svc.Hub().Close()
			st.Close()
		})
		return svc
	}
	dev := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "dev"})
	ops := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "ops"})
	admin := awareness.WithPrincipal(bg, awareness.Principal{Admin: true})
	grants := awareness.Grants{Watch: map[string][]string{"dev": {"ops"}}, Catalogs: map[string][]string{"opsonly": {"ops"}}}
	for _, tc := range []struct {
		name    string
		grants  awareness.Grants
		ctx     context.Context
		watcher string
		target  string
		allowed bool
	}{
		{"no grant: dev watches ops", awareness.Grants{}, dev, "agent:dev:main", "agent:ops:main", false},
		{"no grant: dev watches a never-written ops key", awareness.Grants{}, dev, "agent:dev:main", "agent:ops:nothing-here", false},
		{"no grant: dev watches ops's bare global", awareness.Grants{}, dev, "agent:dev:main", "global@ops", false},
		{"no grant: admin", awareness.Grants{}, admin, "agent:dev:main", "agent:ops:main", true},
		{"grant: dev watches ops", grants, dev, "agent:dev:main", "agent:ops:main", true},
		{"grant: not the other way", grants, ops, "agent:ops:main", "agent:dev:main", false},
		{"grant: dev watches its own", grants, dev, "agent:dev:main", "agent:dev:subagent:x", true},
	} {
		svc := newSvc(tc.grants)
		target, agent := tc.target, (*string)(nil)
		if k, a, ok := strings.Cut(tc.target, "@"); ok {
			target, agent = k, &a
		}
		res, err := svc.Watch(tc.ctx, tc.watcher, target, agent)
		if tc.allowed && (err != nil || !res.Watched) {
			t.Errorf("%s: %+v, %v; want watched", tc.name, res, err)
		}
		if !tc.allowed {
			if awareness.ErrorCode(err) != awareness.EFORBIDDEN {
				t.Errorf("%s: %+v, %v; want FORBIDDEN", tc.name, res, err)
			}
			if n, _ := svc.Watches(admin, nil, nil, nil); len(n) != 0 {
				t.Errorf("%s: a refused watch left cursors %+v", tc.name, n)
			}
		}
	}

	svc := newSvc(grants)
	for _, tc := range []struct {
		ctx     context.Context
		key     string
		catalog string
		allowed bool
	}{
		{dev, "agent:dev:main", "open", true},
		{dev, "agent:dev:main", "opsonly", false},
		{ops, "agent:ops:main", "opsonly", true},
		{admin, "agent:dev:x", "opsonly", true},
	} {
		_, err := svc.AdoptSession(tc.ctx, tc.key, nil, tc.catalog, "t1")
		if got := awareness.ErrorCode(err) != awareness.EFORBIDDEN; got != tc.allowed {
			t.Errorf("adopt %s from %s: %v, want allowed=%v", tc.key, tc.catalog, err, tc.allowed)
		}
	}

	// Bare targets: the cursor of ops's watcher on ops's `global` is not main's.
	svc = newSvc(awareness.Grants{})
	main := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "main"})
	if _, err := svc.Watch(bg, "agent:ops:main", "global", ptr("ops")); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Watch(bg, "agent:main:main", "global", nil); err != nil {
		t.Fatal(err)
	}
	for _, who := range []context.Context{main, admin} {
		cs, err := svc.Watches(who, nil, ptr("global"), nil)
		if err != nil || len(cs) != 1 || cs[0].Watcher != "agent:main:main" {
			t.Errorf("watches(target: global) = %+v, %v; want main's cursor only", cs, err)
		}
	}
	if _, err := svc.Watches(main, nil, ptr("agent:ops:main"), nil); awareness.ErrorCode(err) != awareness.EFORBIDDEN {
		t.Errorf("main lists the watchers of an ops session: %v, want FORBIDDEN", err)
	}
}

// A cursor made under a grant shows nothing once the grant is withdrawn (the service
// restarted with another auth file): no pending notice, no cursor, nothing streamed.
func TestWithdrawnGrantHidesCursors_CLT1(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	st := newMemStore()
	t.Cleanup(func() { st.Close() })
	dev := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "dev"})
	granted := awareness.NewService(awareness.Config{Store: st, Grants: awareness.Grants{Watch: map[string][]string{"dev": {"ops"}}}})
	defer granted.Hub().Close()
	for _, target := range []string{"agent:ops:main", "agent:dev:subagent:x"} {
		if res, err := granted.Watch(dev, "agent:dev:main", target, nil); err != nil || !res.Watched {
			t.Fatalf("watch %s: %+v %v", target, res, err)
		}
		if _, err := granted.RecordEvent(bg, awareness.RecordInput{SessionKey: target, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
			t.Fatal(err)
		}
	}
	if ns, err := granted.PendingNotices(dev, "agent:dev:main"); err != nil || len(ns) != 2 {
		t.Fatalf("with the grant: %d notices, %v; want 2", len(ns), err)
	}

	svc := awareness.NewService(awareness.Config{Store: st})
	defer svc.Hub().Close()
	ns, err := svc.PendingNotices(dev, "agent:dev:main")
	if err != nil || len(ns) != 1 || ns[0].Target.AgentID != "dev" {
		t.Errorf("grant withdrawn: pending %+v, %v; want dev's notice only", ns, err)
	}
	cs, err := svc.Watches(dev, ptr("agent:dev:main"), nil, nil)
	if err != nil || len(cs) != 1 || cs[0].Target.AgentID != "dev" {
		t.Errorf("grant withdrawn: cursors %+v, %v; want dev's only", cs, err)
	}
	ctx, cancel := context.WithCancel(dev)
	defer cancel()
	ch, _, err := svc.SubscribeNotices(ctx, ptr("agent:dev:main"), false)
	if err != nil {
		t.Fatal(err)
	}
	if n := <-ch; n.Target.AgentID != "dev" {
		t.Errorf("grant withdrawn: streamed %+v", n)
	}
	follow, err := svc.AckNotices(dev, "agent:dev:main", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range follow {
		if n.Target.AgentID != "dev" {
			t.Errorf("grant withdrawn: ack follow-up %+v", n)
		}
	}
	// A new notice on dev's target: the next item streamed is it, not ops's pending one
	// (pending items would have come first).
	if _, err := svc.RecordEvent(bg, awareness.RecordInput{SessionKey: "agent:dev:subagent:x", Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
		t.Fatal(err)
	}
	if n := <-ch; n.Target.AgentID != "dev" {
		t.Errorf("grant withdrawn: streamed %+v", n)
	}
}

// An agent principal's unfiltered streams are narrowed to its own agent, as listings
// are (CLT-1): staleNotices without a watcher carries the pending and new notices of
// its agent's watchers only (a granted target included), stateEvents without a session
// the events of its agent's sessions only. An admin's carry everything.
func TestUnfilteredStreamsNarrowToOwnAgent_CLT1(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	st := newMemStore()
	svc := awareness.NewService(awareness.Config{Store: st, Grants: awareness.Grants{Watch: map[string][]string{"ops": {"dev"}}}})
	t.Cleanup(func() {
		svc.Hub().Close()
		st.Close()
	})
	human := func(key string) {
		t.Helper()
		if _, err := svc.RecordEvent(bg, awareness.RecordInput{SessionKey: key, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range [][2]string{{"agent:ops:main", "agent:ops:subagent:a"}, {"agent:ops:main", "agent:dev:subagent:b"}, {"agent:dev:main", "agent:dev:subagent:b"}} {
		if _, err := svc.Watch(bg, w[0], w[1], nil); err != nil {
			t.Fatal(err)
		}
	}
	human("agent:ops:subagent:a") // ops:main pending on its own target
	human("agent:dev:subagent:b") // ops:main (granted) and dev:main pending
	svc.Flush()

	ops, cancel := context.WithCancel(awareness.WithPrincipal(bg, awareness.Principal{AgentID: "ops"}))
	defer cancel()
	notices, _, err := svc.SubscribeNotices(ops, nil, false)
	if err != nil {
		t.Fatalf("ops: staleNotices without a watcher: %v", err)
	}
	events, _, err := svc.SubscribeEvents(ops, nil, nil)
	if err != nil {
		t.Fatalf("ops: stateEvents without a session: %v", err)
	}
	admin, cancelAdmin := context.WithCancel(awareness.WithPrincipal(bg, awareness.Principal{Admin: true}))
	defer cancelAdmin()
	all, _, err := svc.SubscribeNotices(admin, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	next := func(c <-chan awareness.Notice) awareness.Notice {
		t.Helper()
		select {
		case n := <-c:
			return n
		case <-time.After(5 * time.Second):
			t.Fatal("no notice within 5s")
			return awareness.Notice{}
		}
	}
	got := map[string]bool{}
	for range 2 {
		n := next(notices)
		got[n.Watcher+" "+n.Target.Key] = true
	}
	want := map[string]bool{"agent:ops:main agent:ops:subagent:a": true, "agent:ops:main agent:dev:subagent:b": true}
	if !maps.Equal(got, want) {
		t.Errorf("ops's pending notices = %v, want %v", got, want)
	}
	adminGot := map[string]bool{}
	for range 3 {
		n := next(all)
		adminGot[n.Watcher] = true
	}
	if !adminGot["agent:dev:main"] {
		t.Errorf("admin's stream misses dev's notice: %v", adminGot)
	}

	// Live: dev's own session changes (its watcher's notice is not ops's), then ops's.
	if _, err := svc.Watch(bg, "agent:dev:main", "agent:dev:subagent:c", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Watch(bg, "agent:ops:main", "agent:ops:subagent:d", nil); err != nil {
		t.Fatal(err)
	}
	human("agent:dev:subagent:c")
	human("agent:ops:subagent:d")
	if n := next(notices); n.Watcher != "agent:ops:main" || n.Target.Key != "agent:ops:subagent:d" {
		t.Errorf("ops's next live notice = %s about %s, want agent:ops:main about agent:ops:subagent:d", n.Watcher, n.Target.Key)
	}
	// dev's event came first: ops's stream skips it, its first event is its own.
	select {
	case e := <-events:
		if e.Session.Key != "agent:ops:subagent:d" {
			t.Errorf("ops's first live event is of %s (agent %s), want agent:ops:subagent:d", e.Session.Key, e.Session.AgentID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
}
