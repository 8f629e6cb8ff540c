package awareness

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNoticeText_NTC1(t *testing.T) {
	t.Parallel()
	got := NoticeText("agent:main:subagent:child", 12)
	want := `Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:subagent:child" changesSince 12.`
	if diff := cmp.Diff([]byte(want), []byte(got)); diff != "" {
		t.Errorf("NoticeText bytes mismatch (-want +got):\n%s", diff)
	}
	if got, want := NoticeText("global", 0), `Session "global" changed (other actor). Reconcile before acting: session_status sessionKey "global" changesSince 0.`; got != want {
		t.Errorf("NoticeText(global, 0) = %q, want %q", got, want)
	}
}

// NTC-1: a deployment's tool name replaces session_status and nothing else; the
// default text is the seeds' byte for byte.
func TestNoticeTool_NTC1(t *testing.T) {
	t.Parallel()
	child := SessionRef{Key: "agent:main:subagent:child", AgentID: "main"}
	global := SessionRef{Key: "global", AgentID: "worker"}
	tests := []struct {
		tool   NoticeTool
		target SessionRef
		want   string
	}{
		{"", child, `Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:subagent:child" changesSince 12.`},
		{DefaultNoticeTool, child, `Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:subagent:child" changesSince 12.`},
		{"awareness_status", child, `Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: awareness_status sessionKey "agent:main:subagent:child" changesSince 12.`},
		{"mcp__awareness__session_status", child, `Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: mcp__awareness__session_status sessionKey "agent:main:subagent:child" changesSince 12.`},
		{"", global, `Session "global" changed (other actor). Reconcile before acting: session_status sessionKey "global" agentId "worker" changesSince 12.`},
		{"awareness_status", global, `Session "global" changed (other actor). Reconcile before acting: awareness_status sessionKey "global" agentId "worker" changesSince 12.`},
	}
	for _, tt := range tests {
		if diff := cmp.Diff([]byte(tt.want), []byte(tt.tool.Text(tt.target, 12))); diff != "" {
			t.Errorf("NoticeTool(%q).Text(%s) bytes mismatch (-want +got):\n%s", tt.tool, tt.target.Key, diff)
		}
		c := Cursor{Watcher: "agent:main:main", Target: tt.target, L: 12, N: 13, M: 13}
		if n, ok := tt.tool.Notice(c); !ok || n.Text != tt.want {
			t.Errorf("NoticeTool(%q).Notice(%s).Text = %q, want %q", tt.tool, tt.target.Key, n.Text, tt.want)
		}
		if tt.tool == "" {
			if got := NoticeTextOf(tt.target, 12); got != tt.want {
				t.Errorf("NoticeTextOf(%s) = %q, want the default tool's %q", tt.target.Key, got, tt.want)
			}
		}
	}
}

func TestCheckNoticeTool(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"session_status", "awareness_status", "mcp__awareness__session_status", "a", "tools.status-2", strings.Repeat("x", 64)} {
		if err := CheckNoticeTool(ok); err != nil {
			t.Errorf("CheckNoticeTool(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", " ", "session status", "a\nb", "tool\"", "été", strings.Repeat("x", 65)} {
		if err := CheckNoticeTool(bad); err == nil {
			t.Errorf("CheckNoticeTool(%q) = nil, want an error", bad)
		}
	}
}

func TestWakeFor_NTC6(t *testing.T) {
	t.Parallel()
	tests := []struct {
		watcher string
		want    bool
	}{
		{"agent:main:main", true},
		{"agent:ops:work", true},
		{"agent:main:telegram:direct:peer", true},
		{"agent:main:acp:x", true},
		{"agent:main:subagent:x", false},
		{"agent:main:subagent:x:subagent:y", false},
		{"AGENT:Main:SubAgent:X", false},
		{"global", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := WakeFor(tt.watcher); got != tt.want {
			t.Errorf("WakeFor(%q) = %v, want %v", tt.watcher, got, tt.want)
		}
	}
}

func TestNoticeOf_NTC2_NTC6(t *testing.T) {
	t.Parallel()
	if _, ok := NoticeOf(*cur(3, 3, 3)); ok {
		t.Error("NoticeOf(synced) ok = true, want false")
	}
	sub := Cursor{Watcher: "agent:main:subagent:mid", Target: testTarget, L: 1, N: 2, M: 5, OpenedAt: t0, UpdatedAt: t1}
	got, ok := NoticeOf(sub)
	if !ok {
		t.Fatal("NoticeOf(pending) ok = false")
	}
	want := Notice{
		Watcher: "agent:main:subagent:mid", Target: testTarget, ChangesSince: 1, NotifiedVersion: 2, MaterialVersion: 5,
		Text: NoticeText(testTarget.Key, 1), Wake: false, OpenedAt: t0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NoticeOf mismatch (-want +got):\n%s", diff)
	}
	if n := mustNotice(t, *cur(1, 2, 2)); !n.Wake {
		t.Error("main watcher notice has Wake = false")
	}
}

func TestNoticeID_NTC7(t *testing.T) {
	t.Parallel()
	base := mustNotice(t, *cur(2, 3, 3))
	// The same opened notice keeps its id as M and N move and across a sweep.
	for name, c := range map[string]Cursor{
		"M moved": *cur(2, 3, 7),
		"swept":   sweep(cur(2, 3, 7)).next,
	} {
		if got := mustNotice(t, c).ID(); got != base.ID() {
			t.Errorf("%s: id %q, want %q", name, got, base.ID())
		}
	}
	// A notice read back from a store that keeps only microseconds (PostgreSQL) or
	// milliseconds is the same notice as the one published from memory.
	fine := base
	fine.OpenedAt = t0.Add(123456789 * time.Nanosecond)
	for _, prec := range []time.Duration{time.Microsecond, time.Millisecond} {
		stored := fine
		stored.OpenedAt = fine.OpenedAt.Truncate(prec)
		if stored.ID() != fine.ID() {
			t.Errorf("id differs after truncating OpenedAt to %v: %q vs %q", prec, stored.ID(), fine.ID())
		}
	}
	// Different notices get different ids.
	others := map[string]Notice{}
	n := base
	n.ChangesSince = 3
	others["acked and reopened (L moved)"] = n
	n = base
	n.OpenedAt = t1
	others["pair recreated (new opening time)"] = n
	n = base
	n.Watcher = "agent:ops:work"
	others["other watcher"] = n
	n = base
	n.Target.AgentID = "ops"
	others["other target agent"] = n
	n = base
	n.Target.Key = "agent:main:subagent:other"
	others["other target"] = n
	for name, o := range others {
		if o.ID() == base.ID() {
			t.Errorf("%s: id %q equals the original's", name, o.ID())
		}
	}
	if got := ack(cur(2, 3, 6)).next; mustNotice(t, got).ID() == base.ID() {
		t.Error("follow-up after ack has the id of the acked notice")
	}
}
