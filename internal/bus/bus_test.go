package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/awareness/awareness/internal/bus"
	"github.com/awareness/awareness/internal/bus/natstest"
	"github.com/awareness/awareness/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }

const wait = 10 * time.Second

func open(t *testing.T, url string) *bus.Bus {
	t.Helper()
	b, err := bus.Open(bus.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// gap waits for b's next gap.
func gap(t *testing.T, b *bus.Bus) {
	t.Helper()
	select {
	case <-b.Gaps():
	case <-time.After(wait):
		t.Fatal("no gap reported")
	}
}

func receive(t *testing.T, b *bus.Bus) string {
	t.Helper()
	select {
	case m := <-b.Messages():
		return string(m)
	case <-time.After(wait):
		t.Fatal("no message")
		return ""
	}
}

// none checks that nothing is waiting for b: a's publications before the call and
// b's own round trip are through the server, whose messages to b precede its answer.
func none(t *testing.T, a, b *bus.Bus) {
	t.Helper()
	ctx := context.Background()
	if err := a.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-b.Messages():
		t.Fatalf("unexpected message %q", m)
	default:
	}
}

// A message reaches the subscribers of its subject once Sync returned, and only them;
// never its own publisher (NoEcho); wildcards match; Unsubscribe stops delivery.
func TestBus_SubjectsOfInterestOnly(t *testing.T) {
	url := natstest.URL(t)
	ctx := context.Background()
	a, b := open(t, url), open(t, url)
	gap(t, a)
	gap(t, b)
	prefix := "bustest." + strings.ReplaceAll(t.Name(), "/", "_") + time.Now().Format("150405.000000000")
	if err := b.Subscribe(prefix + ".w.one"); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(prefix + ".w.one"); err != nil { // twice: one subscription
		t.Fatal(err)
	}
	if err := a.Subscribe(prefix + ".w.one"); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(prefix+".w.two", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(prefix+".w.one", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b); got != "1" {
		t.Fatalf("b got %q, want the message of its subject only", got)
	}
	none(t, a, b)
	none(t, b, a) // a subscribed too, but never gets its own message

	if err := b.Subscribe(prefix + ".w.>"); err != nil {
		t.Fatal(err)
	}
	if err := b.Unsubscribe(prefix + ".w.one"); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(prefix+".w.three", []byte("3")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b); got != "3" {
		t.Fatalf("b got %q through the wildcard, want 3", got)
	}
	if err := b.Unsubscribe(prefix + ".w.>"); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(prefix+".w.one", []byte("4")); err != nil {
		t.Fatal(err)
	}
	none(t, a, b)
	if st := b.Stats(); st.Subjects != 0 || st.InMsgs != 2 {
		t.Fatalf("b's stats %+v, want no subject and 2 messages in", st)
	}
}

// A server that goes away and comes back: Sync fails at once while it is down, the
// reconnect is reported as a gap, the subscriptions hold, and a message published by
// a during the outage arrives after the reconnect (nats.go keeps it) or is covered by
// the gap's rescan; either way a message published after the gap arrives.
func TestBus_ServerRestart_GapAndResubscribe(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	a, b := open(t, srv.URL), open(t, srv.URL)
	gap(t, a)
	gap(t, b)
	if err := b.Subscribe("x.w.one"); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	deadline := time.Now().Add(wait)
	for b.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("b did not notice the server's end")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Sync(ctx, true); !errors.Is(err, bus.ErrNotConnected) {
		t.Fatalf("Sync while down: %v, want ErrNotConnected", err)
	}
	srv.Start()
	gap(t, b)
	gap(t, a)
	if err := b.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish("x.w.one", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b); got != "after" {
		t.Fatalf("after the restart b got %q", got)
	}
}

// A server that is not there at Open is no error: the connection comes when the
// server does, reported as a gap.
func TestBus_OpenBeforeServer(t *testing.T) {
	srv := natstest.Start(t)
	srv.Stop()
	b := open(t, srv.URL)
	if b.Connected() {
		t.Fatal("connected to a stopped server")
	}
	srv.Start()
	gap(t, b)
	if !b.Connected() {
		t.Fatal("not connected after the gap")
	}
}

func TestCheckURLAndRedact(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"nats://127.0.0.1:4222", true},
		{"nats://a:4222,nats://b:4222", true},
		{"tls://nats.example.com:4222", true},
		{"nats://user:secret@h:4222", true},
		{"", false},
		{"http://h:4222", false},
		{"nats://", false},
		{"nats://h:4222/path", false},
		{"127.0.0.1:4222", false},
	} {
		err := bus.CheckURL(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("CheckURL(%q) = %v, want ok %v", tc.url, err, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("CheckURL(%q) leaks the password: %v", tc.url, err)
		}
	}
	if got := bus.Redact("nats://user:secret@h:4222,nats://tok@g:4222"); strings.Contains(got, "secret") || strings.Contains(got, "tok@") {
		t.Errorf("Redact left a secret: %s", got)
	}
}
