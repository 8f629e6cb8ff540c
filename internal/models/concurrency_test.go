package models

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// Concurrency across store instances: two stores on one database stand for two
// processes (two pools, no shared Go state). Each test runs on SQLite (two stores on
// one file) and on PostgreSQL (two stores on one database).

type twoStores func(t *testing.T) (a, b *Store)

func eachBackend(t *testing.T, fn func(t *testing.T, open twoStores)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, func(t *testing.T) (*Store, *Store) {
			path := filepath.Join(t.TempDir(), "awareness.db")
			return mustOpenAt(t, path), mustOpenAt(t, path)
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pgtest.AdminURL(t)
		fn(t, func(t *testing.T) (*Store, *Store) {
			dsn := pgtest.NewDatabase(t)
			return mustOpenPostgresAt(t, dsn), mustOpenPostgresAt(t, dsn)
		})
	})
}

func appendOp(t testing.TB, in awareness.RecordInput, now time.Time) *awareness.AppendOp {
	t.Helper()
	ne, err := awareness.ValidateRecord(in, now)
	if err != nil {
		t.Fatalf("ValidateRecord: %v", err)
	}
	return &awareness.AppendOp{New: ne, Now: now}
}

func humanIn(key string, watchers ...string) awareness.RecordInput {
	actor, channel := "+15550100", "telegram"
	return awareness.RecordInput{SessionKey: key, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman,
		ActorID: &actor, Channel: &channel, Watchers: watchers}
}

// 16 writers spread over two store instances append 500 events each to one session:
// the versions are exactly 1..8000 with no duplicate, and a reader polling
// changesSince meanwhile never skips a version nor sees a head ahead of its events
// (SIG-3, REC-1). On SQLite, where two instances on one file take turns on the file's
// write lock, 60 events each show the same.
func TestTwoInstances_16WritersDenseVersions(t *testing.T) {
	eachBackend(t, func(t *testing.T, open twoStores) {
		a, b := open(t)
		writers, each := 16, 500
		if a.Dialect() == "sqlite" {
			each = 60
		}
		stores := []*Store{a, b}
		ctx := t.Context()
		key := "agent:main:direct:alice"
		ref := awareness.SessionRef{AgentID: "main", Key: key}

		var (
			seen     = make([]atomic.Int32, writers*each+1)
			wg       sync.WaitGroup
			errOnce  sync.Once
			firstErr error
		)
		fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
		readerDone := make(chan error, 1)
		go func() { readerDone <- pollChanges(ctx, a, ref, int64(writers*each)) }()
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := stores[w%2]
				for i := range each {
					op := appendOp(t, humanIn(key), time.Now())
					if err := s.Append(ctx, []*awareness.AppendOp{op}); err != nil {
						fail(fmt.Errorf("writer %d append %d: %w", w, i, err))
						return
					}
					if op.Version < 1 || op.Version > int64(writers*each) {
						fail(fmt.Errorf("writer %d: version %d out of range", w, op.Version))
						return
					}
					seen[op.Version].Add(1)
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		for v := 1; v <= writers*each; v++ {
			if n := seen[v].Load(); n != 1 {
				t.Fatalf("version %d assigned %d times", v, n)
			}
		}
		select {
		case err := <-readerDone:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the reader did not reach the last version")
		}
		ch, err := b.ReadChanges(ctx, ref, 0, 0)
		if err != nil || ch.Head.Version != int64(writers*each) {
			t.Fatalf("head: %d, %v; want %d", ch.Head.Version, err, writers*each)
		}
	})
}

// pollChanges follows a session with changesSince pages until it has read version
// last, checking that each page continues exactly where the previous ended and that a
// page that ends before the head says there is more.
func pollChanges(ctx context.Context, s *Store, ref awareness.SessionRef, last int64) error {
	var at int64
	for at < last {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ch, err := s.ReadChanges(ctx, ref, at, awareness.MaxChangesLimit)
		if err != nil {
			return fmt.Errorf("reader after %d: %w", at, err)
		}
		for _, ev := range ch.Events {
			if ev.Sequence != at+1 {
				return fmt.Errorf("reader after %d got sequence %d: a version was skipped", at, ev.Sequence)
			}
			at = ev.Sequence
		}
		if at < ch.Head.Version && !ch.More {
			return fmt.Errorf("reader: head %d but the page ended at %d with More false", ch.Head.Version, at)
		}
		if at > ch.Head.Version {
			return fmt.Errorf("reader: event %d above head %d", at, ch.Head.Version)
		}
		time.Sleep(2 * time.Millisecond) // poll, as a client would, without hogging the CPU
	}
	return nil
}

// 50 writers append notifying events to one target watched by 10 watchers, across two
// store instances: exactly one notice per watcher is opened (NTC-2), so exactly 10 are
// pending at the end, each opened once, with M at the head.
func TestTwoInstances_NoticeContention(t *testing.T) {
	eachBackend(t, func(t *testing.T, open twoStores) {
		const writers, each, watchers = 50, 10, 10
		a, b := open(t)
		stores := []*Store{a, b}
		ctx := t.Context()
		target := awareness.SessionRef{AgentID: "main", Key: "agent:main:direct:alice"}
		now := time.Now()
		var keys []string
		for i := range watchers {
			w := fmt.Sprintf("agent:main:subagent:w%02d", i)
			keys = append(keys, w)
			if _, _, err := a.Watch(ctx, w, target, "", now); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu       sync.Mutex
			opened   = map[string]int{}
			wg       sync.WaitGroup
			errOnce  sync.Once
			firstErr error
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := stores[w%2]
				for i := range each {
					op := appendOp(t, humanIn(target.Key), time.Now())
					if err := s.Append(ctx, []*awareness.AppendOp{op}); err != nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("writer %d append %d: %w", w, i, err) })
						return
					}
					mu.Lock()
					for _, n := range op.Opened {
						opened[n.Watcher]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		for _, w := range keys {
			if opened[w] != 1 {
				t.Errorf("watcher %s: %d notices opened, want 1", w, opened[w])
			}
		}
		pending, err := b.Pending(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != watchers {
			t.Fatalf("pending notices: %d, want %d: %+v", len(pending), watchers, pending)
		}
		for _, n := range pending {
			if n.ChangesSince != 0 || n.MaterialVersion != writers*each {
				t.Errorf("notice %+v: want changesSince 0 and M %d", n, writers*each)
			}
		}
	})
}

// Two first appends with one dedupe key on a session without a head: one records, the
// other returns the first event (SIG-4), never a unique violation.
func TestTwoInstances_FirstAppendDedupeRace(t *testing.T) {
	eachBackend(t, func(t *testing.T, open twoStores) {
		a, b := open(t)
		ctx := t.Context()
		for round := range 20 {
			key := fmt.Sprintf("agent:main:direct:r%d", round)
			dk := "dk"
			var (
				wg  sync.WaitGroup
				ops [4]*awareness.AppendOp
				err [4]error
			)
			for i := range ops {
				in := humanIn(key)
				in.DedupeKey = &dk
				ops[i] = appendOp(t, in, time.Now())
				wg.Add(1)
				go func() {
					defer wg.Done()
					err[i] = []*Store{a, b}[i%2].Append(ctx, []*awareness.AppendOp{ops[i]})
				}()
			}
			wg.Wait()
			recorded := 0
			for i, op := range ops {
				if err[i] != nil {
					t.Fatalf("round %d append %d: %v", round, i, err[i])
				}
				if op.Recorded {
					recorded++
				}
				if op.Event.Sequence != 1 || op.Version != 1 {
					t.Errorf("round %d append %d: sequence %d version %d, want 1, 1", round, i, op.Event.Sequence, op.Version)
				}
			}
			if recorded != 1 {
				t.Errorf("round %d: %d appends recorded, want 1", round, recorded)
			}
		}
	})
}

// Two batches that touch the same sessions in opposite orders, with cursors on each
// and an Ack running meanwhile, never deadlock and never fail.
func TestTwoInstances_BatchesInOppositeOrders(t *testing.T) {
	eachBackend(t, func(t *testing.T, open twoStores) {
		a, b := open(t)
		ctx := t.Context()
		const sessions = 6
		var keys []string
		watcher := "agent:main:main"
		for i := range sessions {
			k := fmt.Sprintf("agent:main:subagent:s%d", i)
			keys = append(keys, k)
			if _, _, err := a.Watch(ctx, watcher, awareness.SessionRef{AgentID: "main", Key: k}, "", time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 40 {
					var batch []*awareness.AppendOp
					for i := range sessions {
						k := keys[i]
						if w == 1 {
							k = keys[sessions-1-i]
						}
						batch = append(batch, appendOp(t, humanIn(k, watcher), time.Now()))
					}
					if err := []*Store{a, b}[w].Append(ctx, batch); err != nil {
						errs <- fmt.Errorf("batch writer %d: %w", w, err)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				if _, err := b.Ack(ctx, awareness.AckRequest{Watcher: watcher, Now: time.Now()}); err != nil {
					errs <- fmt.Errorf("ack: %w", err)
					return
				}
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, k := range keys {
			ch, err := a.ReadChanges(ctx, awareness.SessionRef{AgentID: "main", Key: k}, 0, 0)
			if err != nil || ch.Head.Version != 80 {
				t.Errorf("%s: head %d, %v; want 80", k, ch.Head.Version, err)
			}
		}
	})
}
