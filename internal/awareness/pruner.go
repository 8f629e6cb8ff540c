package awareness

import (
	"context"
	"log/slog"
	"time"

	"github.com/awareness/awareness/internal/startstop"
)

// Retention defaults (SIG-6, WAT-5).
const (
	DefaultRetention     = 30 * 24 * time.Hour
	DefaultMaxRows       = 50000
	DefaultPruneInterval = time.Hour
)

// PrunerConfig configures a Pruner.
type PrunerConfig struct {
	Store Store
	// Publish, when set, gets the closed notices of expired cursors, after the commit
	// (Service.PublishCommitted: in order with the service's own writes).
	Publish func(...Notice)
	// Policy is what a periodic pass applies. NewPruner sets its ExpireEvery, when 0,
	// to half the interval: cursor expiry reads every cursor, and the passes of several
	// processes sharing the database need not each do it. The pass at start skips it
	// when it ran within the last two intervals (StartExpireEvery): a process that
	// starts beside serving ones (a deploy, a rolling restart) leaves it to their
	// periodic passes, and one that starts after they stopped (or kept restarting
	// before a periodic pass came) does it.
	Policy   RetentionPolicy
	Interval time.Duration
	// StartExpireEvery is the pass at start's Policy.ExpireEvery; 0 means twice the
	// interval.
	StartExpireEvery time.Duration
	Logger           *slog.Logger
	Now              func() time.Time
}

// Pruner applies retention (SIG-6) and cursor expiry (WAT-5): once when started, then
// every Interval; cursor expiry is skipped by a pass that comes soon after the last
// one of any process (see PrunerConfig). It owns one goroutine between Start and Stop.
type Pruner struct {
	cfg       PrunerConfig
	lifecycle startstop.Base
}

// NewPruner returns a stopped pruner.
func NewPruner(cfg PrunerConfig) *Pruner {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPruneInterval
	}
	if cfg.Policy.ExpireEvery == 0 {
		cfg.Policy.ExpireEvery = cfg.Interval / 2
	}
	if cfg.StartExpireEvery == 0 {
		cfg.StartExpireEvery = 2 * cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Pruner{cfg: cfg}
}

// RunOnce prunes now, as a periodic pass does.
func (p *Pruner) RunOnce(ctx context.Context) (PruneResult, error) {
	return p.run(ctx, p.cfg.Policy)
}

func (p *Pruner) run(ctx context.Context, pol RetentionPolicy) (PruneResult, error) {
	start := time.Now()
	res, err := p.cfg.Store.Prune(ctx, pol, p.cfg.Now().UTC())
	if err != nil {
		p.cfg.Logger.Warn("prune failed", "err", err)
		return res, err
	}
	if p.cfg.Publish != nil {
		p.cfg.Publish(res.Closed...)
	}
	p.cfg.Logger.Info("pruned", "events_deleted", res.EventsDeleted, "cursors_expired", res.CursorsExpired,
		"cursor_expiry_skipped", res.ExpirySkipped, "sessions_stamped", res.SessionsStamped, "acks_deleted", res.AcksDeleted, "took", time.Since(start))
	return res, nil
}

// Start prunes at once and then every interval until Stop. Starting a started pruner
// does nothing.
func (p *Pruner) Start(ctx context.Context) { p.lifecycle.Start(ctx, p.loop) }

// Stop ends the pruner and waits for its goroutine. Stopping a stopped (or never
// started) pruner does nothing.
func (p *Pruner) Stop() { p.lifecycle.Stop() }

func (p *Pruner) loop(ctx context.Context) {
	first := p.cfg.Policy
	first.ExpireEvery = p.cfg.StartExpireEvery
	_, _ = p.run(ctx, first)
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = p.RunOnce(ctx)
		}
	}
}
