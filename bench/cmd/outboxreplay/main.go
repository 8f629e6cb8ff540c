// Command outboxreplay measures how fast a gateway's outbox is replayed once the
// service is back (CLT-2, SIG-7): -events events of -sessions sessions are spooled by
// a client.Recorder while the service is down, then the real binary starts (SQLite,
// the default limits, --auth-file with one agent token) and a Recorder opened on the
// outbox delivers it. The replay time runs from OpenRecorder to the end of Flush;
// every event is checked in the log exactly once and in order per session.
//
// Each run measures the Recorder as it is (recordEvents batches of up to 200) and, as
// the baselines in the same run: the floor, the same events posted straight as
// recordEvents batches of 200 by DefaultSenders goroutines, one session each at a
// time, without an outbox (what the service costs); and the Recorder with BatchSize 1
// (one event per request, as it delivered before batches). They are interleaved,
// -runs times; it prints one line per measurement and the ratios of the medians, with
// the load average.
//
//	go build -o /tmp/awareness . && go run ./bench/cmd/outboxreplay -bin /tmp/awareness
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/awareness/awareness/bench/internal/proc"
	"github.com/awareness/awareness/client"
)

const token = "outboxreplay-0123456789abcdef0123456789abcdef"

// floor stands for the measurement without a Recorder.
const floor = -1

type config struct {
	bin              string
	events, sessions int
	runs             int
	baseline         bool
	args             string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "./awareness", "the awareness binary")
	flag.IntVar(&c.events, "events", 10_000, "events spooled per measurement")
	flag.IntVar(&c.sessions, "sessions", 8, "sessions the events are spread over")
	flag.IntVar(&c.runs, "runs", 3, "measurements of each kind, interleaved")
	flag.BoolVar(&c.baseline, "baseline", true, "also measure BatchSize 1, the baseline")
	flag.StringVar(&c.args, "args", "", "extra serve flags, space-separated (e.g. \"--rate-limit 0\")")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "outboxreplay:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	kinds := []int{client.MaxBatch, floor}
	if c.baseline {
		kinds = append(kinds, 1)
	}
	times := map[int][]time.Duration{}
	fmt.Printf("outboxreplay: %d events over %d sessions, SQLite, default limits, an agent token; load %s\n",
		c.events, c.sessions, loadavg())
	for r := range c.runs {
		for _, batch := range kinds {
			d, err := measure(c, batch)
			if err != nil {
				return fmt.Errorf("run %d, batch %d: %w", r, batch, err)
			}
			times[batch] = append(times[batch], d)
			name := fmt.Sprintf("recorder, batch %3d", batch)
			if batch == floor {
				name = "floor, no outbox   "
			}
			fmt.Printf("run %d  %s  replay %8.3fs  %7.0f events/s  load %s\n", r, name, d.Seconds(), float64(c.events)/d.Seconds(), loadavg())
		}
	}
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	fmt.Printf("median replay with batches of %d: %.3fs; the floor %.3fs (%.2f× of it)", client.MaxBatch, med(times[client.MaxBatch]).Seconds(),
		med(times[floor]).Seconds(), float64(med(times[client.MaxBatch]))/float64(med(times[floor])))
	if c.baseline {
		fmt.Printf("; one event per request: %.3fs; ratio %.1f×", med(times[1]).Seconds(),
			float64(med(times[1]))/float64(med(times[client.MaxBatch])))
	}
	fmt.Printf(" (load %s)\n", loadavg())
	return nil
}

// measure spools c.events with the service down, starts it and times the replay.
func measure(c config, batch int) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "outboxreplay-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	outbox := filepath.Join(dir, "outbox")
	keys, err := spool(outbox, c.events, c.sessions)
	if err != nil {
		return 0, err
	}
	auth := filepath.Join(dir, "auth.json")
	doc := `{"tokens":[{"name":"gateway","role":"agent:main","token":"` + token + `"}]}`
	if err := os.WriteFile(auth, []byte(doc), 0o600); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := proc.Start(ctx, proc.Config{
		Bin: c.bin, HTTP: &http.Client{Timeout: 5 * time.Second}, ReadyWithin: time.Minute, Poll: 20 * time.Millisecond,
		Args: func(addr string) []string {
			return append([]string{"serve", "--addr", addr, "--db", filepath.Join(dir, "awareness.db"), "--auth-file", auth}, strings.Fields(c.args)...)
		},
	})
	if err != nil {
		return 0, err
	}
	defer srv.Stop(10 * time.Second)
	cl, err := client.New(srv.Base+"/query", client.WithToken(token))
	if err != nil {
		return 0, err
	}
	if batch == floor {
		d, err := post(ctx, cl, keys, c.events/c.sessions)
		if err != nil {
			return 0, err
		}
		return d, check(ctx, cl, keys, c.events/c.sessions)
	}
	t0 := time.Now()
	rec, err := cl.OpenRecorder(outbox, client.RecorderOptions{BatchSize: batch})
	if err != nil {
		return 0, err
	}
	ferr := rec.Flush(ctx)
	d := time.Since(t0)
	if cerr := rec.Close(); ferr == nil {
		ferr = cerr
	}
	if ferr == nil {
		ferr = rec.Err()
	}
	if ferr != nil {
		return 0, ferr
	}
	return d, check(ctx, cl, keys, c.events/c.sessions)
}

// spool records events per session into the outbox while no service listens.
func spool(outbox string, events, sessions int) ([]string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	dead := ln.Addr().String()
	ln.Close()
	cl, err := client.New("http://"+dead+"/query", client.WithTimeout(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	rec, err := cl.OpenRecorder(outbox, client.RecorderOptions{MaxBytes: 1 << 30})
	if err != nil {
		return nil, err
	}
	keys := make([]string, sessions)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		keys[s] = fmt.Sprintf("agent:main:subagent:replay%d", s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range events / sessions {
				ev := client.Event{SessionKey: keys[s], Kind: "compacted", ActorType: "system", RunID: fmt.Sprintf("r%d-%d", s, i)}
				if err := rec.Record(context.Background(), ev); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		rec.Close()
		return nil, err
	}
	return keys, rec.Close()
}

// post appends the events straight, as recordEvents batches of 200 from
// DefaultSenders goroutines, each posting its sessions' events in order.
func post(ctx context.Context, cl *client.Client, keys []string, per int) (time.Duration, error) {
	const mutation = `mutation($in: [RecordEventInput!]!) { recordEvents(inputs: $in) { index error { code message } } }`
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, client.DefaultSenders)
	for g := range client.DefaultSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := g; s < len(keys); s += client.DefaultSenders {
				for i := 0; i < per; i += client.MaxBatch {
					var in []client.Event
					for j := i; j < min(per, i+client.MaxBatch); j++ {
						in = append(in, client.Event{SessionKey: keys[s], Kind: "compacted", ActorType: "system",
							RunID: fmt.Sprintf("r%d-%d", s, j), DedupeKey: fmt.Sprintf("floor-%d-%d", s, j)})
					}
					var res struct {
						RecordEvents []struct {
							Error *struct{ Code, Message string }
						}
					}
					for {
						err := cl.Do(ctx, mutation, map[string]any{"in": in}, &res)
						if d := client.RetryAfter(err); d > 0 {
							time.Sleep(d)
							continue
						}
						if err == nil {
							for _, it := range res.RecordEvents {
								if it.Error != nil {
									err = fmt.Errorf("%s: %s", it.Error.Code, it.Error.Message)
								}
							}
						}
						if err != nil {
							errs <- err
							return
						}
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return time.Since(t0), <-errs
}

// check reads every session's log: each spooled event once, in recording order.
func check(ctx context.Context, cl *client.Client, keys []string, per int) error {
	for s, key := range keys {
		r, err := cl.Reconcile(ctx, client.Target{SessionKey: key}, 0)
		if err != nil {
			return err
		}
		if len(r.Events) != per {
			return fmt.Errorf("%s holds %d events, want %d", key, len(r.Events), per)
		}
		for i, e := range r.Events {
			if want := fmt.Sprintf("r%d-%d", s, i); e.RunID == nil || *e.RunID != want {
				return fmt.Errorf("%s: event %d is %v, want run %s (order or duplicate)", key, i, e.RunID, want)
			}
		}
	}
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
