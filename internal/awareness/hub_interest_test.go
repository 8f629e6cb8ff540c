package awareness

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// interestLog records the hub's Interest calls in order.
type interestLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *interestLog) NoticeInterest(w string, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("notices %q %v", w, on))
}

func (l *interestLog) EventInterest(ref *SessionRef, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := "<all>"
	if ref != nil {
		s = ref.AgentID + "/" + ref.Key
	}
	l.calls = append(l.calls, fmt.Sprintf("events %s %v", s, on))
}

func (l *interestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

// The hub announces a filter's first subscription and its last one's end, once per
// filter whatever the number of subscribers, replays the live filters to an Interest
// installed late, and announces the interest before SubscribeNotices returns (so before
// the service reads pending notices).
func TestHub_Interest(t *testing.T) {
	h := NewHub()
	defer h.Close()
	early := hubNotices(h, "agent:main:main")
	var log interestLog
	h.SetInterest(&log)
	if diff := cmp.Diff([]string{`notices "agent:main:main" true`}, log.take()); diff != "" {
		t.Fatalf("replay (-want +got):\n%s", diff)
	}
	second := hubNotices(h, "agent:main:main")
	dash := hubNotices(h, "")
	ev := hubEvents(h, &SessionRef{AgentID: "main", Key: "agent:main:x"})
	anyAgent := hubEvents(h, &SessionRef{Key: "agent:main:y"})
	allEv := hubEvents(h, nil)
	want := []string{`notices "" true`, "events main/agent:main:x true", "events /agent:main:y true", "events <all> true"}
	if diff := cmp.Diff(want, log.take()); diff != "" {
		t.Fatalf("subscribe (-want +got):\n%s", diff)
	}
	early.Unsubscribe()
	if c := log.take(); len(c) != 0 {
		t.Fatalf("a watcher still subscribed was announced gone: %v", c)
	}
	second.Unsubscribe()
	second.Unsubscribe()
	dash.Unsubscribe()
	ev.Unsubscribe()
	anyAgent.Unsubscribe()
	want = []string{`notices "agent:main:main" false`, `notices "" false`, "events main/agent:main:x false", "events /agent:main:y false"}
	if diff := cmp.Diff(want, log.take()); diff != "" {
		t.Fatalf("unsubscribe (-want +got):\n%s", diff)
	}
	h.Close()
	if diff := cmp.Diff([]string{"events <all> false"}, log.take()); diff != "" {
		t.Fatalf("close (-want +got):\n%s", diff)
	}
	_ = allEv
}

// A subscriber dropped for falling behind ends its filter's interest too.
func TestHub_InterestEndsWithSlowSubscriber(t *testing.T) {
	h := NewHub()
	defer h.Close()
	var log interestLog
	h.SetInterest(&log)
	s := hubNotices(h, "agent:main:main")
	for i := range SubscriberBuffer + 1 {
		h.PublishNotices(Notice{Watcher: "agent:main:main", NotifiedVersion: int64(i + 1)})
	}
	if !IsSlowSubscriber(s.Err()) {
		t.Fatalf("subscriber not dropped: %v", s.Err())
	}
	want := []string{`notices "agent:main:main" true`, `notices "agent:main:main" false`}
	if diff := cmp.Diff(want, log.take()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
