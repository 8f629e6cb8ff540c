// Command gatewayproc is the gateway process the end-to-end tests kill -9: it opens a
// client.Recorder on an outbox file, records events from several goroutines and
// prints one line "OK <session> <runId>" to stdout after each Record that returned
// nil, or it only delivers what the outbox holds.
//
//	gatewayproc -endpoint URL -outbox FILE [-token T] [-record N] [-sessions S] [-prefix P] [-flush]
//
// A refused event or a delivery the service stopped (a refused token) is printed to
// stderr as "ERROR <err>"; -flush then exits 1.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/awareness/awareness/client"
)

func main() {
	endpoint := flag.String("endpoint", "", "the service's GraphQL endpoint")
	outbox := flag.String("outbox", "", "the outbox file")
	record := flag.Int("record", 0, "events to record per session (0: none)")
	sessions := flag.Int("sessions", 4, "sessions, one goroutine each")
	prefix := flag.String("prefix", "p", "run id prefix")
	flush := flag.Bool("flush", false, "wait until the outbox is delivered, then exit")
	token := flag.String("token", "", "bearer token")
	flag.Parse()
	var opts []client.Option
	if *token != "" {
		opts = append(opts, client.WithToken(*token))
	}
	c, err := client.New(*endpoint, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rec, err := c.OpenRecorder(*outbox, client.RecorderOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for err := range rec.Errors() {
			fmt.Fprintln(os.Stderr, "ERROR", err)
		}
	}()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range *sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("agent:main:subagent:gw%d", s)
			for i := range *record {
				runID := fmt.Sprintf("%s-%d-%d", *prefix, s, i)
				err := rec.Record(context.Background(), client.Event{
					SessionKey: key, Kind: "compacted", ActorType: "system", RunID: runID,
				})
				if err == nil {
					mu.Lock()
					fmt.Fprintf(out, "OK %s %s\n", key, runID)
					out.Flush()
					mu.Unlock()
				} else {
					fmt.Fprintln(os.Stderr, "ERROR", err)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Fprintln(out, "RECORDED")
	out.Flush()
	if *flush {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rec.Flush(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "flush:", err, rec.Err())
			os.Exit(1)
		}
		fmt.Fprintln(out, "FLUSHED")
		out.Flush()
	}
	if err := rec.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
