// Command gateway is the reference gateway: a small program that plays a gateway with
// a manager session, two sub-agents and a simulated person, against a running
// awareness service, using package client end to end:
//
//	spawn → watch → a person types → notice → drain into the "prompt" → reconcile → exact ack
//
// It prints the prompts it builds and exits 0 when every notice was consumed and
// acknowledged exactly, 1 otherwise. Run it against a service:
//
//	awareness serve &
//	go run ./examples/gateway --url http://127.0.0.1:8080/query
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/awareness/awareness/client"
)

const (
	manager    = "agent:main:main"
	researcher = "agent:main:subagent:researcher"
	writer     = "agent:main:subagent:writer"
	person     = "user:alice"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/query", "the service's GraphQL endpoint")
	token := flag.String("token", os.Getenv("AWARENESS_TOKEN"), "bearer token ($AWARENESS_TOKEN)")
	outbox := flag.String("outbox", "", "the gateway's outbox file (default: a temporary directory)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	verbose := flag.Bool("v", false, "log the client's work to stderr")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, os.Stdout, *url, *token, *outbox, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// gateway holds the client parts a gateway keeps for its lifetime.
type gateway struct {
	c   *client.Client
	rec *client.Recorder
	w   *client.Watcher
	out io.Writer
}

func run(ctx context.Context, out io.Writer, url, token, outbox string, verbose bool) error {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	opts := []client.Option{client.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	c, err := client.New(url, opts...)
	if err != nil {
		return err
	}
	if outbox == "" {
		dir, err := os.MkdirTemp("", "gateway-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		outbox = filepath.Join(dir, "outbox")
	}
	// The Recorder: every event goes through the durable outbox; Record never waits
	// for the service (SIG-7).
	rec, err := c.OpenRecorder(outbox, client.RecorderOptions{})
	if err != nil {
		return err
	}
	defer rec.Close()
	g := &gateway{c: c, rec: rec, out: out}

	// 1. The manager spawns two sub-agents: child_spawned with the manager as
	// producer-passed watcher seeds its cursors (WAT-2).
	for _, child := range []string{researcher, writer} {
		if err := g.record(ctx, client.Event{SessionKey: child, Kind: "child_spawned", ActorType: "agent", ActorID: manager, Watchers: []string{manager}}); err != nil {
			return err
		}
	}
	if err := rec.Flush(ctx); err != nil {
		return fmt.Errorf("deliver the spawns: %w", err)
	}
	// 2. The writer sent the researcher a message with watch:true: the gateway
	// registers the watch on the session that received it (WAT-3).
	if r, err := c.WatchTarget(ctx, writer, client.Target{SessionKey: researcher}); err != nil || !r.Watched {
		return fmt.Errorf("watch: %v %s", err, r.Reason)
	}
	fmt.Fprintf(out, "spawned %s and %s; %s watches %s\n", researcher, writer, writer, researcher)

	// 3. One Watcher follows both watcher sessions' notices.
	g.w, err = c.Watch([]string{manager, writer}, client.WatcherOptions{})
	if err != nil {
		return err
	}
	defer g.w.Close()
	if err := g.w.WaitConnected(ctx); err != nil {
		return err
	}

	// 4. The person types into the writer directly.
	if err := g.personTypes(ctx, writer); err != nil {
		return err
	}

	// 5. The manager is a main session: its notice wakes it (NTC-6). Its turn drains
	// the notice into the prompt; while the turn runs, the person types into the
	// researcher. The exact Ack covers the writer only: the researcher's notice,
	// opened after the Drain, stays pending for the next turn (NTC-3).
	if err := g.turn(ctx, manager, 1, func() error { return g.personTypes(ctx, researcher) }); err != nil {
		return err
	}
	// 6. The researcher's notice wakes the manager again.
	if err := g.turn(ctx, manager, 1, nil); err != nil {
		return err
	}
	// 7. The writer is a sub-agent: its notice (wake: false) waits for its next turn.
	if err := g.turn(ctx, writer, 1, nil); err != nil {
		return err
	}

	// 8. Nothing is left pending anywhere.
	for _, watcher := range []string{manager, writer} {
		pending, err := c.PendingNotices(ctx, watcher)
		if err != nil {
			return err
		}
		if len(pending) != 0 {
			return fmt.Errorf("%s still has %d pending notices", watcher, len(pending))
		}
	}
	fmt.Fprintln(out, "done: every notice was drained, reconciled and acknowledged exactly")
	return nil
}

func (g *gateway) record(ctx context.Context, ev client.Event) error {
	if err := g.rec.Record(ctx, ev); err != nil {
		// A real gateway logs and goes on with its turn (SIG-7); the example stops.
		return fmt.Errorf("record %s on %s: %w", ev.Kind, ev.SessionKey, err)
	}
	return nil
}

func (g *gateway) personTypes(ctx context.Context, session string) error {
	fmt.Fprintf(g.out, "person %s types into %s\n", person, session)
	return g.record(ctx, client.Event{SessionKey: session, Kind: "human_direct_message", ActorType: "human", ActorID: person, Channel: "webchat"})
}

// turn waits for want notices of session, builds its prompt (the notices' text and
// the reconciled changes), runs during (the turn's work) and acknowledges exactly
// what the prompt consumed.
func (g *gateway) turn(ctx context.Context, session string, want int, during func() error) error {
	var drained []client.Notice
	for len(drained) < want {
		drained = append(drained, g.w.Drain(session)...)
		if len(drained) >= want {
			break
		}
		select {
		case <-g.w.NotifyOf(session):
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %d notices, got %d: %w", session, want, len(drained), ctx.Err())
		}
	}
	var prompt strings.Builder
	fmt.Fprintf(&prompt, "--- prompt of %s ---\n", session)
	for _, n := range drained {
		fmt.Fprintf(&prompt, "[notice wake=%v] %s\n", n.Wake, n.Text)
		r, err := g.c.Reconcile(ctx, n.TargetRef(), n.ChangesSince)
		if err != nil {
			// The turn fails: what it drained goes back for the next turn (CLT-5).
			g.w.Release(drained...)
			return fmt.Errorf("reconcile %s: %w", n.Target, err)
		}
		if r.FullRefresh {
			fmt.Fprintf(&prompt, "  %s needs a full refresh: %s\n", n.Target, r.Reason)
			continue
		}
		for _, e := range r.Events {
			fmt.Fprintf(&prompt, "  %s #%d %s: %s\n", n.Target, e.Sequence, e.Kind, e.Summary)
		}
	}
	fmt.Fprint(g.out, prompt.String())
	if during != nil {
		if err := during(); err != nil {
			return err
		}
		if err := g.rec.Flush(ctx); err != nil {
			return err
		}
	}
	// Ack names exactly what the prompt consumed; the service answers per notice. A
	// failed Ack (the service is down) is sent again by the Watcher (ErrAckDeferred).
	acks, err := g.w.Ack(ctx, drained)
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	followUps := 0
	for _, a := range acks {
		if a.Outcome != client.AckAcknowledged {
			return fmt.Errorf("%s@%d: %s, not acknowledged", a.Target, a.NotifiedVersion, a.Outcome)
		}
		if a.FollowUp != nil {
			followUps++
		}
	}
	fmt.Fprintf(g.out, "%s acknowledged %d notices exactly; %d follow-ups\n", session, len(acks), followUps)
	if followUps > 0 {
		return errors.New("unexpected follow-up notices")
	}
	return nil
}
