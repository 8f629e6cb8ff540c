package awareness

import (
	"testing"
	"time"
)

// TestNoticeTallyWindowAndScope: the tally counts per minute and target, reads only
// the asked window and scope, and forgets minutes older than a day.
func TestNoticeTallyWindowAndScope(t *testing.T) {
	var tl noticeTally
	t0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	a := SessionRef{AgentID: "main", Key: "agent:main:subagent:a"}
	b := SessionRef{AgentID: "ops", Key: "agent:ops:main"}
	tl.add(t0, []Notice{{Target: a}, {Target: b}}, false)
	tl.add(t0.Add(10*time.Second), []Notice{{Target: a}}, true)
	tl.add(t0.Add(time.Minute), []Notice{{Target: a}}, false)
	q := ActivityQuery{Since: t0.Truncate(time.Minute), Until: t0.Truncate(time.Minute).Add(2 * time.Minute)}
	got := tl.read(q)
	if len(got) != 2 || got[0].Opened != 2 || got[0].Acknowledged != 1 || got[1].Opened != 1 || !got[0].Minute.Equal(t0.Truncate(time.Minute)) {
		t.Errorf("every target: %+v", got)
	}
	q.AgentID = "ops"
	if got := tl.read(q); len(got) != 1 || got[0].Opened != 1 || got[0].Acknowledged != 0 {
		t.Errorf("agent ops: %+v", got)
	}
	q.AgentID, q.Session = "", &a
	if got := tl.read(q); len(got) != 2 || got[0].Opened != 1 || got[0].Acknowledged != 1 {
		t.Errorf("session a: %+v", got)
	}
	q.Since = q.Since.Add(time.Minute)
	if got := tl.read(q); len(got) != 1 {
		t.Errorf("window from the second minute: %+v", got)
	}
	// A day later the old minutes are gone.
	tl.add(t0.Add(MaxActivityMinutes*time.Minute+time.Minute), []Notice{{Target: a}}, false)
	if n := len(tl.counts); n != 1 {
		t.Errorf("%d entries after a day, want only the new one", n)
	}
}
