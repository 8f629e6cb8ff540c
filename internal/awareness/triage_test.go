package awareness_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// The session tree: a session's parent is the registry's parentSessionKey, else the
// agent-qualified actor of its child_spawned event (WAT-2); a person's spawn names none;
// an agent principal sees its own agent's sessions, another agent's is FORBIDDEN (CLT-1).
func TestSessionTreeParents_WAT2_CLT1(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	st := newMemStore()
	svc := awareness.NewService(awareness.Config{Store: st})
	t.Cleanup(func() {
		svc.Hub().Close()
		st.Close()
	})
	spawn := func(child, parent string) {
		t.Helper()
		in := awareness.RecordInput{SessionKey: child, Kind: awareness.ChildSpawned, ActorType: awareness.ActorAgent, ActorID: &parent, Watchers: []string{parent}}
		if _, err := svc.RecordEvent(bg, in); err != nil {
			t.Fatal(err)
		}
	}
	spawn("agent:main:subagent:a", "agent:main:main")
	spawn("agent:main:subagent:b", "agent:main:subagent:a")
	spawn("agent:ops:subagent:o", "agent:ops:main")
	if _, err := svc.RecordEvent(bg, awareness.RecordInput{SessionKey: "agent:main:subagent:h", Kind: awareness.ChildSpawned, ActorType: awareness.ActorHuman, ActorID: ptr("telegram:ana")}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RecordEvent(bg, awareness.RecordInput{SessionKey: "agent:main:main", Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman}); err != nil {
		t.Fatal(err)
	}
	// The registry names another parent for b: it wins over the event.
	if _, err := svc.UpsertSession(bg, awareness.SessionInput{SessionKey: "agent:main:subagent:b", Entry: awareness.SessionEntry{ParentSessionKey: ptr("agent:main:main")}}); err != nil {
		t.Fatal(err)
	}
	parents := func(tree awareness.SessionTree) map[string]string {
		out := map[string]string{}
		for _, n := range tree.Nodes {
			out[n.Session.Ref.Key] = ""
			if n.Parent != nil {
				out[n.Session.Ref.Key] = n.Parent.Key
			}
		}
		return out
	}
	tree, err := svc.SessionTree(bg, ptr("main"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"agent:main:main": "", "agent:main:subagent:a": "agent:main:main", "agent:main:subagent:b": "agent:main:main", "agent:main:subagent:h": ""}
	if diff := cmp.Diff(want, parents(tree)); diff != "" || tree.Truncated {
		t.Errorf("agent main's tree (-want +got):\n%s (truncated %v)", diff, tree.Truncated)
	}
	ops := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "ops"})
	tree, err = svc.SessionTree(ops, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"agent:ops:subagent:o": "agent:ops:main"}, parents(tree)); diff != "" {
		t.Errorf("ops's own tree (-want +got):\n%s", diff)
	}
	if _, err := svc.SessionTree(ops, ptr("main"), nil); awareness.ErrorCode(err) != awareness.EFORBIDDEN {
		t.Errorf("ops reads main's tree: %v, want FORBIDDEN", err)
	}
	if _, err := svc.SessionTree(bg, nil, ptr(0)); awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("activeMinutes 0: %v, want INVALID_ARGUMENT", err)
	}
}

// An agent principal's acknowledgement history never shows a record about a target
// its agent may not watch (a grant withdrawn since), even of its own watcher; the
// principal and client of the context are recorded (CLT-1, NTC-3).
func TestAckHistoryVisibility_CLT1(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	st := newMemStore()
	granted := awareness.NewService(awareness.Config{Store: st, Grants: awareness.Grants{Watch: map[string][]string{"ops": {"dev"}}}})
	t.Cleanup(func() {
		granted.Hub().Close()
		st.Close()
	})
	ops := awareness.WithClient(awareness.WithPrincipal(bg, awareness.Principal{AgentID: "ops", Name: "gw-ops"}),
		awareness.ClientInfo{Transport: "mcp", Name: "claude-code/2.1"})
	for _, target := range []string{"agent:ops:subagent:a", "agent:dev:subagent:b"} {
		if _, err := granted.Watch(ops, "agent:ops:main", target, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := granted.RecordEvent(bg, awareness.RecordInput{SessionKey: target, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := granted.AckNotices(ops, "agent:ops:main", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	page, err := granted.AckHistory(ops, nil, nil, nil, nil, 10, nil)
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("with the grant: %+v, %v; want 2 records", page.Records, err)
	}
	want := awareness.AckClient{Principal: "gw-ops", Role: "agent:ops", Transport: "mcp", Client: "claude-code/2.1"}
	if page.Records[0].By != want {
		t.Errorf("recorded client %+v, want %+v", page.Records[0].By, want)
	}
	withdrawn := awareness.NewService(awareness.Config{Store: st})
	defer withdrawn.Hub().Close()
	for _, watcher := range []*string{nil, ptr("agent:ops:main")} {
		page, err := withdrawn.AckHistory(ops, watcher, nil, nil, nil, 10, nil)
		if err != nil || len(page.Records) != 1 || page.Records[0].Target.AgentID != "ops" {
			t.Errorf("grant withdrawn, watcher %v: %+v, %v; want ops's own target only", watcher, page.Records, err)
		}
	}
	if page, err := withdrawn.AckHistory(ops, nil, ptr("agent:dev:subagent:b"), nil, nil, 10, nil); awareness.ErrorCode(err) != awareness.EFORBIDDEN {
		t.Errorf("grant withdrawn, the other agent's target: %+v, %v; want FORBIDDEN", page.Records, err)
	}
	if _, err := withdrawn.AckHistory(ops, nil, nil, nil, nil, awareness.MaxAckHistoryLimit+1, nil); awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("first above the limit: %v, want INVALID_ARGUMENT", err)
	}
}

// A client name is kept as one line of valid UTF-8 within MaxClientNameBytes, never
// refused: control and format characters become one space, invalid bytes go, and a
// long name is cut at a rune boundary.
func TestCleanClientName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("ü", 100) // 200 bytes
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"  curl/8.5.0  ", "curl/8.5.0"},
		{"a\r\n\tb\x00c\u200bd\u2028e", "a b c d e"},
		{"bad\xff\xfeutf8", "badutf8"},
		{long, strings.Repeat("ü", 64)},
		{strings.Repeat("x", 127) + "ü", strings.Repeat("x", 127)},
	} {
		got := awareness.CleanClientName(tc.in)
		if got != tc.want || len(got) > awareness.MaxClientNameBytes || !utf8.ValidString(got) {
			t.Errorf("CleanClientName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
