package ssepush

import (
	"context"
	"testing"

	"github.com/awareness/awareness/internal/substream"
)

// The queue hands values out in order, counts only live ones against its limit,
// reports the end after what was queued before it, and Stop ends the subscription
// (at once when Start comes after it).
func TestStreamQueueLimitEndStop(t *testing.T) {
	s := New("7", 2, nil)
	if substream.From(substream.With(context.Background(), s)) != s || s.LastEventID() != "7" {
		t.Fatal("the stream does not travel in its context")
	}
	var got []any
	if !s.Adopt(func(v any) string { got = append(got, v); return "id" }) || s.Adopt(func(any) string { return "" }) {
		t.Fatal("Adopt: want the first to adopt, the second refused")
	}
	for i := range 3 {
		if !s.Push(i, true) {
			t.Fatalf("replay value %d refused", i)
		}
	}
	if !s.Push(3, false) || !s.Push(4, false) || s.Push(5, false) {
		t.Fatal("want two live values taken, the third refused")
	}
	dropped := substream.End{Dropped: true}
	s.End(dropped)
	select {
	case <-s.Wake():
	default:
		t.Fatal("no wake token")
	}
	for {
		id, ok, ended, reason := s.Next()
		if !ok {
			if !ended || !reason.Dropped {
				t.Fatalf("end: ended %v reason %v", ended, reason)
			}
			break
		}
		if id != "id" {
			t.Fatalf("id %q", id)
		}
	}
	if len(got) != 5 {
		t.Fatalf("delivered %v, want 0..4", got)
	}
	unsubscribed := 0
	s.Stop()
	s.Start(func() { unsubscribed++ })
	if unsubscribed != 1 || !s.Push(9, false) {
		t.Fatal("after Stop: Start must unsubscribe at once and Push discard")
	}
	s2 := New("", 1, nil)
	s2.Adopt(func(any) string { return "" })
	s2.Start(func() { unsubscribed++ })
	s2.Stop()
	if unsubscribed != 2 {
		t.Fatal("Stop did not unsubscribe")
	}
}
