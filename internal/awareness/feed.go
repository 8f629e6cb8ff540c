package awareness

import (
	"context"
	"strconv"
	"time"

	"github.com/awareness/awareness/internal/startstop"
)

// A feed is a stream subscription (SubscribeEventFeed, SubscribeNoticeFeed) that can
// resume and says where it stands:
//
//   - FEED-1: an event feed of one session resumes after a sequence. The subscription
//     is registered with the hub first (live events are held back), then the log after
//     the sequence is read from the store, then the held live events follow, minus
//     those the read already had: a session's sequences are dense (SIG-3), so a live
//     event at or below the last one sent is a copy, and one above the next is a gap
//     (an event this process never heard of, e.g. a PostgreSQL hint lost with its
//     listener's connection) that ends the subscription with ErrFeedGap, for the
//     client to resume from its last sequence. A sequence below the retained history
//     is refused with HISTORY_GAP, one above the head with CURSOR_AHEAD.
//   - FEED-3: with marks, the sink's Mark gets one FeedSynced right after the backlog
//     (the pending notices, the replayed events) and a FeedBookmark whenever nothing
//     was sent between two of Hub.Bookmark's ticks. The bookmarks of every feed come
//     from one ticker (FeedTicker): an idle feed holds no goroutine and no timer.

// FeedMarkKind names a marker of a feed (FEED-3).
type FeedMarkKind uint8

const (
	// FeedSynced follows a feed's backlog, once: everything pending or replayed when
	// the feed started has been sent, and live values follow.
	FeedSynced FeedMarkKind = iota + 1
	// FeedBookmark is sent while a feed is idle: the feed is alive, and (on an event
	// feed of one session) every event up to Sequence has been sent.
	FeedBookmark
)

// FeedMark is a marker of a feed (FEED-3): a FeedSynced or a FeedBookmark.
type FeedMark struct {
	Kind FeedMarkKind
	// Sequenced is true on an event feed of one session. Sequence is then the last
	// sequence the feed sent (the sequence it resumed after, or the head it started
	// at, when it sent none): every event of the session up to it was sent, and
	// afterSequence Sequence resumes the feed.
	Sequenced bool
	Sequence  int64
	// Replayed is, on FeedSynced, how many values the backlog held.
	Replayed int
	// At is the service clock when the marker was made.
	At time.Time
}

// FeedOptions are what a feed adds to a plain stream subscription.
type FeedOptions struct {
	// After, on an event feed of one session, replays the session's log after this
	// sequence before the live events (FEED-1). Nil starts at the next append.
	After *int64
	// Marks sends the sink's Mark one FeedSynced after the backlog and a FeedBookmark
	// while idle (FEED-3). It needs Sink.Mark.
	Marks bool
}

// ErrFeedGap ends an event feed of one session that was handed an event past the
// next sequence (see the comment at the top of feed.go). Like ErrSlowSubscriber, which
// it wraps (errors.Is), it is resumable: the transport ends the stream the same way,
// and the client resumes after the last sequence it received.
var ErrFeedGap = &Error{Code: EUNAVAILABLE, Err: ErrSlowSubscriber,
	Message: "the feed missed events of its session: subscribe again with afterSequence set to the last sequence received"}

// feed is a stream's part of a feed. Every field is guarded by Sub.mu.
type feed[T any] struct {
	// seq, on an event feed of one session, is a value's sequence; last is the last
	// sequence sent (see admit).
	seq  func(*T) int64
	last int64
	// marks sends FeedMarks to the stream's sink.
	marks bool
	// sent is set by anything sent, cleared by a bookmark tick that finds it set.
	sent bool
	// gap is set when admit found a gap: the subscription then ends with ErrFeedGap.
	gap bool
	now func() time.Time
}

type feedVerdict uint8

const (
	feedPass feedVerdict = iota // send it
	feedSkip                    // a copy of a value sent already
	feedGap                     // values are missing before it
)

// admit decides about a live value of the feed.
func (f *feed[T]) admit(p *T) feedVerdict {
	if f.seq == nil {
		return feedPass
	}
	switch s := f.seq(p); {
	case s <= f.last:
		return feedSkip
	case s == f.last+1:
		f.last = s
		return feedPass
	default:
		f.gap = true
		return feedGap
	}
}

func (f *feed[T]) mark(kind FeedMarkKind, replayed int, at time.Time) FeedMark {
	return FeedMark{Kind: kind, Sequenced: f.seq != nil, Sequence: f.last, Replayed: replayed, At: at.UTC()}
}

// eventSequence is the seq of an event feed of one session.
func eventSequence(e *Event) int64 { return e.Sequence }

// DefaultFeedBookmark is the longest an idle feed goes without a FeedBookmark
// (FEED-3): FeedTicker's default interval.
const DefaultFeedBookmark = 30 * time.Second

// FeedTicker is the one ticker of every feed's bookmarks (FEED-3): it calls
// Hub.Bookmark every half interval, so that a feed idle for an interval gets a
// FeedBookmark and one that sends nothing gets one every interval, without a timer or
// a goroutine per feed. It owns one goroutine between Start and Stop.
type FeedTicker struct {
	hub       *Hub
	interval  time.Duration
	now       func() time.Time
	lifecycle startstop.Base
}

// NewFeedTicker returns a stopped ticker of hub's feeds; interval ≤ 0 means
// DefaultFeedBookmark, now nil means time.Now.
func NewFeedTicker(hub *Hub, interval time.Duration, now func() time.Time) *FeedTicker {
	if interval <= 0 {
		interval = DefaultFeedBookmark
	}
	if now == nil {
		now = time.Now
	}
	return &FeedTicker{hub: hub, interval: interval, now: now}
}

// Start starts the ticker (nothing when it runs); it stops with ctx or Stop.
func (t *FeedTicker) Start(ctx context.Context) {
	t.lifecycle.Start(ctx, func(ctx context.Context) {
		tick := time.NewTicker(t.interval / 2)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				t.hub.Bookmark(t.now())
			}
		}
	})
}

// Stop stops the ticker and waits for its goroutine.
func (t *FeedTicker) Stop() { t.lifecycle.Stop() }

// checkAfter checks a feed's afterSequence against a read of its session: below the
// retained history is HISTORY_GAP (with the earliest sequence available), above the
// head CURSOR_AHEAD (FEED-1; the rules of REC-2 and REC-3).
func checkAfter(after int64, ch Changes) error {
	if after > ch.Head.Version {
		return &Error{Code: ECURSORAHEAD, Message: "afterSequence " + strconv.FormatInt(after, 10) + " is ahead of the session's stateVersion " +
			strconv.FormatInt(ch.Head.Version, 10) + "; the cursor belongs to another session or a deleted incarnation: refresh the whole session state"}
	}
	if after < ch.Head.PrunedThrough {
		return &Error{Code: EHISTORYGAP, Details: map[string]any{"earliestAvailableSequence": ch.Earliest},
			Message: "afterSequence " + strconv.FormatInt(after, 10) + " is below the session's retained history (pruned through " +
				strconv.FormatInt(ch.Head.PrunedThrough, 10) + ", earliest available " + strconv.FormatInt(ch.Earliest, 10) +
				"): refresh the whole session state, then follow it from its stateVersion"}
	}
	return nil
}
