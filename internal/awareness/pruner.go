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
	// Policy is what a pass applies. NewPruner sets its ExpireEvery, when 0, to half
	// the interval: cursor expiry reads every cursor, and a start soon after the last
	// pass (a restart, another process sharing the database) or the passes of several
	// processes need not each do it again.
	Policy   RetentionPolicy
	Interval time.Duration
	Logger   *slog.Logger
	Now      func() time.Time
}

// Pruner applies retention (SIG-6) and cursor expiry (WAT-5): once when started, then
// every Interval; cursor expiry is skipped by a pass that comes less than
// Policy.ExpireEvery after the last one (see PrunerConfig). It owns one goroutine
// between Start and Stop.
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Pruner{cfg: cfg}
}

// RunOnce prunes now.
func (p *Pruner) RunOnce(ctx context.Context) (PruneResult, error) {
	start := time.Now()
	res, err := p.cfg.Store.Prune(ctx, p.cfg.Policy, p.cfg.Now().UTC())
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
	_, _ = p.RunOnce(ctx)
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
