// Command wsload is the WebSocket load generator of the notice latency (L1), idle
// subscriber memory (L2) and sessionStatus-under-load (L3) runs. It starts the server
// under test as a child process (a separate process: its own file descriptors), drives
// it with N gorilla graphql-transport-ws clients from this process, and writes one JSON
// result.
//
//	-mode service:  the real binary (serve --addr --db), staleNotices(watcher:)
//	                subscriptions, notices opened by recordEvent over HTTP; on
//	                SQLite (-db FILE) or on a fresh PostgreSQL database (-pg URL,
//	                created on that server and dropped after the run, pg.go)
//	-mode baseline: bench/cmd/wsbaseline, frames triggered by POST /notify, /broadcast
//
// The sequence, the same in both modes (loadkeys names the sessions):
//
//  1. service: start, set up the cursors through the API (child_spawned with
//     producer-passed watchers) and a session of 1,000 events for L3, then restart
//     (measuring start → /readyz) so that the memory baseline is a fresh process;
//  2. RSS0; connect and subscribe the first -small clients;
//  3. L1(b) small: -rounds-small broadcasts, each one append on a target the -small
//     subscribers watch; each subscriber must get exactly one frame per round;
//  4. connect and subscribe the other clients up to -subs; settle; RSS1;
//     L2 = (RSS1 − RSS0) / subs;
//  5. L1(b) big: -rounds-big broadcasts to every subscriber;
//  6. L1(a): -rate appends per second, each on the own target of one subscriber, in a
//     random order, every subscriber once;
//  7. L1(a) again on fresh targets with L3 alongside: sessionStatus(changesSince)
//     returning 200 events at -status-rate per second over HTTP (service only);
//  8. b_none, P6's baseline: every client disconnects; once the server counts no
//     subscription, the service's watchers acknowledge their notices on the big
//     broadcast's targets (ackNotices), and -rounds-big broadcast triggers go to the
//     same targets again, each opening the same -subs notices as in step 5 with
//     nobody to deliver them to (nosub.go).
//
// Latency is measured in this process on one clock, to the moment the subscriber's
// ReadMessage returns the frame, from the first sign this process sees that the append
// committed: the trigger's HTTP answer (the append is committed and acknowledged; for
// the baseline, the frames are enqueued) or the first frame the trigger caused,
// whichever came first (a server busy fanning out answers the trigger late). It is also
// reported from the HTTP answer alone and from the moment the request was sent. Round 0 of each broadcast phase
// is a warm-up and not counted. A notice that never arrives within -wait is lost.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/awareness/awareness/bench/internal/wsresult"
)

// The files of this command: config.go (flags), run.go (the sequence above),
// server.go (the server under test), http.go (GraphQL and the baseline's triggers),
// setup.go (the service's cursors), clients.go (the WebSocket clients), recorder.go
// (frame arrivals), phases.go (the measured phases), nosub.go (b_none); the result type is
// bench/internal/wsresult, shared with bench/cmd/benchreport.

func main() {
	c := parseConfig()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	r := &runner{cfg: c, res: &wsresult.Result{Mode: c.mode, Subs: c.subs, Small: c.small, Pings: c.mode == "service" && c.pings, Phases: map[string]*wsresult.Phase{}}}
	err := r.run(ctx)
	if err != nil {
		r.res.Errors = append(r.res.Errors, err.Error())
		fmt.Fprintln(os.Stderr, "wsload:", err)
	}
	r.shutdown()
	if werr := wsresult.Write(c.out, r.res); werr != nil {
		fatalf("write %s: %v", c.out, werr)
	}
	fmt.Printf("wsload %s: wrote %s\n", c.mode, c.out)
	if err != nil {
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "wsload: "+format+"\n", args...)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s wsload: "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}
