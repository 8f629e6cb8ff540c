// Package bus is the hint bus of a PostgreSQL deployment on NATS (serve --bus): the
// processes sharing one database tell one another, after each commit, which watchers'
// notices and which sessions' events changed, on NATS core subjects (no JetStream).
// A process subscribes only to the subjects of what its own subscribers wait for, so a
// hint of no interest to a process never reaches it.
//
// A message is a wake-up hint, never data: PostgreSQL stays the only source of truth.
// The reader (models.Listener) subscribes, waits until the server has the
// subscription (Sync), then reads durable state; a message lost on the way (the
// server restarted, a full buffer) is announced as a gap and answered with a rescan,
// and the safety poll catches whatever else is missed.
//
// One Bus is one NATS connection: it publishes and receives, with NoEcho, so that a
// process never receives its own hints (it has published their notices already).
// nats.go reconnects by itself; a Bus reports every (re)connect on Gaps.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of a Bus.
const (
	// MessageBuffer is how many received messages wait for the reader; beyond it
	// nats.go drops messages (a slow consumer), which the Bus reports as a gap.
	MessageBuffer = 8192
	// SyncTimeout bounds Sync, a round trip to the server.
	SyncTimeout = 5 * time.Second
	// ReconnectBuffer is how many bytes of messages published while the connection
	// is down nats.go keeps to send once it is back.
	ReconnectBuffer = 8 << 20

	reconnectWait   = 100 * time.Millisecond
	reconnectJitter = 100 * time.Millisecond
	reconnectMax    = 5 * time.Second
	pingInterval    = 10 * time.Second
	connectTimeout  = 5 * time.Second
)

// Config configures a Bus.
type Config struct {
	// URL is the NATS server (nats://host:4222, or several, comma-separated, of one
	// cluster). User and password in the URL authenticate.
	URL string
	// Name names the connection on the server (its monitoring shows it).
	Name   string
	Logger *slog.Logger
}

// Bus is one NATS connection carrying hints. Its methods are safe for concurrent use.
type Bus struct {
	nc   *nats.Conn
	log  *slog.Logger
	msgs chan *nats.Msg
	// out delivers the data of msgs; a goroutine moves them, so that the reader
	// gets plain bytes and never sees nats.go's types.
	out  chan []byte
	gaps chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu   sync.Mutex
	subs map[string]*nats.Subscription
	// subscribed counts Subscribe calls; synced is the count the server is known to
	// have (a Sync's round trip after them). A (re)connect resets synced.
	subscribed, synced uint64

	published, dropped atomic.Int64
}

// CheckURL validates a --bus value without connecting: one or more nats:// (or tls://)
// URLs with a host, comma-separated.
func CheckURL(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return errors.New("empty URL")
	}
	for _, one := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			return fmt.Errorf("%q is not a URL", Redact(one))
		}
		if u.Scheme != "nats" && u.Scheme != "tls" {
			return fmt.Errorf("%q: want nats://host:port (or tls://)", Redact(one))
		}
		if u.Host == "" || u.Hostname() == "" {
			return fmt.Errorf("%q has no host", Redact(one))
		}
		if u.Path != "" && u.Path != "/" {
			return fmt.Errorf("%q: a NATS URL has no path", Redact(one))
		}
	}
	return nil
}

// Redact returns raw with passwords and tokens replaced, for logs.
func Redact(raw string) string {
	parts := strings.Split(raw, ",")
	for i, one := range parts {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			parts[i] = "(unparsable)"
			continue
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			} else {
				u.User = url.User("xxxxx") // a token
			}
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// Open connects to the server of cfg.URL. A server that cannot be reached now is not
// an error: nats.go keeps trying in the background, and the first connect is reported
// on Gaps like every reconnect. Close the Bus when done.
func Open(cfg Config) (*Bus, error) {
	if err := CheckURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("awareness/%d", os.Getpid())
	}
	b := &Bus{log: cfg.Logger, msgs: make(chan *nats.Msg, MessageBuffer), out: make(chan []byte),
		gaps: make(chan struct{}, 1), done: make(chan struct{}), subs: map[string]*nats.Subscription{}}
	nc, err := nats.Connect(cfg.URL,
		nats.Name(cfg.Name),
		nats.NoEcho(),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(backoff),
		nats.ReconnectBufSize(ReconnectBuffer),
		nats.PingInterval(pingInterval),
		nats.Timeout(connectTimeout),
		nats.ConnectHandler(func(nc *nats.Conn) { b.connected(nc, "connected") }),
		nats.ReconnectHandler(func(nc *nats.Conn) { b.connected(nc, "reconnected") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.log.Warn("bus: disconnected; reconnecting", "err", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				b.dropped.Add(1)
				b.log.Warn("bus: messages dropped (the reader fell behind); rescanning")
				b.gap()
				return
			}
			b.log.Warn("bus: error", "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", Redact(cfg.URL), err)
	}
	b.nc = nc
	if !nc.IsConnected() {
		b.log.Warn("bus: server not reachable; retrying in the background (hints wait for --notice-poll meanwhile)", "url", Redact(cfg.URL))
	}
	b.wg.Add(1)
	go b.forward()
	return b, nil
}

// backoff is the pause before reconnect attempt n (from 1): doubling from
// reconnectWait up to reconnectMax, plus up to reconnectJitter.
func backoff(attempts int) time.Duration {
	d := reconnectWait
	for i := 1; i < attempts && d < reconnectMax; i++ {
		d *= 2
	}
	return min(d, reconnectMax) + rand.N(reconnectJitter)
}

// connected runs on nats.go's callback goroutine after a (re)connect: nats.go has sent
// every subscription again, and messages published meanwhile may be lost, so the
// reader must rescan (after a Sync: the server then has the subscriptions).
func (b *Bus) connected(nc *nats.Conn, what string) {
	b.mu.Lock()
	b.synced = 0
	b.mu.Unlock()
	b.log.Info("bus: "+what, "server", Redact(nc.ConnectedUrlRedacted()))
	b.gap()
}

func (b *Bus) gap() {
	select {
	case b.gaps <- struct{}{}:
	default: // one pending gap stands for any number
	}
}

// forward hands the data of received messages to Messages until Close.
func (b *Bus) forward() {
	defer b.wg.Done()
	for {
		select {
		case <-b.done:
			return
		case m := <-b.msgs:
			select {
			case b.out <- m.Data:
			case <-b.done:
				return
			}
		}
	}
}

// Publish sends data on subject. It does not wait for the server: nats.go writes it in
// the background, and keeps it while the connection is down (up to ReconnectBuffer).
func (b *Bus) Publish(subject string, data []byte) error {
	if err := b.nc.Publish(subject, data); err != nil {
		return fmt.Errorf("bus: publish: %w", err)
	}
	b.published.Add(1)
	return nil
}

// Subscribe starts delivering the messages of subject (NATS wildcards allowed) on
// Messages. It does not wait for the server (see Sync); subscribing to a subject
// subscribed already does nothing.
func (b *Bus) Subscribe(subject string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[subject]; ok {
		return nil
	}
	s, err := b.nc.ChanSubscribe(subject, b.msgs)
	if err != nil {
		return fmt.Errorf("bus: subscribe %q: %w", subject, err)
	}
	b.subs[subject] = s
	b.subscribed++
	return nil
}

// Unsubscribe stops the messages of subject (messages on their way may still come).
func (b *Bus) Unsubscribe(subject string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.subs[subject]
	if !ok {
		return nil
	}
	delete(b.subs, subject)
	if err := s.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("bus: unsubscribe %q: %w", subject, err)
	}
	return nil
}

// ErrNotConnected is Sync's answer while the connection is down: the reconnect
// reports a gap.
var ErrNotConnected = errors.New("bus: not connected")

// Sync returns once the server has every subscription made before the call (a
// round trip, only when one was made since the last Sync), so that a message
// published after Sync returns reaches them. While the connection is down it returns
// ErrNotConnected at once; the reconnect then reports a gap. force makes the round
// trip in any case.
func (b *Bus) Sync(ctx context.Context, force bool) error {
	b.mu.Lock()
	want := b.subscribed
	if !force && b.synced >= want {
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	if !b.nc.IsConnected() {
		return ErrNotConnected
	}
	ctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("bus: sync: %w", err)
	}
	b.mu.Lock()
	b.synced = max(b.synced, want)
	b.mu.Unlock()
	return nil
}

// Messages delivers the data of the messages received on the subjects subscribed.
func (b *Bus) Messages() <-chan []byte { return b.out }

// Gaps receives a value after every (re)connect and after messages were dropped:
// messages may have been lost since, and the reader rescans (after a forced Sync).
// Values do not queue up: one pending value stands for any number of gaps.
func (b *Bus) Gaps() <-chan struct{} { return b.gaps }

// Connected reports whether the connection is up.
func (b *Bus) Connected() bool { return b.nc.IsConnected() }

// Stats are counters of a Bus, for tests and measurements.
type Stats struct {
	Published, Dropped int64 // messages published, drops reported (slow consumer)
	Subjects           int   // subjects subscribed
	InMsgs, InBytes    uint64
	OutMsgs, OutBytes  uint64
	Reconnects         uint64
}

// Stats returns the Bus's counters.
func (b *Bus) Stats() Stats {
	b.mu.Lock()
	n := len(b.subs)
	b.mu.Unlock()
	s := b.nc.Stats()
	return Stats{Published: b.published.Load(), Dropped: b.dropped.Load(), Subjects: n,
		InMsgs: s.InMsgs, InBytes: s.InBytes, OutMsgs: s.OutMsgs, OutBytes: s.OutBytes, Reconnects: s.Reconnects}
}

// Close flushes what was published (for up to a second) and closes the connection.
// Closing a closed Bus does nothing.
func (b *Bus) Close() {
	b.once.Do(func() {
		if b.nc.IsConnected() {
			if err := b.nc.FlushTimeout(time.Second); err != nil {
				b.log.Warn("bus: flush at close", "err", err)
			}
		}
		b.nc.Close()
		close(b.done)
		b.wg.Wait()
	})
}
