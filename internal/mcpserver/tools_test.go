package mcpserver_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/mcpserver"
)

func toolsOf(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	out := map[string]*mcp.Tool{}
	for tl, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out[tl.Name] = tl
	}
	return out
}

// Every tool has an input and an output schema, every annotation set, its toolset in
// _meta, and a description that says when to call it (CLT-3).
func TestToolsDescribeThemselves_CLT3(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	tools := toolsOf(t, e.connect(t, adminToken, nil))
	want := []string{"ack_notices", "pending_notices", "record_event", "session_status", "session_unwatch", "session_watch", "sessions_list", "wait_for_notices"}
	var got []string
	for name, tl := range tools {
		got = append(got, name)
		if tl.OutputSchema == nil || tl.InputSchema == nil {
			t.Errorf("%s: input schema %v, output schema %v", name, tl.InputSchema != nil, tl.OutputSchema != nil)
		}
		a := tl.Annotations
		if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil || *a.OpenWorldHint || a.Title == "" {
			t.Errorf("%s: annotations %+v, want every hint set and a closed world", name, a)
		}
		if !strings.HasPrefix(tl.Description, "Call this ") {
			t.Errorf("%s: the description does not say when to call it: %q", name, tl.Description)
		}
		if set, _ := tl.Meta[mcpserver.MetaToolset].(string); !slices.Contains(mcpserver.AllToolsets, set) {
			t.Errorf("%s: toolset %q", name, set)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("tools %v, want %v", got, want)
	}
	for _, name := range []string{"session_status", "sessions_list", "pending_notices", "wait_for_notices"} {
		if !tools[name].Annotations.ReadOnlyHint {
			t.Errorf("%s is not read-only", name)
		}
	}
	for _, name := range []string{"ack_notices", "record_event", "session_watch", "session_unwatch"} {
		if tools[name].Annotations.ReadOnlyHint {
			t.Errorf("%s is marked read-only", name)
		}
	}
}

// --mcp-read-only wins over the toolsets; toolsets select tools and the resource.
func TestToolsetsAndReadOnly(t *testing.T) {
	for _, c := range []struct {
		name      string
		cfg       mcpserver.Config
		tools     []string
		resources bool
	}{
		{"read-only wins over write", mcpserver.Config{Toolsets: mcpserver.AllToolsets, ReadOnly: true},
			[]string{"pending_notices", "session_status", "sessions_list", "wait_for_notices"}, true},
		{"sessions only", mcpserver.Config{Toolsets: []string{"sessions"}}, []string{"session_status", "sessions_list"}, false},
		{"write only, read-only", mcpserver.Config{Toolsets: []string{"write"}, ReadOnly: true}, nil, false},
		{"notices and write", mcpserver.Config{Toolsets: []string{"notices", "write"}},
			[]string{"ack_notices", "pending_notices", "record_event", "session_unwatch", "session_watch", "wait_for_notices"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.cfg)
			cs := e.connect(t, adminToken, nil)
			var got []string
			for name := range toolsOf(t, cs) {
				got = append(got, name)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.tools) {
				t.Errorf("tools %v, want %v", got, c.tools)
			}
			if !slices.Equal(sortedCopy(e.mcp.Tools()), got) {
				t.Errorf("Server.Tools %v", e.mcp.Tools())
			}
			rt, err := cs.ListResourceTemplates(context.Background(), nil)
			if listed := err == nil && len(rt.ResourceTemplates) == 1; listed != c.resources {
				t.Errorf("resource template listed: %v, want %v", listed, c.resources)
			}
			// A tool not served is refused, not run.
			r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "record_event", Arguments: map[string]any{
				"sessionKey": "agent:main:x", "kind": "goal_changed", "actorType": "agent"}})
			if !slices.Contains(c.tools, "record_event") && err == nil && !r.IsError {
				t.Error("record_event ran although it is not served")
			}
		})
	}
	if _, err := mcpserver.ParseToolsets("sessions,bogus"); err == nil {
		t.Error("ParseToolsets accepted an unknown toolset")
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// Harnesses pass only structuredContent to the model (issue 28): the sentences of the
// text content (history gap, truncation) are in its summary too, and a call that names
// a watcher carries the watcher's pending notices with their exact texts (CLT-4).
func TestAgentTextInStructuredContent_CLT4(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	ctx := context.Background()
	const w, target = "agent:main:main", "agent:main:subagent:c1"
	e.watch(t, w, target)
	for range 5 {
		e.human(t, target)
	}
	// Prune the first three events: changesSince 0 then has a history gap.
	if _, err := awareness.NewPruner(awareness.PrunerConfig{Store: e.store, Policy: awareness.RetentionPolicy{MaxRows: 2}}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	cs := e.connect(t, adminToken, nil)
	r := call(t, cs, "session_status", map[string]any{"sessionKey": target, "changesSince": 0, "limit": 1, "watcher": w})
	var st struct {
		Summary        string
		StateVersion   int
		WatcherNotices struct {
			Watcher string
			Pending int
			Notices []struct {
				Target          string
				NotifiedVersion int
				Text            string
			}
		}
	}
	structured(t, r, &st)
	for _, want := range []string{"History gap: changes before #4 were pruned; refresh the whole session state", "More changes follow: call session_status again with changesSince 4."} {
		if !strings.Contains(st.Summary, want) {
			t.Errorf("summary %q lacks %q", st.Summary, want)
		}
	}
	if !strings.HasPrefix(text(r), st.Summary) {
		t.Errorf("the text content %q does not start with the summary", text(r))
	}
	wantText := awareness.NoticeText(target, 0)
	if d := st.WatcherNotices; d.Watcher != w || d.Pending != 1 || len(d.Notices) != 1 || d.Notices[0].Text != wantText || d.Notices[0].NotifiedVersion != 1 {
		t.Errorf("watcherNotices %+v, want the one notice %q", d, wantText)
	}
	if !strings.Contains(text(r), wantText) {
		t.Errorf("the text content lacks the notice: %q", text(r))
	}
	// Without a watcher there is no digest.
	var bare map[string]any
	structured(t, call(t, cs, "session_status", map[string]any{"sessionKey": target}), &bare)
	if _, ok := bare["watcherNotices"]; ok {
		t.Errorf("a call naming no watcher has a digest: %v", bare)
	}
	// The digest is bounded: 12 pending notices, 10 spelled out.
	for i := range 11 {
		other := "agent:main:subagent:d" + string(rune('a'+i))
		e.watch(t, w, other)
		e.human(t, other)
	}
	structured(t, call(t, cs, "sessions_list", map[string]any{"watcher": w, "first": 1}), &st)
	if st.WatcherNotices.Pending != 12 || len(st.WatcherNotices.Notices) != 10 {
		t.Errorf("digest of 12 pending: pending %d, %d spelled out", st.WatcherNotices.Pending, len(st.WatcherNotices.Notices))
	}
	// Every other tool's result, checked against its output schema by call.
	n := st.WatcherNotices.Notices[0]
	call(t, cs, "pending_notices", map[string]any{"watcher": w})
	call(t, cs, "ack_notices", map[string]any{"watcher": w, "notices": []any{map[string]any{"target": n.Target, "notifiedVersion": n.NotifiedVersion}}})
	call(t, cs, "session_watch", map[string]any{"watcher": w, "target": "agent:main:subagent:new"})
	call(t, cs, "session_watch", map[string]any{"watcher": target, "target": target})
	call(t, cs, "session_unwatch", map[string]any{"watcher": w, "target": "agent:main:subagent:new"})
	call(t, cs, "record_event", map[string]any{"sessionKey": target, "kind": "run_failed", "actorType": "system", "outcome": "timeout",
		"watchers": []string{"global"}, "watcher": w})
	call(t, cs, "wait_for_notices", map[string]any{"watcher": w, "timeoutMs": 0})
}

// wait_for_notices answers at once with pending notices, else when one opens, else at
// its timeout; a watcher the token may not act for is refused (CLT-1).
func TestWaitForNotices_CLT4(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	const w, target = "agent:ops:main", "agent:ops:subagent:c"
	e.watch(t, w, target)
	cs := e.connect(t, opsToken, nil)

	t0 := time.Now()
	r := call(t, cs, "wait_for_notices", map[string]any{"watcher": w, "timeoutMs": 300})
	var out struct {
		PendingNotices []struct{ Text string }
		TimedOut       bool
		Summary        string
	}
	structured(t, r, &out)
	if !out.TimedOut || len(out.PendingNotices) != 0 || time.Since(t0) < 300*time.Millisecond {
		t.Errorf("an empty wait: %+v after %v, want timedOut after 300ms", out, time.Since(t0))
	}

	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		r, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_notices", Arguments: map[string]any{"watcher": w}})
		done <- r
	}()
	waitFor(t, "the wait to hold a hub subscription", func() bool { n, _ := e.svc.Hub().Subscribers(); return n == 1 })
	e.human(t, target)
	select {
	case r := <-done:
		structured(t, r, &out)
		if out.TimedOut || len(out.PendingNotices) != 1 || out.PendingNotices[0].Text != awareness.NoticeText(target, 0) {
			t.Errorf("a wait woken by a notice: %+v", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait_for_notices did not answer within 10 s of a notice opening")
	}
	waitFor(t, "the wait's hub subscription to end", func() bool { n, _ := e.svc.Hub().Subscribers(); return n == 0 })

	// Pending now: at once.
	t0 = time.Now()
	structured(t, call(t, cs, "wait_for_notices", map[string]any{"watcher": w, "timeoutMs": 30000}), &out)
	if len(out.PendingNotices) != 1 || time.Since(t0) > 5*time.Second {
		t.Errorf("a wait with a notice pending: %+v after %v", out, time.Since(t0))
	}
	for _, bad := range []map[string]any{
		{"watcher": "agent:main:main"},
		{"watcher": w, "timeoutMs": 30001},
		{"watcher": w, "timeoutMs": -1},
	} {
		r := call(t, cs, "wait_for_notices", bad)
		if !r.IsError {
			t.Errorf("wait_for_notices %v was not refused", bad)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ack_notices answers per named notice as acknowledgeNotices does (NTC-3), and says
// so in its summary.
func TestAckNoticesAnswersPerNotice_NTC3(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	const w, target = "agent:main:main", "agent:main:subagent:a"
	e.watch(t, w, target)
	e.human(t, target)
	e.human(t, target) // M moves past N: the acknowledgement opens a follow-up
	cs := e.connect(t, adminToken, nil)
	ack := func(nv int) (out struct {
		AcknowledgeNotices []struct {
			Outcome  string
			FollowUp *struct {
				ChangesSince int
				Text         string
			}
			Pending *struct{ NotifiedVersion int }
		}
		Summary string
	}) {
		structured(t, call(t, cs, "ack_notices", map[string]any{"watcher": w, "notices": []any{map[string]any{"target": target, "notifiedVersion": nv}}}), &out)
		if len(out.AcknowledgeNotices) != 1 {
			t.Fatalf("ack %d: %+v", nv, out)
		}
		return out
	}
	first := ack(1)
	if a := first.AcknowledgeNotices[0]; a.Outcome != "acknowledged" || a.FollowUp == nil || a.FollowUp.ChangesSince != 1 ||
		!strings.Contains(first.Summary, "a follow-up notice opened: "+awareness.NoticeText(target, 1)) {
		t.Errorf("first ack: %+v", first)
	}
	again := ack(1)
	if a := again.AcknowledgeNotices[0]; a.Outcome != "alreadyAcknowledged" || a.Pending == nil || a.Pending.NotifiedVersion != 2 {
		t.Errorf("the same ack again: %+v", again)
	}
	if a := ack(3).AcknowledgeNotices[0]; a.Outcome != "superseded" {
		t.Errorf("an ack of a version never notified: %+v", a)
	}
	r := call(t, cs, "ack_notices", map[string]any{"watcher": w, "notices": []any{}})
	if !r.IsError || !strings.HasPrefix(text(r), "INVALID_ARGUMENT: ") {
		t.Errorf("an empty ack: %s", text(r))
	}
}

// LIF-2, LIF-3 over MCP: a pending notice carries its generations; ack_notices naming
// the watcher's earlier generation is refused with STALE_GENERATION and acknowledges
// nothing; session_watch takes a selection of kinds and refuses one that cannot open a
// notice, writing nothing.
func TestLifecycleOverMCP_LIF2_LIF3(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	const w, target = "agent:main:main", "agent:main:subagent:a"
	cs := e.connect(t, adminToken, nil)
	r := call(t, cs, "session_watch", map[string]any{"watcher": w, "target": target, "kinds": []any{"run_completed"}})
	if !r.IsError || !strings.HasPrefix(text(r), "INVALID_ARGUMENT: ") {
		t.Errorf("a watch selecting a log-only kind: %s", text(r))
	}
	if cs, _ := e.svc.Watches(context.Background(), nil, nil, nil); len(cs) != 0 {
		t.Errorf("a refused watch wrote %+v", cs)
	}
	var watched struct{ Watched bool }
	structured(t, call(t, cs, "session_watch", map[string]any{"watcher": w, "target": target, "kinds": []any{"human_direct_message", "reset"}}), &watched)
	if !watched.Watched {
		t.Fatalf("session_watch with kinds: %+v", watched)
	}
	e.human(t, target)
	if _, err := e.svc.ResetSession(context.Background(), w, nil); err != nil {
		t.Fatal(err)
	}
	e.watch(t, w, target)
	e.human(t, target)
	pending, err := e.svc.PendingNotices(context.Background(), w)
	if err != nil || len(pending) != 1 || pending[0].WatcherGeneration != 2 {
		t.Fatalf("pending after the watcher's reset: %+v %v", pending, err)
	}
	r = call(t, cs, "ack_notices", map[string]any{"watcher": w, "notices": []any{map[string]any{
		"target": target, "notifiedVersion": pending[0].NotifiedVersion, "watcherGeneration": 1}}})
	if !r.IsError || !strings.HasPrefix(text(r), "STALE_GENERATION: ") {
		t.Errorf("an ack naming the earlier generation: %s", text(r))
	}
	if again, _ := e.svc.PendingNotices(context.Background(), w); len(again) != 1 || again[0] != pending[0] {
		t.Errorf("a refused ack acknowledged: %+v", again)
	}
}
