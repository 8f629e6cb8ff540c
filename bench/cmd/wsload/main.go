// Command wsload is the WebSocket load generator of the notice latency (L1), idle
// subscriber memory (L2) and sessionStatus-under-load (L3) runs. It starts the server
// under test as a child process (a separate process: its own file descriptors), drives
// it with N gorilla graphql-transport-ws clients from this process, and writes one JSON
// result.
//
//	-mode service:  the real binary (serve --addr --db), staleNotices(watcher:)
//	                subscriptions, notices opened by recordEvent over HTTP
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
//     returning 200 events at -status-rate per second over HTTP (service only).
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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/bench/internal/loadkeys"
)

type config struct {
	mode, bin, db, out, logFile string
	serverArgs, header          string
	profileDir                  string
	saveTemplate, fromTemplate  string
	subs, small                 int
	roundsSmall, roundsBig      int
	rate, statusRate            int
	frameBytes                  int
	setupWorkers                int
	wait, timeout               time.Duration
	noA2                        bool
	phases                      map[string]bool
}

func main() {
	var c config
	flag.StringVar(&c.mode, "mode", "service", "service or baseline")
	flag.StringVar(&c.bin, "bin", "", "server binary (the service, bench/cmd/profserve or bench/cmd/wsbaseline)")
	flag.StringVar(&c.db, "db", "", "database file of the service (created)")
	flag.StringVar(&c.out, "out", "wsload.json", "result file")
	flag.StringVar(&c.logFile, "server-log", "", "file for the server's output (default: discarded)")
	flag.StringVar(&c.serverArgs, "server-args", "", "extra arguments for the server, space-separated")
	flag.StringVar(&c.header, "header", "", "extra HTTP header on every request, e.g. 'Authorization: Bearer X'")
	flag.StringVar(&c.profileDir, "profile-dir", "", "capture CPU profiles per phase (profserve only) into this directory")
	flag.StringVar(&c.saveTemplate, "save-template", "", "service: copy the database here after the setup")
	flag.StringVar(&c.fromTemplate, "from-template", "", "service: start from this copy of a set-up database and skip the setup")
	flag.IntVar(&c.subs, "subs", 10000, "subscribers")
	flag.IntVar(&c.small, "small", 1000, "subscribers of the small broadcast")
	flag.IntVar(&c.roundsSmall, "rounds-small", 9, "broadcast rounds to -small subscribers (the first is a warm-up)")
	flag.IntVar(&c.roundsBig, "rounds-big", 4, "broadcast rounds to -subs subscribers (the first is a warm-up)")
	flag.IntVar(&c.rate, "rate", 500, "appends per second in L1(a)")
	flag.IntVar(&c.statusRate, "status-rate", 200, "sessionStatus requests per second in L3")
	flag.IntVar(&c.frameBytes, "frame-bytes", 0, "baseline: frame size (0: the server's default)")
	flag.IntVar(&c.setupWorkers, "setup-workers", 32, "concurrent setup requests")
	flag.DurationVar(&c.wait, "wait", 15*time.Second, "how long to wait for the frames of one round or phase")
	flag.DurationVar(&c.timeout, "timeout", 9*time.Minute, "hard limit of the whole run")
	flag.BoolVar(&c.noA2, "no-l3", false, "skip the L1(a)+L3 phase")
	phases := flag.String("phases", "b_small,b_big,a,a_l3", "phases to run")
	flag.Parse()
	c.phases = map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		c.phases[strings.TrimSpace(p)] = true
	}
	if c.mode != "service" && c.mode != "baseline" {
		fatalf("-mode must be service or baseline")
	}
	if c.bin == "" || (c.mode == "service" && c.db == "") {
		fatalf("-bin (and -db for the service) are required")
	}
	if c.small > c.subs {
		c.small = c.subs
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	r := &runner{cfg: c, res: &result{Mode: c.mode, Subs: c.subs, Small: c.small, Phases: map[string]*phaseResult{}}}
	err := r.run(ctx)
	if err != nil {
		r.res.Errors = append(r.res.Errors, err.Error())
		fmt.Fprintln(os.Stderr, "wsload:", err)
	}
	r.shutdown()
	data, _ := json.MarshalIndent(r.res, "", "  ")
	if werr := os.WriteFile(c.out, append(data, '\n'), 0o644); werr != nil {
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

// ---------------------------------------------------------------------------------------
// Results

type result struct {
	Mode  string `json:"mode"`
	Subs  int    `json:"subs"`
	Small int    `json:"small"`
	// FrameBytes is the mean size of the notice frames received.
	FrameBytes float64 `json:"frame_bytes"`
	// SetupAppends and SetupSeconds: the service's setup through the API.
	SetupAppends int     `json:"setup_appends,omitempty"`
	SetupSeconds float64 `json:"setup_seconds,omitempty"`
	// RestartReadyMS: restart of the set-up service, process start → /readyz 200.
	RestartReadyMS   float64 `json:"restart_ready_ms,omitempty"`
	CursorsAtRestart int     `json:"cursors_at_restart,omitempty"`
	// RSS of the server: before any client, with -small clients, with -subs clients.
	RSS0KB     int64   `json:"rss0_kb"`
	RSSSmallKB int64   `json:"rss_small_kb"`
	RSS1KB     int64   `json:"rss1_kb"`
	PerSubKB   float64 `json:"per_sub_kb"`
	// Stats are /debug/stats of the server (profserve, wsbaseline) at RSS0 and RSS1.
	Stats0 map[string]any `json:"stats0,omitempty"`
	Stats1 map[string]any `json:"stats1,omitempty"`
	// ConnectSeconds: dial + init + subscribe of all clients.
	ConnectSeconds float64                 `json:"connect_seconds"`
	Phases         map[string]*phaseResult `json:"phases"`
	L3             *latResult              `json:"l3,omitempty"`
	// ClientsEnded counts subscriptions or connections that ended during the run.
	ClientsEnded int      `json:"clients_ended"`
	FirstEnd     string   `json:"first_end,omitempty"`
	Unexpected   int64    `json:"unexpected_frames"`
	BadFrames    int64    `json:"bad_frames"`
	Errors       []string `json:"errors,omitempty"`
}

type phaseResult struct {
	Expected int `json:"expected"`
	Received int `json:"received"`
	Lost     int `json:"lost"`
	Dupes    int `json:"dupes"`
	// Mismatch counts frames whose watcher is not the connection's, or trigger answers
	// that opened a number of notices other than expected.
	Mismatch int `json:"mismatch"`
	// FromCommit is the primary latency: from the first sign, seen from this process,
	// that the append committed — its HTTP answer or the first frame it caused,
	// whichever came first — to the frame read. A lower bound of commit → frame.
	FromCommit latResult `json:"from_commit"`
	// FromResp is from the trigger's HTTP answer (negative when the frame came first);
	// FromSend from the moment the request was sent (includes the commit itself).
	FromResp latResult `json:"from_response"`
	FromSend latResult `json:"from_send"`
	// TriggerMS is the trigger's round trip (recordEvent, or the baseline's POST).
	TriggerMS latResult `json:"trigger"`
	Seconds   float64   `json:"seconds"`
	// ServerCPUMS is the server process's CPU time (user + system) during the phase;
	// CPUPerFrameUS is that per frame received.
	ServerCPUMS   float64 `json:"server_cpu_ms"`
	CPUPerFrameUS float64 `json:"cpu_per_frame_us"`
}

// latResult is a latency distribution in milliseconds.
type latResult struct {
	N      int     `json:"n"`
	Errors int     `json:"errors,omitempty"`
	Min    float64 `json:"min_ms"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

func summarize(ns []int64) latResult {
	if len(ns) == 0 {
		return latResult{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	at := func(p int) float64 {
		i := min(len(s)*p/100, len(s)-1)
		return float64(s[i]) / 1e6
	}
	return latResult{N: len(s), Min: float64(s[0]) / 1e6, P50: at(50), P90: at(90), P99: at(99), Max: float64(s[len(s)-1]) / 1e6}
}

// ---------------------------------------------------------------------------------------
// The run

type runner struct {
	cfg  config
	res  *result
	proc *proc
	http *http.Client

	clients []*wsClient
	rec     *recorder

	frameBytes, frames atomic.Int64
}

func (r *runner) run(ctx context.Context) error {
	r.http = &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute,
	}}
	r.rec = newRecorder(r.cfg)
	var err error
	if r.cfg.mode == "service" && r.cfg.fromTemplate != "" {
		if err := copyDB(r.cfg.fromTemplate, r.cfg.db); err != nil {
			return err
		}
		if r.proc, err = r.start(ctx); err != nil {
			return err
		}
		r.res.RestartReadyMS = float64(r.proc.readyAfter.Microseconds()) / 1e3
	} else if r.proc, err = r.start(ctx); err != nil {
		return err
	}
	if r.cfg.mode == "service" && r.cfg.fromTemplate == "" {
		if err := r.setup(ctx); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		// Restart: the memory baseline is a fresh process, and restart → ready is measured
		// with the cursors of the run in place.
		if err := r.proc.stop(); err != nil {
			return err
		}
		if r.cfg.saveTemplate != "" {
			if err := copyDB(r.cfg.db, r.cfg.saveTemplate); err != nil {
				return err
			}
		}
		if r.proc, err = r.start(ctx); err != nil {
			return err
		}
		r.res.RestartReadyMS = float64(r.proc.readyAfter.Microseconds()) / 1e3
	}
	settle(ctx, 2*time.Second)
	r.res.RSS0KB = r.proc.rss()
	r.res.Stats0 = r.stats(ctx)
	logf("RSS0 %d kB", r.res.RSS0KB)

	t0 := time.Now()
	if err := r.connect(ctx, 0, r.cfg.small); err != nil {
		return err
	}
	settle(ctx, time.Second)
	r.res.RSSSmallKB = r.proc.rss()
	if r.cfg.phases["b_small"] {
		if err := r.broadcastPhase(ctx, "b_small", 'c', r.cfg.roundsSmall, r.cfg.small); err != nil {
			return err
		}
	}
	t1 := time.Now()
	if err := r.connect(ctx, r.cfg.small, r.cfg.subs); err != nil {
		return err
	}
	r.res.ConnectSeconds = (time.Since(t1) + t1.Sub(t0)).Seconds()
	settle(ctx, 3*time.Second)
	r.res.RSS1KB = r.proc.rss()
	r.res.Stats1 = r.stats(ctx)
	r.res.PerSubKB = float64(r.res.RSS1KB-r.res.RSS0KB) / float64(r.cfg.subs)
	logf("RSS1 %d kB with %d subscribers: %.1f kB each", r.res.RSS1KB, r.cfg.subs, r.res.PerSubKB)
	r.heapProfile(ctx, "idle")

	if r.cfg.phases["b_big"] {
		if err := r.broadcastPhase(ctx, "b_big", 'b', r.cfg.roundsBig, r.cfg.subs); err != nil {
			return err
		}
	}
	if r.cfg.phases["a"] {
		if err := r.ownTargetPhase(ctx, "a", 'a', false); err != nil {
			return err
		}
	}
	if r.cfg.phases["a_l3"] && !r.cfg.noA2 && r.cfg.mode == "service" {
		if err := r.ownTargetPhase(ctx, "a_l3", 'u', true); err != nil {
			return err
		}
	}
	if n := r.frames.Load(); n > 0 {
		r.res.FrameBytes = float64(r.frameBytes.Load()) / float64(n)
	}
	r.rec.endedMu.Lock()
	r.res.ClientsEnded, r.res.FirstEnd = r.rec.endedN, r.rec.endedFirst
	r.rec.endedMu.Unlock()
	r.res.Unexpected, r.res.BadFrames = r.rec.unexpected.Load(), r.rec.bad.Load()
	return ctx.Err()
}

// copyDB copies a closed SQLite database (and its WAL, if one was left).
func copyDB(from, to string) error {
	for _, suffix := range []string{"", "-wal"} {
		os.Remove(to + suffix)
		data, err := os.ReadFile(from + suffix)
		if err != nil {
			if suffix != "" && os.IsNotExist(err) {
				continue
			}
			return err
		}
		if err := os.WriteFile(to+suffix, data, 0o644); err != nil {
			return err
		}
	}
	os.Remove(to + "-shm")
	return nil
}

func settle(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (r *runner) shutdown() {
	if r.proc != nil {
		// The server goes first, so that the TIME_WAIT sockets are on its side.
		_ = r.proc.stop()
	}
	var wg sync.WaitGroup
	for _, c := range r.clients {
		wg.Go(c.close)
	}
	wg.Wait()
}

// ---------------------------------------------------------------------------------------
// The server process

type proc struct {
	cmd        *exec.Cmd
	base, ws   string
	readyAfter time.Duration
	exited     chan struct{}
	logFile    *os.File
}

func (r *runner) start(ctx context.Context) (*proc, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	var args []string
	if r.cfg.mode == "service" {
		// A load generator is one client far above the default rate limit.
		args = []string{"serve", "--addr", addr, "--db", r.cfg.db, "--log-level", "warn", "--rate-limit", "0"}
	} else {
		args = []string{"-addr", addr}
		if r.cfg.frameBytes > 0 {
			args = append(args, "-frame-bytes", strconv.Itoa(r.cfg.frameBytes))
		}
	}
	args = append(args, strings.Fields(r.cfg.serverArgs)...)
	p := &proc{base: "http://" + addr, ws: "ws://" + addr + "/query", exited: make(chan struct{})}
	p.cmd = exec.Command(r.cfg.bin, args...)
	if r.cfg.logFile != "" {
		f, err := os.OpenFile(r.cfg.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		p.logFile = f
		p.cmd.Stdout, p.cmd.Stderr = f, f
	}
	t0 := time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited before it was ready: %v", r.cfg.bin, p.cmd.ProcessState)
		default:
		}
		resp, err := r.http.Get(p.base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.readyAfter = time.Since(t0)
				logf("server %s ready after %v (pid %d)", addr, p.readyAfter, p.cmd.Process.Pid)
				return p, nil
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	_ = p.cmd.Process.Kill()
	return nil, fmt.Errorf("%s was not ready within 60s", r.cfg.bin)
}

func (p *proc) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	if p.logFile != nil {
		p.logFile.Close()
	}
	return nil
}

// cpu is the server's CPU time so far (utime + stime of /proc/PID/stat).
func (p *proc) cpu() time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses and may hold spaces).
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// rss is the server's resident set in kB (VmRSS).
func (p *proc) rss() int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// stats reads /debug/stats when the server has it (profserve, wsbaseline).
func (r *runner) stats(ctx context.Context) map[string]any {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.proc.base+"/debug/stats", nil)
	resp, err := r.http.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	var m map[string]any
	if json.NewDecoder(resp.Body).Decode(&m) != nil {
		return nil
	}
	return m
}

// profile starts or stops a CPU profile on profserve (with -profile-dir).
func (r *runner) profile(ctx context.Context, action, name string) {
	if r.cfg.profileDir == "" {
		return
	}
	u := r.proc.base + "/debug/cpuprofile/" + action
	if action == "start" {
		u += "?file=" + filepath.Join(r.cfg.profileDir, "cpu-"+name+".pprof")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if resp, err := r.http.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (r *runner) heapProfile(ctx context.Context, name string) {
	if r.cfg.profileDir == "" {
		return
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.proc.base+"/debug/pprof/heap", nil)
	resp, err := r.http.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if f, err := os.Create(filepath.Join(r.cfg.profileDir, "heap-"+name+".pprof")); err == nil {
			_, _ = io.Copy(f, resp.Body)
			f.Close()
		}
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, r.proc.base+"/debug/pprof/goroutine?debug=1", nil)
	if resp, err := r.http.Do(req); err == nil {
		if f, err := os.Create(filepath.Join(r.cfg.profileDir, "goroutine-"+name+".txt")); err == nil {
			_, _ = io.Copy(f, resp.Body)
			f.Close()
		}
		resp.Body.Close()
	}
}

// ---------------------------------------------------------------------------------------
// HTTP: GraphQL and the baseline's triggers

func (r *runner) post(ctx context.Context, path string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.proc.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if k, v, ok := strings.Cut(r.cfg.header, ":"); ok {
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: HTTP %d: %.300s", path, resp.StatusCode, data)
	}
	return data, nil
}

// gql runs one GraphQL operation and decodes its data into dst.
func (r *runner) gql(ctx context.Context, query string, vars map[string]any, dst any) error {
	data, err := r.post(ctx, "/query", map[string]any{"query": query, "variables": vars})
	if err != nil {
		return err
	}
	var resp struct {
		Data   json.RawMessage   `json:"data"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return err
	}
	if len(resp.Errors) > 0 {
		return fmt.Errorf("GraphQL errors: %s", resp.Errors[0])
	}
	if dst != nil {
		return json.Unmarshal(resp.Data, dst)
	}
	return nil
}

const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded noticesOpened } }`

type recordAnswer struct {
	RecordEvent struct {
		Recorded      bool `json:"recorded"`
		NoticesOpened int  `json:"noticesOpened"`
	} `json:"recordEvent"`
}

func (r *runner) record(ctx context.Context, in map[string]any) (recordAnswer, error) {
	var a recordAnswer
	err := r.gql(ctx, recordMutation, map[string]any{"in": in}, &a)
	return a, err
}

// trigger makes one notice (or one broadcast) happen and returns when it was sent and
// when the answer was read, and how many notices the server says it opened or sent.
func (r *runner) trigger(ctx context.Context, target string, watcher, count int) (sent, answered time.Time, n int, err error) {
	sent = time.Now()
	if r.cfg.mode == "service" {
		var a recordAnswer
		a, err = r.record(ctx, map[string]any{"sessionKey": target, "kind": "human_direct_message",
			"actorType": "human", "actorId": "user:bench"})
		n = a.RecordEvent.NoticesOpened
	} else {
		var data []byte
		if count > 0 {
			data, err = r.post(ctx, "/broadcast", map[string]any{"target": target, "count": count})
		} else {
			data, err = r.post(ctx, "/notify", map[string]any{"target": target, "watcher": watcher})
		}
		var a struct {
			Sent int `json:"sent"`
		}
		if err == nil {
			err = json.Unmarshal(data, &a)
		}
		n = a.Sent
	}
	return sent, time.Now(), n, err
}

// ---------------------------------------------------------------------------------------
// Setup (service)

// setup creates, through the API, every cursor of the run (child_spawned on each target
// with its watchers as producer-passed watchers, at most 32 per event) and the L3
// session of 1,000 events.
func (r *runner) setup(ctx context.Context) error {
	t0 := time.Now()
	var jobs []map[string]any
	spawn := func(target string, watchers []string) {
		jobs = append(jobs, map[string]any{"sessionKey": target, "kind": "child_spawned", "actorType": "agent", "watchers": watchers})
	}
	for i := range r.cfg.subs {
		spawn(loadkeys.Target('a', i), []string{loadkeys.Watcher(i)})
		if !r.cfg.noA2 {
			spawn(loadkeys.Target('u', i), []string{loadkeys.Watcher(i)})
		}
	}
	cursors := r.cfg.subs * 2
	group := func(set byte, rounds, n int) {
		for round := range rounds {
			for lo := 0; lo < n; lo += 32 {
				var ws []string
				for i := lo; i < min(lo+32, n); i++ {
					ws = append(ws, loadkeys.Watcher(i))
				}
				spawn(loadkeys.Target(set, round), ws)
			}
			cursors += n
		}
	}
	group('c', r.cfg.roundsSmall, r.cfg.small)
	group('b', r.cfg.roundsBig, r.cfg.subs)
	for i := range 1000 {
		run := "run-" + strconv.Itoa(i)
		switch i % 3 {
		case 0:
			jobs = append(jobs, map[string]any{"sessionKey": loadkeys.StatusSession, "kind": "run_completed", "actorType": "agent", "actorId": "agent:bench:main", "runId": run})
		case 1:
			jobs = append(jobs, map[string]any{"sessionKey": loadkeys.StatusSession, "kind": "human_direct_message", "actorType": "human", "actorId": "user:alice", "channel": "webchat"})
		default:
			jobs = append(jobs, map[string]any{"sessionKey": loadkeys.StatusSession, "kind": "run_failed", "actorType": "agent", "runId": run, "outcome": "timeout"})
		}
	}
	logf("setup: %d appends", len(jobs))
	ch := make(chan map[string]any)
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range r.cfg.setupWorkers {
		wg.Go(func() {
			for in := range ch {
				if _, err := r.record(ctx, in); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for _, in := range jobs {
		if firstErr != nil || ctx.Err() != nil {
			break
		}
		ch <- in
	}
	close(ch)
	wg.Wait()
	r.res.SetupAppends = len(jobs)
	r.res.SetupSeconds = time.Since(t0).Seconds()
	r.res.CursorsAtRestart = cursors
	logf("setup done in %.1fs", r.res.SetupSeconds)
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// ---------------------------------------------------------------------------------------
// WebSocket clients

const noticeSubscription = `subscription($w: String) { staleNotices(watcher: $w) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt } }`

type wsClient struct {
	idx  int
	c    *websocket.Conn
	wmu  sync.Mutex
	done chan struct{}
	once sync.Once
}

// connect dials clients lo..hi-1, 64 at a time; each sends connection_init, waits for
// connection_ack, subscribes (id "1") and starts its reader.
func (r *runner) connect(ctx context.Context, lo, hi int) error {
	t0 := time.Now()
	sem := make(chan struct{}, 64)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	fresh := make([]*wsClient, hi-lo)
	for i := lo; i < hi; i++ {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var c *wsClient
			var err error
			for attempt := range 3 {
				if c, err = r.dial(ctx, i); err == nil {
					break
				}
				time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("client %d: %w", i, err)
				}
				return
			}
			fresh[i-lo] = c
		})
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
	}
	wg.Wait()
	for _, c := range fresh {
		if c != nil {
			r.clients = append(r.clients, c)
		}
	}
	logf("connected clients %d..%d in %v", lo, hi-1, time.Since(t0).Round(time.Millisecond))
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func (r *runner) dial(ctx context.Context, i int) (*wsClient, error) {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 20 * time.Second}
	hdr := http.Header{}
	if k, v, ok := strings.Cut(r.cfg.header, ":"); ok {
		hdr.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	conn, resp, err := d.DialContext(ctx, r.proc.ws, hdr)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	c := &wsClient{idx: i, c: conn, done: make(chan struct{})}
	initPayload := map[string]any{}
	if k, v, ok := strings.Cut(r.cfg.header, ":"); ok {
		initPayload[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := c.write(map[string]any{"type": "connection_init", "payload": initPayload}); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var f struct {
			Type string `json:"type"`
		}
		if err := conn.ReadJSON(&f); err != nil {
			conn.Close()
			return nil, fmt.Errorf("waiting for connection_ack: %w", err)
		}
		if f.Type == "connection_ack" {
			break
		}
		if f.Type == "ping" {
			_ = c.write(map[string]any{"type": "pong"})
			continue
		}
		if f.Type != "pong" {
			conn.Close()
			return nil, fmt.Errorf("got %q before connection_ack", f.Type)
		}
	}
	_ = conn.SetReadDeadline(time.Time{})
	payload := map[string]any{"query": noticeSubscription, "variables": map[string]any{"w": loadkeys.Watcher(i)}}
	if err := c.write(map[string]any{"type": "subscribe", "id": "1", "payload": payload}); err != nil {
		conn.Close()
		return nil, err
	}
	go r.read(c)
	return c, nil
}

func (c *wsClient) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.c.WriteJSON(v)
}

func (c *wsClient) close() {
	c.once.Do(func() {
		c.wmu.Lock()
		_ = c.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		c.wmu.Unlock()
		_ = c.c.Close()
	})
	<-c.done
}

type inFrame struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Payload struct {
		Data struct {
			StaleNotices struct {
				Watcher string `json:"watcher"`
				Target  string `json:"target"`
			} `json:"staleNotices"`
		} `json:"data"`
	} `json:"payload"`
}

// read timestamps every frame as soon as ReadMessage returns it, answers pings and
// records notices.
func (r *runner) read(c *wsClient) {
	defer close(c.done)
	for {
		_, data, err := c.c.ReadMessage()
		at := time.Now().UnixNano()
		if err != nil {
			r.rec.ended(c.idx, err)
			return
		}
		var f inFrame
		if err := json.Unmarshal(data, &f); err != nil {
			r.rec.bad.Add(1)
			continue
		}
		switch f.Type {
		case "ping":
			_ = c.write(map[string]any{"type": "pong"})
		case "next":
			r.frames.Add(1)
			r.frameBytes.Add(int64(len(data)))
			n := f.Payload.Data.StaleNotices
			if n.Watcher != "" && n.Watcher != loadkeys.Watcher(c.idx) {
				r.rec.mismatch.Add(1)
			}
			r.rec.frame(c.idx, n.Target, at)
		case "error", "complete":
			r.rec.ended(c.idx, fmt.Errorf("subscription ended: %s", data))
		}
	}
}

// ---------------------------------------------------------------------------------------
// Receipt bookkeeping

// recorder holds the arrival time of each expected frame: per target set, per round
// (broadcast) or per subscriber (own target). Each slot is written by one reader.
type recorder struct {
	sets map[byte][][]atomic.Int64 // set → round → subscriber → unix nanos
	// counts per set and round, to know when a round is complete.
	counts        map[byte][]atomic.Int64
	dupes         atomic.Int64
	mismatch, bad atomic.Int64
	unexpected    atomic.Int64
	endedMu       sync.Mutex
	endedN        int
	endedFirst    string
}

func newRecorder(c config) *recorder {
	rc := &recorder{sets: map[byte][][]atomic.Int64{}, counts: map[byte][]atomic.Int64{}}
	mk := func(set byte, rounds, n int) {
		rc.sets[set] = make([][]atomic.Int64, rounds)
		for i := range rounds {
			rc.sets[set][i] = make([]atomic.Int64, n)
		}
		rc.counts[set] = make([]atomic.Int64, rounds)
	}
	mk('c', c.roundsSmall, c.small)
	mk('b', c.roundsBig, c.subs)
	mk('a', 1, c.subs)
	mk('u', 1, c.subs)
	return rc
}

func (rc *recorder) frame(idx int, target string, at int64) {
	set, i, ok := loadkeys.ParseTarget(target)
	rounds, known := rc.sets[set]
	if !ok || !known {
		rc.unexpected.Add(1)
		return
	}
	round := i
	if set == 'a' || set == 'u' {
		round = 0
		if i != idx {
			rc.mismatch.Add(1)
			return
		}
	}
	if round >= len(rounds) || idx >= len(rounds[round]) {
		rc.unexpected.Add(1)
		return
	}
	if !rounds[round][idx].CompareAndSwap(0, at) {
		rc.dupes.Add(1)
		return
	}
	rc.counts[set][round].Add(1)
}

func (rc *recorder) ended(idx int, err error) {
	rc.endedMu.Lock()
	defer rc.endedMu.Unlock()
	if rc.endedN == 0 {
		rc.endedFirst = fmt.Sprintf("client %d: %v", idx, err)
	}
	rc.endedN++
}

// waitFor waits until want frames of set/round arrived, or the wait passed.
func (rc *recorder) waitFor(ctx context.Context, set byte, round int, want int64, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for rc.counts[set][round].Load() < want && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------
// Phases

// broadcastPhase runs rounds broadcasts on set's targets, each to subscribers 0..n-1.
func (r *runner) broadcastPhase(ctx context.Context, name string, set byte, rounds, n int) error {
	logf("phase %s: %d rounds to %d subscribers", name, rounds, n)
	pr := &phaseResult{}
	r.res.Phases[name] = pr
	t0 := time.Now()
	dupes0, mism0 := r.rec.dupes.Load(), r.rec.mismatch.Load()
	var fromCommit, fromResp, fromSend, trig []int64
	r.profile(ctx, "start", name)
	var cpu time.Duration
	for round := range rounds {
		cpu0 := r.proc.cpu()
		sent, answered, opened, err := r.trigger(ctx, loadkeys.Target(set, round), 0, n)
		if err != nil {
			r.profile(ctx, "stop", name)
			return fmt.Errorf("%s round %d: %w", name, round, err)
		}
		if opened != n {
			pr.Mismatch++
		}
		r.rec.waitFor(ctx, set, round, int64(n), r.cfg.wait)
		if round > 0 {
			cpu += r.proc.cpu() - cpu0
		}
		got := r.rec.counts[set][round].Load()
		logf("  round %d: trigger %v, %d/%d frames", round, answered.Sub(sent).Round(time.Microsecond), got, n)
		if round == 0 {
			continue // warm-up
		}
		trig = append(trig, answered.Sub(sent).Nanoseconds())
		pr.Expected += n
		committed := answered.UnixNano()
		for i := range n {
			if at := r.rec.sets[set][round][i].Load(); at != 0 && at < committed {
				committed = at
			}
		}
		for i := range n {
			at := r.rec.sets[set][round][i].Load()
			if at == 0 {
				pr.Lost++
				continue
			}
			pr.Received++
			fromCommit = append(fromCommit, at-committed)
			fromResp = append(fromResp, at-answered.UnixNano())
			fromSend = append(fromSend, at-sent.UnixNano())
		}
		settle(ctx, 300*time.Millisecond)
	}
	r.profile(ctx, "stop", name)
	pr.Seconds = time.Since(t0).Seconds()
	pr.FromCommit, pr.FromResp, pr.FromSend, pr.TriggerMS = summarize(fromCommit), summarize(fromResp), summarize(fromSend), summarize(trig)
	pr.ServerCPUMS = float64(cpu.Microseconds()) / 1e3
	if pr.Received > 0 {
		pr.CPUPerFrameUS = pr.ServerCPUMS * 1e3 / float64(pr.Received)
	}
	pr.Dupes = int(r.rec.dupes.Load() - dupes0)
	pr.Mismatch += int(r.rec.mismatch.Load() - mism0)
	logf("phase %s: p50 %.2fms p99 %.2fms max %.2fms, lost %d", name, pr.FromCommit.P50, pr.FromCommit.P99, pr.FromCommit.Max, pr.Lost)
	return ctx.Err()
}

// ownTargetPhase is L1(a): rate appends per second, each on one subscriber's own
// target, every subscriber once in a random order; with l3, sessionStatus queries run
// alongside at statusRate.
func (r *runner) ownTargetPhase(ctx context.Context, name string, set byte, l3 bool) error {
	n := r.cfg.subs
	logf("phase %s: %d appends at %d/s (L3: %v)", name, n, r.cfg.rate, l3)
	pr := &phaseResult{Expected: n}
	r.res.Phases[name] = pr
	dupes0, mism0 := r.rec.dupes.Load(), r.rec.mismatch.Load()
	sent := make([]int64, n)
	answered := make([]int64, n)
	var trigErrs, openedWrong atomic.Int64
	var firstErr atomic.Value
	order := rand.Perm(n)
	interval := time.Second / time.Duration(r.cfg.rate)
	duration := time.Duration(n) * interval

	var l3wg sync.WaitGroup
	var l3lat []int64
	var l3errs atomic.Int64
	if l3 {
		l3wg.Go(func() { l3lat = r.statusLoad(ctx, duration, &l3errs) })
	}
	r.profile(ctx, "start", name)
	cpu0 := r.proc.cpu()
	t0 := time.Now()
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	for k, i := range order {
		if ctx.Err() != nil {
			break
		}
		if d := time.Until(t0.Add(time.Duration(k) * interval)); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, a, opened, err := r.trigger(ctx, loadkeys.Target(set, i), i, 0)
			if err != nil {
				trigErrs.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			if opened != 1 {
				openedWrong.Add(1)
			}
			atomic.StoreInt64(&sent[i], s.UnixNano())
			atomic.StoreInt64(&answered[i], a.UnixNano())
		})
	}
	wg.Wait()
	r.rec.waitFor(ctx, set, 0, int64(n), r.cfg.wait)
	pr.ServerCPUMS = float64((r.proc.cpu() - cpu0).Microseconds()) / 1e3
	r.profile(ctx, "stop", name)
	l3wg.Wait()
	pr.Seconds = time.Since(t0).Seconds()
	var fromCommit, fromResp, fromSend, trig []int64
	for i := range n {
		at := r.rec.sets[set][0][i].Load()
		s, a := atomic.LoadInt64(&sent[i]), atomic.LoadInt64(&answered[i])
		if at == 0 || a == 0 {
			pr.Lost++
			continue
		}
		pr.Received++
		fromCommit = append(fromCommit, at-min(a, at))
		fromResp = append(fromResp, at-a)
		fromSend = append(fromSend, at-s)
		trig = append(trig, a-s)
	}
	pr.FromCommit, pr.FromResp, pr.FromSend, pr.TriggerMS = summarize(fromCommit), summarize(fromResp), summarize(fromSend), summarize(trig)
	pr.TriggerMS.Errors = int(trigErrs.Load())
	if pr.Received > 0 {
		pr.CPUPerFrameUS = pr.ServerCPUMS * 1e3 / float64(pr.Received)
	}
	pr.Dupes = int(r.rec.dupes.Load() - dupes0)
	pr.Mismatch = int(r.rec.mismatch.Load()-mism0) + int(openedWrong.Load())
	logf("phase %s: p50 %.2fms p99 %.2fms max %.2fms, lost %d, trigger errors %d", name, pr.FromCommit.P50, pr.FromCommit.P99, pr.FromCommit.Max, pr.Lost, trigErrs.Load())
	if l3 {
		s := summarize(l3lat)
		s.Errors = int(l3errs.Load())
		r.res.L3 = &s
		logf("L3: %d requests, p50 %.2fms p99 %.2fms, %d errors", s.N, s.P50, s.P99, s.Errors)
	}
	if err, _ := firstErr.Load().(error); err != nil {
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("%s: %d trigger errors, first: %v", name, trigErrs.Load(), err))
	}
	return ctx.Err()
}

const statusQuery = `query($k: String!, $s: Int) { sessionStatus(sessionKey: $k, changesSince: $s) {
  sessionKey agentId stateVersion
  stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
    historyGap truncated earliestAvailableSequence nextChangesSince } } }`

// statusLoad sends sessionStatus(changesSince) queries returning 200 events at
// statusRate for duration and returns their latencies (send → body read). A request
// fails on a transport error, a non-200 status, GraphQL errors or a page that is not
// 200 events.
func (r *runner) statusLoad(ctx context.Context, duration time.Duration, errs *atomic.Int64) []int64 {
	total := int(duration.Seconds() * float64(r.cfg.statusRate))
	interval := time.Second / time.Duration(r.cfg.statusRate)
	lat := make([]int64, total)
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	t0 := time.Now()
	var firstErr atomic.Value
	stopAt := t0.Add(duration + 5*time.Second)
	unsent := 0
	for k := range total {
		if ctx.Err() != nil || time.Now().After(stopAt) {
			unsent = total - k
			break
		}
		if d := time.Until(t0.Add(time.Duration(k) * interval)); d > 0 {
			time.Sleep(d)
		}
		select {
		case sem <- struct{}{}:
		case <-time.After(time.Until(stopAt)):
			unsent = total - k
		}
		if unsent > 0 {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			after := rand.IntN(801)
			s := time.Now()
			var d struct {
				SessionStatus struct {
					StateChanges struct {
						Events []struct {
							Sequence int64 `json:"sequence"`
						} `json:"events"`
					} `json:"stateChanges"`
				} `json:"sessionStatus"`
			}
			err := r.gql(ctx, statusQuery, map[string]any{"k": loadkeys.StatusSession, "s": after}, &d)
			if err == nil && len(d.SessionStatus.StateChanges.Events) != 200 {
				err = fmt.Errorf("got %d events", len(d.SessionStatus.StateChanges.Events))
			}
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			lat[k] = time.Since(s).Nanoseconds()
		})
	}
	wg.Wait()
	if unsent > 0 {
		errs.Add(int64(unsent))
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("L3: %d of %d requests not sent: 256 in flight and the phase over (the server did not keep up)", unsent, total))
	}
	if err, _ := firstErr.Load().(error); err != nil {
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("L3: %d errors, first: %v", errs.Load(), err))
	}
	out := lat[:0]
	for _, v := range lat {
		if v > 0 {
			out = append(out, v)
		}
	}
	return out
}
