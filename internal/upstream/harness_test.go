package upstream_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/hubtest"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/upstream"
)

// Keys of the harness: an adopted session and the session that watches it.
const (
	adoptedKey = "agent:main:acp:ext1"
	otherKey   = "agent:main:acp:ext2"
	watcherKey = "agent:main:main"
	catalogID  = "claude"
)

// clock is the injected service clock; each reading advances it by a millisecond.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// spyCatalog wraps a catalog: it counts scans per thread, can fail them, and runs a
// hook inside each scan (to change the world while a check is in flight).
type spyCatalog struct {
	awareness.Catalog
	mu     sync.Mutex
	scans  map[string]int
	fail   error
	onScan func(ctx context.Context, req awareness.ScanRequest)
}

func (s *spyCatalog) Scan(ctx context.Context, req awareness.ScanRequest) (awareness.ScanResult, error) {
	s.mu.Lock()
	if s.scans == nil {
		s.scans = map[string]int{}
	}
	s.scans[req.ThreadID]++
	fail, hook := s.fail, s.onScan
	s.mu.Unlock()
	if hook != nil {
		hook(ctx, req)
	}
	if fail != nil {
		return awareness.ScanResult{Next: req.Marker}, fail
	}
	return s.Catalog.Scan(ctx, req)
}

func (s *spyCatalog) count(thread string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scans[thread]
}

// env is one database file and one catalog directory, with a service and a monitor
// over them, reopened by restart like a process.
type env struct {
	t      testing.TB
	ctx    context.Context
	dir    string // the catalog directory
	dbPath string
	clk    *clock
	spies  map[string]*spyCatalog // by catalog id
	// wrapRec, when set, wraps the service as the monitor's recorder.
	wrapRec func(upstream.Recorder) upstream.Recorder
	maxScan int64

	store *models.Store
	svc   *awareness.Service
	mon   *upstream.Monitor
}

type envOption func(*env)

// withCatalogs adds more catalogs, each over its own directory under the temp dir.
func withCatalogs(ids ...string) envOption {
	return func(e *env) {
		for _, id := range ids {
			e.spies[id] = nil
		}
	}
}

func withRecorder(wrap func(upstream.Recorder) upstream.Recorder) envOption {
	return func(e *env) { e.wrapRec = wrap }
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{
		t: t, ctx: context.Background(),
		dir:    filepath.Join(root, catalogID),
		dbPath: filepath.Join(root, "awareness.db"),
		clk:    &clock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)},
		spies:  map[string]*spyCatalog{catalogID: nil},
	}
	for _, o := range opts {
		o(e)
	}
	for id := range e.spies {
		dir := filepath.Join(root, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cat, err := upstream.NewDirCatalog(id, dir)
		if err != nil {
			t.Fatalf("NewDirCatalog: %v", err)
		}
		e.spies[id] = &spyCatalog{Catalog: cat}
	}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	st, err := models.OpenSQLite(e.ctx, e.dbPath, models.Options{})
	if err != nil {
		e.t.Fatalf("OpenSQLite: %v", err)
	}
	e.store = st
	var cats []awareness.Catalog
	for _, id := range slices.Sorted(maps.Keys(e.spies)) {
		cats = append(cats, e.spies[id])
	}
	e.svc = awareness.NewService(awareness.Config{Store: st, Now: e.clk.Now, Catalogs: cats})
	var rec upstream.Recorder = e.svc
	if e.wrapRec != nil {
		rec = e.wrapRec(e.svc)
	}
	e.mon, err = upstream.New(upstream.Config{Service: e.svc, Recorder: rec, MaxScanBytes: e.maxScan})
	if err != nil {
		e.t.Fatalf("upstream.New: %v", err)
	}
}

func (e *env) close() {
	if e.store == nil {
		return
	}
	e.mon.Stop()
	e.svc.Hub().Close()
	if err := e.store.Close(); err != nil {
		e.t.Errorf("close store: %v", err)
	}
	e.store = nil
}

// restart closes the process state and opens the same files again.
func (e *env) restart() {
	e.t.Helper()
	e.close()
	e.open()
}

func (e *env) path(thread string) string { return e.pathIn(catalogID, thread) }

func (e *env) pathIn(cat, thread string) string {
	return filepath.Join(filepath.Dir(e.dir), cat, thread+".jsonl")
}

// write appends raw text to a thread of the default catalog.
func (e *env) write(thread string, text string) { e.writeIn(catalogID, thread, text) }

func (e *env) writeIn(cat, thread string, text string) {
	e.t.Helper()
	f, err := os.OpenFile(e.pathIn(cat, thread), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		e.t.Fatal(err)
	}
}

// Transcript lines in the shape Claude Code writes.

func jsonLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

func userLine(text string) string {
	return jsonLine(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
}

func userLineAt(text string, at time.Time) string {
	return jsonLine(map[string]any{"type": "user", "timestamp": at.Format(time.RFC3339Nano),
		"message": map[string]any{"role": "user", "content": text}})
}

func userBlocks(texts ...string) string {
	var blocks []any
	for _, t := range texts {
		blocks = append(blocks, map[string]any{"type": "text", "text": t})
	}
	return jsonLine(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": blocks}})
}

func toolResultLine() string {
	return jsonLine(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "file contents"}}}})
}

func assistantLine(text string) string {
	return jsonLine(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant",
		"content": []any{map[string]any{"type": "text", "text": text}}}})
}

func metaLine(text string) string {
	return jsonLine(map[string]any{"type": "user", "isMeta": true, "message": map[string]any{"role": "user", "content": text}})
}

// adopt adopts key from thread of the default catalog (the file must exist).
func (e *env) adopt(key, thread string) awareness.UpstreamLink {
	e.t.Helper()
	return e.adoptFrom(catalogID, key, thread)
}

func (e *env) adoptFrom(cat, key, thread string) awareness.UpstreamLink {
	e.t.Helper()
	l, err := e.svc.AdoptSession(e.ctx, key, nil, cat, thread)
	if err != nil {
		e.t.Fatalf("AdoptSession(%s, %s/%s): %v", key, cat, thread, err)
	}
	return l
}

func (e *env) watch(watcher, target string) {
	e.t.Helper()
	r, err := e.svc.Watch(e.ctx, watcher, target, nil)
	if err != nil || !r.Watched {
		e.t.Fatalf("Watch(%s, %s) = %+v, %v", watcher, target, r, err)
	}
}

// cycle runs one monitor cycle and fails on an error.
func (e *env) cycle() upstream.CycleStats {
	e.t.Helper()
	st, err := e.mon.RunOnce(e.ctx)
	if err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
	// What the cycle committed is published off the writer's path; a test that then
	// drains a subscription without waiting must see it all.
	e.svc.Flush()
	return st
}

func (e *env) link(key string) (awareness.UpstreamLink, bool) {
	e.t.Helper()
	ref, err := awareness.ResolveSession(key, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	l, ok, err := e.store.UpstreamLink(e.ctx, ref)
	if err != nil {
		e.t.Fatalf("UpstreamLink: %v", err)
	}
	return l, ok
}

func (e *env) mustLink(key string) awareness.UpstreamLink {
	e.t.Helper()
	l, ok := e.link(key)
	if !ok {
		e.t.Fatalf("no upstream link on %s", key)
	}
	return l
}

// events returns the session's whole retained log.
func (e *env) events(key string) []awareness.Event {
	e.t.Helper()
	zero := int64(0)
	st, err := e.svc.SessionStatus(e.ctx, key, nil, &zero, nil)
	if err != nil {
		e.t.Fatalf("SessionStatus: %v", err)
	}
	return st.Changes.Events
}

// eventsOf returns the events of one kind.
func (e *env) eventsOf(key string, kind awareness.EventKind) []awareness.Event {
	e.t.Helper()
	var out []awareness.Event
	for _, ev := range e.events(key) {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func (e *env) pending(watcher string) []awareness.Notice {
	e.t.Helper()
	ns, err := e.svc.PendingNotices(e.ctx, watcher)
	if err != nil {
		e.t.Fatalf("PendingNotices: %v", err)
	}
	return ns
}

func (e *env) ownPrompt(key, text string) {
	e.t.Helper()
	ok, err := e.svc.RecordOwnPrompt(e.ctx, key, nil, text)
	if err != nil || !ok {
		e.t.Fatalf("RecordOwnPrompt = %v, %v", ok, err)
	}
}

// drain returns what a hub subscription received so far, without waiting: the hub
// publishes synchronously inside RecordEvent, so after RunOnce everything is there.
func drain[T any](sub *hubtest.Sub[T]) []T {
	var out []T
	for {
		select {
		case v, ok := <-sub.C:
			if !ok {
				return out
			}
			out = append(out, *v)
		default:
			return out
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// adoptedWatched creates thread with some history, adopts it as adoptedKey and lets
// watcherKey watch it; it returns the link.
func (e *env) adoptedWatched(thread string) awareness.UpstreamLink {
	e.t.Helper()
	e.write(thread, userLine("old history prompt")+assistantLine("old answer"))
	l := e.adopt(adoptedKey, thread)
	e.watch(watcherKey, adoptedKey)
	return l
}
