package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/startstop"
)

// Cadence and limits of the monitor (UPS-2, UPS-4, UPS-5).
const (
	DefaultFirstCheck = 15 * time.Second
	DefaultInterval   = 60 * time.Second
	// MaxScanBytes is how much of one transcript a check reads at most.
	MaxScanBytes = 1 << 20
	// MissingThreshold is how many checks in a row must not find a thread before it
	// is declared missing.
	MissingThreshold = 3
	// settleBatch bounds how many link settlements, and separately how many activity
	// events, share one write transaction.
	settleBatch = 256
)

// Recorder appends events; *awareness.Service is the one the monitor uses by default.
type Recorder interface {
	RecordEvent(ctx context.Context, in awareness.RecordInput) (awareness.RecordResult, error)
}

// BatchRecorder is a Recorder that can also append several events in one
// all-or-nothing transaction. The monitor commits the activity of a batch of links
// with it when it can, and one event at a time when the batch fails.
type BatchRecorder interface {
	Recorder
	RecordEvents(ctx context.Context, ins []awareness.RecordInput) ([]awareness.RecordResult, error)
}

// Config configures a Monitor.
type Config struct {
	// Service gives the catalogs, the self-echo test and, by default, the store, the
	// recorder and the clock. Required.
	Service *awareness.Service
	// Store defaults to the service's store, which must implement UpstreamStore.
	Store awareness.UpstreamStore
	// Recorder defaults to Service.
	Recorder Recorder
	// FirstCheck is the delay of the first check after Start; Interval the period of
	// the checks, counted from Start: with the defaults 15 s, 60 s, 120 s, and so on.
	FirstCheck, Interval time.Duration
	// MaxScanBytes defaults to MaxScanBytes.
	MaxScanBytes int64
	Logger       *slog.Logger
	// Now stamps checks; nil means Service.Now.
	Now func() time.Time
	// Observer is told the counts of every cycle that ran; nil: nobody.
	Observer awareness.Observer
	// AfterRecord, when set, runs after a cycle's activity events committed and before
	// their settlements apply: a test-only crash point where the e2e test holds and
	// kills the process; see AWARENESS_TEST_HOLD_UPSTREAM_SETTLEMENT in serve_config.go.
	AfterRecord func(ctx context.Context)
}

// Monitor checks the upstream threads of watched adopted sessions (UPS-2..5). It owns
// one goroutine between Start and Stop; RunOnce runs one cycle directly. Cycles never
// overlap: a cycle due while one runs is skipped.
//
// One cycle lists the links that at least one cursor targets, so unwatched links are
// never read, and checks each through its catalog:
//
//   - new external human prompts record one human_direct_message with actor human,
//     channel the catalog id, turns when more than one, and the UpstreamDedupeKey of
//     the exact byte range, "upstream:<linkId>:<start>-<end>"; the marker advances
//     only after that event committed, so a failed insert is retried by the next
//     cycle and never doubled. When the event committed but a failed write or a crash
//     lost its settlement, the next check finds the recorded range with
//     UpstreamRecordedEnd and scans from its end: the prompts appended since are
//     recorded once, those already recorded are not recorded again;
//   - echoes of the gateway's own prompts, and lines that are not human, only advance
//     the marker;
//   - a thread not found MissingThreshold checks in a row records one upstream_missing
//     by system, dedupe key "upstream_missing:<linkId>", and removes the link; the
//     streak is stored in the link, so it survives restarts, and any successful check
//     restarts it;
//   - an inconclusive failure changes neither the marker nor the streak and shows in
//     the link's blocked reason.
//
// Every settlement is a compare-and-set on the link as read: a link adopted again
// during its check is left alone and gets no event from the check. Settlements of a
// batch share one transaction; when it fails, each is applied on its own, so one
// link's failing write never holds back another's marker (UPS-2).
type Monitor struct {
	cfg Config
	svc *awareness.Service
	st  awareness.UpstreamStore
	rec Recorder
	log *slog.Logger
	now func() time.Time

	cycle   func(ctx context.Context) (CycleStats, error) // RunOnce; tests replace it
	running sync.Mutex                                    // held by a running cycle

	lifecycle startstop.Base
}

// CycleStats reports one cycle.
type CycleStats struct {
	Skipped bool // another cycle was running
	Links   int  // watched links listed
	Checked int  // links scanned
	Events  int  // human_direct_message events recorded
	Missing int  // upstream_missing events recorded (links removed)
	Misses  int  // checks that did not find the transcript
	Blocked int  // links that cannot advance
	Errors  int  // links whose check failed (retried next cycle)
}

// New returns a stopped monitor.
func New(cfg Config) (*Monitor, error) {
	if cfg.Service == nil {
		return nil, errors.New("upstream: Config.Service is nil")
	}
	if cfg.Store == nil {
		st, err := cfg.Service.UpstreamStore()
		if err != nil {
			return nil, err
		}
		cfg.Store = st
	}
	if cfg.Recorder == nil {
		cfg.Recorder = cfg.Service
	}
	if cfg.FirstCheck <= 0 {
		cfg.FirstCheck = DefaultFirstCheck
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxScanBytes <= 0 {
		cfg.MaxScanBytes = MaxScanBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Service.Now
	}
	cfg.Observer = awareness.ObserverOr(cfg.Observer)
	m := &Monitor{cfg: cfg, svc: cfg.Service, st: cfg.Store, rec: cfg.Recorder, log: cfg.Logger, now: cfg.Now}
	m.cycle = m.RunOnce
	return m, nil
}

// Start checks after FirstCheck and then every Interval until Stop. Starting a started
// monitor does nothing.
func (m *Monitor) Start(ctx context.Context) { m.lifecycle.Start(ctx, m.loop) }

func (m *Monitor) loop(ctx context.Context) {
	first := time.NewTimer(m.cfg.FirstCheck)
	defer first.Stop()
	every := time.NewTicker(m.cfg.Interval)
	defer every.Stop()
	run := func() {
		if ctx.Err() != nil { // a tick and Stop at once: stop
			return
		}
		st, err := m.cycle(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			m.log.Warn("upstream check failed", "err", err)
		case err == nil && !st.Skipped:
			m.log.Debug("upstream checked", "links", st.Links, "checked", st.Checked, "events", st.Events,
				"missing", st.Missing, "blocked", st.Blocked, "errors", st.Errors)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-first.C:
			run()
		case <-every.C:
			run()
		}
	}
}

// Stop aborts a running cycle, waits for the goroutine and returns. Stopping a stopped
// or never started monitor does nothing.
func (m *Monitor) Stop() { m.lifecycle.Stop() }

// RunOnce runs one cycle now, unless one is running: then Skipped is true. Cancelling
// ctx aborts it: links not yet settled are checked again by a later cycle.
func (m *Monitor) RunOnce(ctx context.Context) (CycleStats, error) {
	if !m.running.TryLock() {
		return CycleStats{Skipped: true}, nil
	}
	defer m.running.Unlock()
	var st CycleStats
	defer func() { m.cfg.Observer.UpstreamCycle(st.Checked, st.Events, st.Misses) }()
	if err := ctx.Err(); err != nil {
		return st, err
	}
	if _, err := m.st.ForgetUnwatchedMisses(ctx); err != nil {
		return st, err
	}
	links, err := m.st.UpstreamLinks(ctx, awareness.UpstreamQuery{Watched: true})
	if err != nil {
		return st, err
	}
	st.Links = len(links)
	var (
		pending []awareness.UpstreamCheck // settlements ready to apply
		acts    []activity                // settlements waiting for their event
	)
	flush := func() error {
		pending = append(pending, m.record(ctx, acts, &st)...)
		acts = acts[:0]
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(pending) == 0 {
			return nil
		}
		if err := m.settle(ctx, pending, &st); err != nil {
			return err
		}
		pending = pending[:0]
		return nil
	}
	for _, l := range links {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		c, act, ok := m.check(ctx, l, &st)
		switch {
		case act != nil:
			acts = append(acts, activity{check: c, in: *act})
		case ok:
			pending = append(pending, c)
		}
		if len(pending) >= settleBatch || len(acts) >= settleBatch {
			if err := flush(); err != nil {
				return st, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	return st, flush()
}

// settle applies checks in one transaction, and when that fails, one by one: a link
// whose own settlement fails keeps its marker, and its next check retries and finds
// its recorded event with UpstreamRecordedEnd; the others settle in this cycle
// (UPS-2). It returns ctx's error only.
func (m *Monitor) settle(ctx context.Context, checks []awareness.UpstreamCheck, st *CycleStats) error {
	applied, err := m.st.SettleUpstream(ctx, checks)
	if err != nil && ctx.Err() == nil && len(checks) > 1 {
		m.log.Warn("upstream settlements failed together; settling one by one", "links", len(checks), "err", err)
		applied, err = make([]bool, len(checks)), nil
		for i, c := range checks {
			one, oneErr := m.st.SettleUpstream(ctx, []awareness.UpstreamCheck{c})
			if oneErr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				m.settleFailed(c, oneErr, st)
				applied[i] = true // failed, not changed: logged once above
				continue
			}
			applied[i] = one[0]
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.settleFailed(checks[0], err, st)
		return nil
	}
	for i, ok := range applied {
		if !ok {
			l := checks[i].Expect
			m.log.Info("upstream link changed during its check; it is checked again next cycle",
				"session", l.Session.Key, "agent", l.Session.AgentID)
		}
	}
	return nil
}

func (m *Monitor) settleFailed(c awareness.UpstreamCheck, err error, st *CycleStats) {
	st.Errors++
	l := c.Expect
	m.log.Warn("upstream link not settled; its marker stays and the next cycle retries",
		"session", l.Session.Key, "agent", l.Session.AgentID, "err", err)
}

// activity is a link whose check found external prompts: the event to record and the
// settlement to apply once it is committed.
type activity struct {
	check awareness.UpstreamCheck
	in    awareness.RecordInput
}

// record commits the events of acts and returns the settlements of those that
// committed, recorded or deduplicated. A link changed since its scan gets neither.
// With a BatchRecorder the events share one transaction; if that fails, each is tried
// on its own so that one bad link does not hold back the others.
func (m *Monitor) record(ctx context.Context, acts []activity, st *CycleStats) []awareness.UpstreamCheck {
	var live []activity
	for _, a := range acts {
		if m.unchanged(ctx, a.check.Expect) {
			live = append(live, a)
		}
	}
	if len(live) == 0 || ctx.Err() != nil {
		return nil
	}
	var out []awareness.UpstreamCheck
	if br, ok := m.rec.(BatchRecorder); ok && len(live) > 1 {
		ins := make([]awareness.RecordInput, len(live))
		for i, a := range live {
			ins[i] = a.in
		}
		if _, err := br.RecordEvents(ctx, ins); err == nil {
			for _, a := range live {
				out = append(out, a.check)
			}
			st.Events += len(live)
			m.afterRecord(ctx)
			return out
		} else if ctx.Err() != nil {
			return nil
		} else {
			m.log.Warn("upstream activity batch not recorded; recording one by one", "links", len(live), "err", err)
		}
	}
	for _, a := range live {
		if _, err := m.rec.RecordEvent(ctx, a.in); err != nil {
			if ctx.Err() != nil {
				return out
			}
			st.Errors++
			l := a.check.Expect
			m.log.Warn("upstream activity not recorded; the marker stays and the next cycle retries",
				"session", l.Session.Key, "agent", l.Session.AgentID, "err", err)
			continue
		}
		st.Events++
		out = append(out, a.check)
	}
	if len(out) > 0 {
		m.afterRecord(ctx)
	}
	return out
}

func (m *Monitor) afterRecord(ctx context.Context) {
	if m.cfg.AfterRecord != nil {
		m.cfg.AfterRecord(ctx)
	}
}

// check checks one link and returns its settlement; ok is false when the link must be
// left as it is because it changed or the cycle was aborted. When the scan found
// external prompts, act is the event to commit before the settlement may apply.
func (m *Monitor) check(ctx context.Context, l awareness.UpstreamLink, st *CycleStats) (c awareness.UpstreamCheck, act *awareness.RecordInput, ok bool) {
	log := m.log.With("session", l.Session.Key, "agent", l.Session.AgentID, "catalog", l.CatalogID)
	keep := awareness.UpstreamCheck{Expect: l, Marker: l.Marker, ConsecutiveMisses: l.ConsecutiveMisses,
		BlockedReason: l.BlockedReason, CheckedAt: m.now().UTC()}
	cat, ok := m.svc.Catalog(l.CatalogID)
	if !ok {
		st.Blocked++
		keep.BlockedReason = fmt.Sprintf("catalog %s is not configured", l.CatalogID)
		return keep, nil, true
	}

	// The self-echo list is loaded only when the scan meets a human prompt.
	var (
		isOwn   func(string) bool
		loadErr error
	)
	own := func(text string) bool {
		if isOwn == nil && loadErr == nil {
			isOwn, loadErr = m.svc.OwnPromptMatcher(ctx, l.Session)
		}
		return loadErr == nil && isOwn(text)
	}
	st.Checked++
	// The scan starts past every range already recorded but not settled: the event
	// committed, and its settlement failed or the process died in between.
	start, err := m.recordedEnd(ctx, l)
	if err != nil {
		if ctx.Err() != nil {
			return keep, nil, false
		}
		st.Errors++
		log.Warn("upstream check inconclusive: recorded ranges unreadable", "err", err)
		keep.BlockedReason = awareness.ErrorMessage(err)
		return keep, nil, true
	}
	res, err := cat.Scan(ctx, awareness.ScanRequest{ThreadID: l.ThreadID, Marker: start, MaxBytes: m.cfg.MaxScanBytes, IsOwn: own})
	if ctx.Err() != nil {
		return keep, nil, false
	}
	if err == nil {
		err = loadErr
	}
	if err != nil {
		st.Errors++
		log.Warn("upstream check inconclusive", "err", err)
		keep.BlockedReason = awareness.ErrorMessage(err)
		return keep, nil, true
	}

	if res.Missing {
		st.Misses++
		misses := l.ConsecutiveMisses + 1
		if misses < MissingThreshold {
			keep.ConsecutiveMisses = misses
			keep.BlockedReason = fmt.Sprintf("upstream transcript not found (%d of %d checks)", misses, MissingThreshold)
			return keep, nil, true
		}
		c, ok := m.missing(ctx, l, cat.ID(), keep, st, log)
		return c, nil, ok
	}

	if res.Next < start {
		st.Errors++
		log.Error("catalog moved the marker backwards; ignored", "marker", start, "next", res.Next)
		return keep, nil, false
	}
	if res.Blocked != "" {
		st.Blocked++
	}
	c = awareness.UpstreamCheck{Expect: l, Marker: res.Next, ConsecutiveMisses: 0, BlockedReason: res.Blocked, CheckedAt: keep.CheckedAt}
	if res.Turns == 0 {
		return c, nil, true
	}
	channel := cat.ID()
	dedupe := awareness.UpstreamDedupeKey(l.ID, start, res.Next)
	in := awareness.RecordInput{
		SessionKey: l.Session.Key, AgentID: &l.Session.AgentID,
		Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman,
		Channel: &channel, DedupeKey: &dedupe,
	}
	if res.Turns > 1 {
		turns := res.Turns
		in.Turns = &turns
	}
	if !res.LastAt.IsZero() {
		at := res.LastAt
		in.OccurredAt = &at
	}
	return c, &in, true
}

// recordedEnd returns where the link's scan starts: its marker, moved past every
// range whose activity event UpstreamRecordedEnd finds recorded. Each step moves
// forward, so the walk ends.
func (m *Monitor) recordedEnd(ctx context.Context, l awareness.UpstreamLink) (int64, error) {
	start := l.Marker
	for {
		end, ok, err := m.st.UpstreamRecordedEnd(ctx, l.Session, l.ID, start)
		if err != nil {
			return 0, err
		}
		if !ok || end <= start {
			return start, nil
		}
		m.log.Info("upstream range already recorded, settlement pending; scanning after it",
			"session", l.Session.Key, "agent", l.Session.AgentID, "from", start, "to", end)
		start = end
	}
}

// missing handles the check that reached MissingThreshold: record upstream_missing,
// then remove the link. If the record fails, the streak is left one short of the
// threshold, so the next miss tries again; the dedupe key prevents a double.
func (m *Monitor) missing(ctx context.Context, l awareness.UpstreamLink, channel string, keep awareness.UpstreamCheck,
	st *CycleStats, log *slog.Logger) (awareness.UpstreamCheck, bool) {
	if !m.unchanged(ctx, l) {
		return keep, false
	}
	dedupe := "upstream_missing:" + l.ID
	_, err := m.rec.RecordEvent(ctx, awareness.RecordInput{
		SessionKey: l.Session.Key, AgentID: &l.Session.AgentID,
		Kind: awareness.UpstreamMissing, ActorType: awareness.ActorSystem,
		Channel: &channel, DedupeKey: &dedupe,
	})
	if err != nil {
		if ctx.Err() != nil {
			return keep, false
		}
		st.Errors++
		log.Warn("upstream_missing not recorded; retried on the next miss", "err", err)
		keep.ConsecutiveMisses = MissingThreshold - 1
		return keep, true
	}
	st.Missing++
	removed, err := m.st.RemoveUpstream(ctx, l)
	switch {
	case err != nil:
		st.Errors++
		log.Warn("upstream link not removed after upstream_missing; retried on the next miss", "err", err)
	case !removed:
		log.Info("upstream link changed before its removal; kept")
	default:
		log.Info("upstream missing: link removed", "thread", l.ThreadID)
	}
	return keep, false
}

// unchanged re-reads the link before an event is recorded: a link adopted again or
// removed since it was scanned gets no event from that scan, see reference #116864.
func (m *Monitor) unchanged(ctx context.Context, l awareness.UpstreamLink) bool {
	log := m.log.With("session", l.Session.Key, "agent", l.Session.AgentID)
	cur, ok, err := m.st.UpstreamLink(ctx, l.Session)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("upstream link re-read failed", "err", err)
		}
		return false
	}
	if !ok || cur.ID != l.ID || cur.Marker != l.Marker || !cur.UpdatedAt.Equal(l.UpdatedAt) {
		log.Info("upstream link changed during its check; no event from this scan")
		return false
	}
	return true
}
