package models

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/hubtest"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// TestMeasureAppendThroughput measures Store.Append (one op per transaction, a
// notifying event with one watcher, so that notices open and, on PostgreSQL, a hint is
// sent) with 1 and 16 writers, each on its own session, for SQLite and PostgreSQL
// (the server's own synchronous_commit; also without the hint), and the latency of a notice from one store's
// commit to another store's hub through the Listener. It only logs numbers.
//
//	AWARENESS_MEASURE=1 TEST_DATABASE_URL=postgres://… go test -run TestMeasure -v ./internal/models/
func TestMeasureAppendThroughput(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") != "1" {
		t.Skip("set AWARENESS_MEASURE=1 to measure append throughput")
	}
	const span = 3 * time.Second
	type backend struct {
		name string
		open func(t *testing.T) *Store
	}
	backends := []backend{
		{"sqlite", func(t *testing.T) *Store { return mustOpenAt(t, filepath.Join(t.TempDir(), "m.db")) }},
	}
	if os.Getenv(pgtest.EnvVar) != "" {
		backends = append(backends,
			backend{"postgres", func(t *testing.T) *Store { return mustOpenPostgresAt(t, pgtest.NewDurableDatabase(t)) }},
			// The same without the NOTIFY hint, to show what the hint costs.
			backend{"pg-nohint", func(t *testing.T) *Store {
				s := mustOpenPostgresAt(t, pgtest.NewDurableDatabase(t))
				s.d.notify = false
				return s
			}})
	}
	for _, be := range backends {
		for _, writers := range []int{1, 16} {
			s := be.open(t)
			var n atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), span)
			var wg sync.WaitGroup
			start := time.Now()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("agent:main:subagent:w%d", w)
					for ctx.Err() == nil {
						op := appendOp(t, humanIn(key, "agent:main:main"), time.Now())
						if err := s.Append(ctx, []*awareness.AppendOp{op}); err != nil {
							if ctx.Err() == nil {
								t.Errorf("append: %v", err)
							}
							return
						}
						n.Add(1)
					}
				}()
			}
			wg.Wait()
			cancel()
			el := time.Since(start)
			t.Logf("%-9s %2d writers: %6.0f appends/s (%d in %v)", be.name, writers, float64(n.Load())/el.Seconds(), n.Load(), el.Round(time.Millisecond))
		}
	}

	pgtest.AdminURL(t)
	dsn := pgtest.NewDurableDatabase(t)
	a, b := mustOpenPostgresAt(t, dsn), mustOpenPostgresAt(t, dsn)
	hub := awareness.NewHub()
	defer hub.Close()
	lis, err := NewListener(ListenerConfig{Store: a, Hub: hub, Poll: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lis.Start(context.Background())
	defer lis.Stop()
	for lis.Connects() == 0 {
		time.Sleep(time.Millisecond)
	}
	sub := hubtest.Notices(hub, "agent:main:main")
	defer sub.Unsubscribe()
	var lat []time.Duration
	for i := range 300 {
		op := appendOp(t, humanIn(fmt.Sprintf("agent:main:subagent:l%d", i), "agent:main:main"), time.Now())
		if err := b.Append(context.Background(), []*awareness.AppendOp{op}); err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		select {
		case <-sub.C:
			lat = append(lat, time.Since(committed))
		case <-time.After(10 * time.Second):
			t.Fatal("no notice")
		}
	}
	slices.Sort(lat)
	t.Logf("postgres notice latency, Append returned on store B -> hub of store A (listener): p50 %v p90 %v p99 %v max %v",
		lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)*99/100], lat[len(lat)-1])
}
