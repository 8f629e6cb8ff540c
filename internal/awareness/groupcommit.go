package awareness

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// MaxGroupCommit bounds how many concurrent appends share one write transaction.
const MaxGroupCommit = 128

// groupCommitTimeout bounds one shared commit. It is not the caller's context: a batch
// carries other callers' appends, which must not fail because one caller went away.
const groupCommitTimeout = 30 * time.Second

// errLead hands the leadership of the queue to a waiting append.
var errLead = errors.New("lead the next batch")

// committer commits concurrent appends together (group commit). Appends queue up, each
// call's ops as one unit; the first call to find no commit in flight becomes the
// leader, yields while appends keep joining the queue (gather), takes queued units (its
// own first, then more while they hold up to MaxGroupCommit ops in all), commits them
// in one Store.Append transaction, hands the leadership to the oldest unit still
// queued, and returns. So an append waits at most for the commit in
// flight and then its own: there is no timer, and a lone append commits after one
// yield. Every append is acknowledged only after its transaction committed (SIG-7); the
// caller publishes its notices after that (NTC-7). No goroutine is owned.
type committer struct {
	store Store
	max   int
	obs   Observer

	mu    sync.Mutex
	busy  bool
	queue []*pendingAppend
}

// pendingAppend is one call's unit: its ops commit in one transaction or not at all.
type pendingAppend struct {
	ctx  context.Context // the caller's, for its values (a trace span) only
	ops  []*AppendOp
	done chan error // buffered: errLead or the commit's result
}

func newCommitter(store Store, max int, obs Observer) *committer {
	if max < 1 {
		max = 1
	}
	return &committer{store: store, max: max, obs: ObserverOr(obs)}
}

// append commits ops in one transaction, possibly together with concurrent appends. It
// waits for the commit even when ctx ends, since the append may already be durable:
// the caller must never be told "failed" about a committed append.
func (c *committer) append(ctx context.Context, ops ...*AppendOp) error {
	if err := RefuseCheckOnly(ctx); err != nil {
		return err
	}
	me := &pendingAppend{ctx: ctx, ops: ops, done: make(chan error, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, me)
	lead := !c.busy
	c.busy = true
	c.mu.Unlock()
	if !lead {
		if err := <-me.done; err != errLead {
			return err
		}
	}

	c.gather()
	c.mu.Lock()
	n, count := 1, len(c.queue[0].ops)
	for n < len(c.queue) && count+len(c.queue[n].ops) <= c.max {
		count += len(c.queue[n].ops)
		n++
	}
	batch := make([]*pendingAppend, n)
	copy(batch, c.queue)
	c.queue = append(c.queue[:0], c.queue[n:]...)
	c.mu.Unlock()

	c.commit(batch)

	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].done <- errLead
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	return <-me.done
}

// gatherRounds bounds how many times a leader yields to let appends join its batch.
const gatherRounds = 4

// gather lets the appends that are about to queue join the leader's batch. The appends
// of the batch just committed are waking up, and most of their callers append again at
// once; without this, the next leader would take only the appends that queued during
// that commit, so concurrent writers would settle into two alternating batches, each
// paying a commit. The leader yields while the queue keeps growing, at most
// gatherRounds times: no timer, and a lone append yields once to an idle scheduler.
func (c *committer) gather() {
	c.mu.Lock()
	n := len(c.queue)
	c.mu.Unlock()
	for range gatherRounds {
		if n >= c.max {
			return
		}
		runtime.Gosched()
		c.mu.Lock()
		m := len(c.queue)
		c.mu.Unlock()
		if m == n {
			return
		}
		n = m
	}
}

// commit runs one transaction for the batch. If a shared transaction fails for a reason
// other than the database being unavailable, each unit is retried on its own so that
// one bad append cannot fail its neighbours. The transaction's context keeps the
// values of the leader's (its trace span is the transaction's parent), not its end.
func (c *committer) commit(batch []*pendingAppend) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), groupCommitTimeout)
	defer cancel()
	var ops []*AppendOp
	for _, p := range batch {
		ops = append(ops, p.ops...)
	}
	c.obs.GroupCommit(len(ops))
	err := c.store.Append(ctx, ops)
	if err == nil || len(batch) == 1 || ErrorCode(err) == EUNAVAILABLE {
		for _, p := range batch {
			p.done <- err
		}
		return
	}
	for _, p := range batch {
		for _, op := range p.ops {
			resetAppendResult(op)
		}
		p.done <- c.store.Append(ctx, p.ops)
	}
}

func resetAppendResult(op *AppendOp) {
	op.Event, op.Recorded, op.Version, op.Opened = Event{}, false, 0, nil
}
