package awareness_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// syncLog is an Interest and an InterestSync that logs its calls, and the reads of
// pending notices of pendingLog, in one order.
type syncLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *syncLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *syncLog) NoticeInterest(w string, on bool)          { l.add(fmt.Sprintf("notices %q %v", w, on)) }
func (l *syncLog) EventInterest(*awareness.SessionRef, bool) {}
func (l *syncLog) SyncInterest(context.Context) error {
	l.add("sync")
	return nil
}

type pendingLog struct {
	*memStore
	log *syncLog
}

func (s pendingLog) Pending(ctx context.Context, watcher string) ([]awareness.Notice, error) {
	s.log.add("read pending " + watcher)
	return s.memStore.Pending(ctx, watcher)
}

// SubscribeNotices announces the interest, waits for it to take effect (a bus
// server's round trip: InterestSync), then reads the pending notices: listen, then
// read.
func TestService_SubscribeSyncsInterestBeforeReading(t *testing.T) {
	var log syncLog
	hub := awareness.NewHub()
	defer hub.Close()
	hub.SetInterest(&log)
	svc := awareness.NewService(awareness.Config{Store: pendingLog{newMemStore(), &log}, Hub: hub})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := "agent:main:main"
	if _, _, err := svc.SubscribeNotices(ctx, &w, false); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	want := []string{`notices "agent:main:main" true`, "sync", "read pending agent:main:main"}
	if diff := cmp.Diff(want, log.calls); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
