package client

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of RecorderOptions.
const (
	// DefaultOutboxMaxBytes bounds the undelivered events of an outbox: 64 MiB,
	// about 200,000 typical events.
	DefaultOutboxMaxBytes = 64 << 20
	// DefaultRecordTimeout is the longest Record waits for the local fsync.
	DefaultRecordTimeout = 2 * time.Second
	// DefaultSenders is the number of sessions delivered in parallel; the events of
	// one session always go through one sender, in order.
	DefaultSenders = 4
	// compactMinBytes: the outbox file is rewritten without its delivered events
	// once it is this large and at least twice its live content.
	compactMinBytes = 4 << 20
	// retryMin and retryMax bound the backoff of a delivery the service could not
	// take; RATE_LIMITED waits its retryAfterMs instead.
	retryMin = 100 * time.Millisecond
	retryMax = 5 * time.Second
	// MaxBatch is the service's bound on the events of one recordEvents request.
	MaxBatch = 200
	// batchBytes bounds the encoded events of one request, well under the service's
	// 1 MiB body limit.
	batchBytes = 512 << 10
	// rateStrikes: a batch refused this many times in a row with RATE_LIMITED is
	// split, since a batch may cost more than the token's burst.
	rateStrikes = 3
	// retryMemo bounds the timed-out Records remembered for their retry, and how long.
	retryMemoSize = 1024
	retryMemoTTL  = 10 * time.Minute
)

// Errors of Record.
var (
	// ErrOutboxFull: the outbox holds RecorderOptions.MaxBytes of undelivered events,
	// because the service has been unreachable for long. The event was not spooled.
	ErrOutboxFull = errors.New("awareness recorder: the outbox is full (the service has not taken the spooled events); the event was not recorded")
	// ErrRecordTimeout: the local fsync did not finish within RecordTimeout. The event
	// may or may not have been spooled; if it was, it is delivered.
	ErrRecordTimeout = errors.New("awareness recorder: the outbox write did not finish in time; the event may or may not be recorded")
	// ErrClosed: the Recorder is closed.
	ErrClosed = errors.New("awareness recorder: closed")
	// ErrDeliveryStopped: the service refused the client's token (UNAUTHENTICATED);
	// the Recorder delivers nothing more until Resume. Record goes on spooling: the
	// events stay in the outbox for this Recorder after Resume, or another opened on
	// it with a valid token. Err wraps it with the service's answer.
	ErrDeliveryStopped = errors.New("awareness recorder: delivery stopped: the service refused the token")
)

// Event is one event to record: the fields of the GraphQL RecordEventInput. Kind and
// ActorType take the schema's values, such as "human_direct_message" and "human".
type Event struct {
	SessionKey string `json:"sessionKey"`
	AgentID    string `json:"agentId,omitempty"`
	Kind       string `json:"kind"`
	ActorType  string `json:"actorType"`
	ActorID    string `json:"actorId,omitempty"`
	Summary    string `json:"summary,omitempty"`
	// OccurredAt defaults to the time of Record, so that an event delivered after an
	// outage keeps the time it happened; the service clamps it into the last 24 h.
	OccurredAt time.Time `json:"occurredAt,omitzero"`
	RunID      string    `json:"runId,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	Channel    string    `json:"channel,omitempty"`
	Turns      int       `json:"turns,omitempty"`
	// DedupeKey defaults to a generated random key: the service records the event once
	// however often the outbox delivers it (SIG-4). A Record that failed with
	// ErrRecordTimeout and is called again with the same event reuses the key and
	// OccurredAt of that attempt, so the retry cannot record it twice.
	DedupeKey string   `json:"dedupeKey,omitempty"`
	Watchers  []string `json:"watchers,omitempty"`
}

// Delivery is the service's answer to one delivered event.
type Delivery struct {
	Event Event
	// Recorded is false when the service had the event already.
	Recorded     bool
	Sequence     int64
	StateVersion int64
	// SkippedWatchers are the producer-passed watchers that cannot watch (WAT-4); the
	// event is recorded all the same.
	SkippedWatchers []SkippedWatcher
	// Err is set when the service refused the event for good with FORBIDDEN (the
	// token may not record for that session, CLT-1) or a rule Record's validation
	// lacks. The event is then dropped from the outbox, and the refusal also goes to
	// Errors as a *DeliveryError.
	Err error
}

// DeliveryError is a spooled event the service refused for good: it was dropped
// from the outbox.
type DeliveryError struct {
	Event Event
	Err   error
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("awareness recorder: the service refused the %s event of %s; it was dropped: %v", e.Event.Kind, e.Event.SessionKey, e.Err)
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// SkippedWatcher is a producer-passed watcher the service did not give a cursor.
type SkippedWatcher struct {
	Watcher string `json:"watcher"`
	Reason  string `json:"reason"`
}

// RecorderOptions configure OpenRecorder.
type RecorderOptions struct {
	// MaxBytes bounds the undelivered events held; default DefaultOutboxMaxBytes.
	MaxBytes int64
	// RecordTimeout bounds how long Record waits for the local fsync; default
	// DefaultRecordTimeout. Record never waits for the service.
	RecordTimeout time.Duration
	// Senders is the number of sessions delivered in parallel; default DefaultSenders.
	Senders int
	// OnDelivery, when set, is called from a sender goroutine after each event the
	// service answered for good. It must not block for long.
	OnDelivery func(Delivery)
	// BatchSize bounds the events of one recordEvents request; default and maximum
	// MaxBatch.
	BatchSize int
}

// Recorder records events through a durable local outbox (SIG-7, CLT-2).
//
// Record appends the event to the outbox file and fsyncs it before it returns,
// concurrent Records sharing one fsync, and never waits for the service: an outage
// of the service never fails or slows a turn. Sender goroutines deliver the spooled
// events in recording order per session, retrying with backoff until the service
// commits them; each event carries a dedupeKey, so an event delivered twice, after a
// lost answer or a gateway crash, is recorded once. A Recorder opened again on the
// same file after a crash delivers what the crashed one had not.
//
// One process at a time owns an outbox file, through an advisory lock on
// <path>.lock that also holds the owner's pid for the TypeScript client, which
// shares the format.
type Recorder struct {
	c    *Client
	opts RecorderOptions
	log  *slog.Logger
	path string
	lock *os.File

	wmu       sync.Mutex // serialises writes to f and compaction; before mu
	f         *os.File
	fileBytes int64
	compactAt int64 // compactMinBytes (tests lower it)

	mu        sync.Mutex
	closed    bool
	broken    error // a write failed: the file's end is unknown, Record refuses
	nextID    uint64
	pending   map[uint64]*spooled // published, undelivered
	liveBytes int64               // bytes of the put lines of pending and cur
	cur       *batch              // being filled, not yet written
	writing   int                 // entries of the batch being written
	lanes     []*lane
	idle      chan struct{} // closed and replaced when the outbox becomes empty
	stopped   error         // delivery stopped for good (ErrDeliveryStopped)
	retries   map[string]retryMemo
	single    bool // the service has no recordEvents: one recordEvent per event

	errs chan error // cap errBuffer

	flushNow chan struct{} // cap 1: wakes the flusher
	stop     chan struct{}
	ctx      context.Context // of the deliveries; cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

type spooled struct {
	id    uint64
	ev    Event
	bytes int64
}

type batch struct {
	buf     []byte
	entries []*spooled
	done    chan struct{}
	err     error
}

type lane struct {
	queue []*spooled
	wake  chan struct{} // cap 1
	size  int           // events per request now (halved when a batch is too large)
}

// retryMemo is the dedupeKey and time a timed-out Record used, for its retry.
type retryMemo struct {
	key        string
	occurredAt time.Time
	at         time.Time
}

// outboxLine is one line of the outbox file: a spooled event with ID and E, or the
// delivery of one with Done.
type outboxLine struct {
	ID   uint64 `json:"id,omitempty"`
	E    *Event `json:"e,omitempty"`
	Done uint64 `json:"done,omitempty"`
}

// OpenRecorder opens or creates the outbox file at path and starts delivering what
// it holds through c. Close stops it.
func (c *Client) OpenRecorder(path string, opts RecorderOptions) (*Recorder, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultOutboxMaxBytes
	}
	if opts.RecordTimeout <= 0 {
		opts.RecordTimeout = DefaultRecordTimeout
	}
	if opts.Senders <= 0 {
		opts.Senders = DefaultSenders
	}
	if opts.BatchSize <= 0 || opts.BatchSize > MaxBatch {
		opts.BatchSize = MaxBatch
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("awareness recorder: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("awareness recorder: the outbox %s is in use by another process", path)
	}
	// The lock file also names its owner's pid for the TypeScript client, which
	// cannot flock: a live pid there is an owner.
	if err := claimLock(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("awareness recorder: the outbox %s: %w", path, err)
	}
	r := &Recorder{
		c: c, opts: opts, log: c.log.With("component", "recorder"), path: path, lock: lock,
		pending: map[uint64]*spooled{}, idle: make(chan struct{}), retries: map[string]retryMemo{}, errs: make(chan error, errBuffer),
		flushNow: make(chan struct{}, 1), stop: make(chan struct{}), compactAt: compactMinBytes,
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	entries, err := r.load()
	if err != nil {
		lock.Close()
		r.cancel()
		return nil, err
	}
	if err := r.rewrite(entries); err != nil {
		lock.Close()
		r.cancel()
		return nil, err
	}
	for i := 0; i < opts.Senders; i++ {
		r.lanes = append(r.lanes, &lane{wake: make(chan struct{}, 1), size: opts.BatchSize})
	}
	r.mu.Lock()
	for _, s := range entries {
		r.liveBytes += s.bytes
	}
	r.publishLocked(entries)
	r.mu.Unlock()
	if len(entries) > 0 {
		r.log.Info("outbox replay", "path", path, "events", len(entries))
	}
	r.wg.Add(1 + len(r.lanes))
	go r.flusher()
	for _, l := range r.lanes {
		go r.sender(l)
	}
	return r, nil
}

// load reads the outbox file: the spooled events not delivered, in recording order.
// A torn last line is ignored: a crash cut its write, so its Record did not return
// nil.
func (r *Recorder) load() ([]*spooled, error) {
	f, err := os.Open(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("awareness recorder: %w", err)
	}
	defer f.Close()
	live := map[uint64]*spooled{}
	br := bufio.NewReaderSize(f, 1<<16)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			break // a line without its newline was torn by a crash
		}
		if err != nil {
			return nil, fmt.Errorf("awareness recorder: read %s: %w", r.path, err)
		}
		var l outboxLine
		if json.Unmarshal(line, &l) != nil {
			r.log.Warn("outbox: skipping a malformed line", "path", r.path, "line", lineNo)
			continue
		}
		if l.ID > r.nextID {
			r.nextID = l.ID
		}
		switch {
		case l.E != nil && l.ID != 0:
			live[l.ID] = &spooled{id: l.ID, ev: *l.E, bytes: int64(len(line))}
		case l.Done != 0:
			delete(live, l.Done)
		}
	}
	out := make([]*spooled, 0, len(live))
	for _, s := range live {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

// rewrite replaces the outbox file with the put lines of entries through a
// temporary file, fsync, rename and a directory fsync, and opens it for appending.
// It holds wmu or runs before the goroutines start.
func (r *Recorder) rewrite(entries []*spooled) error {
	tmp := r.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("awareness recorder: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<16)
	var n int64
	for _, s := range entries {
		line, _ := json.Marshal(outboxLine{ID: s.id, E: &s.ev})
		line = append(line, '\n') // the bytes Record and load counted in s.bytes
		n += int64(len(line))
		_, _ = w.Write(line)
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, r.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(r.path))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("awareness recorder: rewrite the outbox: %w", err)
	}
	nf, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("awareness recorder: %w", err)
	}
	if r.f != nil {
		_ = r.f.Close()
	}
	r.f, r.fileBytes = nf, n
	return nil
}

// claimLock refuses a lock file naming another live process, then writes our pid.
func claimLock(f *os.File) error {
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && pid != os.Getpid() {
		if syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM) {
			return fmt.Errorf("in use by process %d", pid)
		}
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Record spools ev durably and returns; a sender delivers it to the service later.
// It returns nil only once the event is fsync'd to the outbox: from then on the event
// reaches the service's log exactly once, whatever happens to the service or to this
// process. An event the service would refuse, such as an unknown kind or a two-line
// summary, is refused at once with the service's INVALID_ARGUMENT *Error and
// nothing is spooled (CLT-5). Record waits for the fsync at most RecordTimeout or
// until ctx ends, and never for the service. ErrOutboxFull says the outbox is at its
// bound.
func (r *Recorder) Record(ctx context.Context, ev Event) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	memo := ""
	if ev.DedupeKey == "" {
		memo = retryKey(ev)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.broken != nil {
		r.mu.Unlock()
		return fmt.Errorf("awareness recorder: the outbox cannot be written: %w", r.broken)
	}
	if memo != "" {
		if m, ok := r.retries[memo]; ok && time.Since(m.at) < retryMemoTTL {
			ev.DedupeKey = m.key
			if ev.OccurredAt.IsZero() {
				ev.OccurredAt = m.occurredAt
			}
		}
	}
	if ev.DedupeKey == "" {
		ev.DedupeKey = newDedupeKey()
	}
	if ev.OccurredAt.IsZero() {
		ev.OccurredAt = time.Now().UTC()
	}
	r.nextID++
	s := &spooled{id: r.nextID, ev: ev}
	line, err := json.Marshal(outboxLine{ID: s.id, E: &s.ev})
	if err != nil {
		r.mu.Unlock()
		return fmt.Errorf("awareness recorder: encode the event: %w", err)
	}
	line = append(line, '\n')
	s.bytes = int64(len(line))
	if r.liveBytes+s.bytes > r.opts.MaxBytes {
		r.mu.Unlock()
		return ErrOutboxFull
	}
	r.liveBytes += s.bytes
	if r.cur == nil {
		r.cur = &batch{done: make(chan struct{})}
	}
	b := r.cur
	b.buf = append(b.buf, line...)
	b.entries = append(b.entries, s)
	r.mu.Unlock()
	select {
	case r.flushNow <- struct{}{}:
	default:
	}

	t := time.NewTimer(r.opts.RecordTimeout)
	defer t.Stop()
	var out error
	select {
	case <-b.done:
		out = b.err
	case <-t.C:
		out = ErrRecordTimeout
	case <-ctx.Done():
		out = fmt.Errorf("%w (%w)", ErrRecordTimeout, ctx.Err())
	}
	if memo != "" {
		r.remember(memo, ev, errors.Is(out, ErrRecordTimeout))
	}
	return out
}

// retryKey identifies an event as its caller passed it, before the defaults, so a
// retry of a timed-out Record finds that attempt.
func retryKey(ev Event) string {
	b, _ := json.Marshal(ev)
	return string(b)
}

// remember keeps the dedupeKey of a timed-out Record of memo, and forgets it otherwise.
func (r *Recorder) remember(memo string, ev Event, timedOut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !timedOut {
		delete(r.retries, memo)
		return
	}
	if len(r.retries) >= retryMemoSize {
		var oldest string
		var at time.Time
		for k, m := range r.retries {
			if oldest == "" || m.at.Before(at) {
				oldest, at = k, m.at
			}
		}
		delete(r.retries, oldest)
	}
	r.retries[memo] = retryMemo{key: ev.DedupeKey, occurredAt: ev.OccurredAt, at: time.Now()}
}

// newDedupeKey returns 128 random bits in hex.
func newDedupeKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return "outbox-" + hex.EncodeToString(b[:])
}
