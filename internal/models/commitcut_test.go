package models

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// SIG-7, ERR-2: an append whose COMMIT answer is lost is neither reported refused
// while it is in the log nor reported recorded while it is not. The store asks the
// server what became of the transaction (txid_status) and answers from that: recorded
// when it committed, retried when it rolled back, and, when the database cannot be
// asked within the bound, refused with a message that says the outcome is unknown.
func TestPostgresLostCommitAnswer(t *testing.T) {
	pgtest.AdminURL(t)
	dsn := pgtest.NewDatabase(t)
	proxy, via := newCutProxy(t, dsn)
	s := mustOpenPostgresAt(t, via)
	direct := mustOpenPostgresAt(t, dsn) // reads that do not go through the proxy
	s.commitCheckWait = 2 * time.Second
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	const key = "agent:main:cut"
	appendRun := func(runID string) (*awareness.AppendOp, error) {
		in := humanIn(key)
		in.RunID = &runID
		op := appendOp(t, in, now)
		return op, s.Append(ctx, []*awareness.AppendOp{op})
	}

	// Committed, answer lost: recorded, at the sequence the log holds.
	proxy.arm(cutAfterCommit)
	op, err := appendRun("committed")
	if err != nil {
		t.Fatalf("append whose commit answer was lost: %v", err)
	}
	if got := proxy.cuts.Load(); got != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", got)
	}
	if op.Event.Sequence != 1 || !op.Recorded {
		t.Fatalf("append answered sequence %d recorded %v, want 1 true", op.Event.Sequence, op.Recorded)
	}

	// Rolled back with its connection: retried, recorded once.
	proxy.arm(cutBeforeCommit)
	op, err = appendRun("rolled-back")
	if err != nil {
		t.Fatalf("append whose connection died before COMMIT: %v", err)
	}
	if got := proxy.cuts.Load(); got != 2 {
		t.Fatalf("the proxy cut %d connections, want 2", got)
	}
	if op.Event.Sequence != 2 {
		t.Fatalf("retried append answered sequence %d, want 2", op.Event.Sequence)
	}

	// Committed, answer lost, and the database unreachable until the store gives up
	// asking: refused, saying the outcome is unknown (and it did commit).
	proxy.downOnCut.Store(true)
	proxy.arm(cutAfterCommit)
	start := time.Now()
	_, err = appendRun("unknown")
	took := time.Since(start)
	var ae *awareness.Error
	if !errors.As(err, &ae) || ae.Code != awareness.EUNAVAILABLE || !strings.Contains(ae.Message, "unknown") {
		t.Fatalf("append with an unresolvable commit: %v, want UNAVAILABLE saying the outcome is unknown", err)
	}
	if took > 10*time.Second {
		t.Fatalf("the store asked for %v, more than its bound allows", took)
	}
	proxy.downOnCut.Store(false)
	proxy.refuse.Store(false)

	ch, err := direct.ReadChanges(ctx, awareness.SessionRef{Key: key, AgentID: "main"}, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, e := range ch.Events {
		runs = append(runs, e.RunID)
	}
	if want := []string{"committed", "rolled-back", "unknown"}; strings.Join(runs, ",") != strings.Join(want, ",") {
		t.Fatalf("log holds runs %q, want %q", runs, want)
	}

	// The store still works through the proxy.
	if _, err := appendRun("after"); err != nil {
		t.Fatalf("append after the outage: %v", err)
	}
}

// A transaction id the server has not reached (after a crash that lost the WAL naming
// it) never committed: txid_status raises "in the future" for it, which resolves as
// rolled back at once instead of holding writes until the bound.
func TestPostgresXactStatusFutureXid(t *testing.T) {
	pgtest.AdminURL(t)
	s := MustOpenPostgres(t)
	ctx := context.Background()
	var xid int64
	if err := s.wsql.QueryRowContext(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if got := s.xactStatus(ctx, xid+1_000_000, 5*time.Second); got != outcomeAborted {
		t.Fatalf("xactStatus(future xid) = %v, want outcomeAborted", got)
	}
	if got := s.xactStatus(ctx, xid, 5*time.Second); got != outcomeCommitted {
		t.Fatalf("xactStatus(committed xid) = %v, want outcomeCommitted", got)
	}
}

// cutProxy forwards TCP connections between a store and PostgreSQL. Armed, it cuts
// the connection that sends COMMIT, either before COMMIT reaches the server (the
// backend sees its client vanish and rolls back) or after the server has answered it
// (the transaction is committed, but the store only sees its connection die). The
// second is the ambiguous commit that a shutdown or network fault produces at random;
// the proxy produces it on demand.
type cutProxy struct {
	t        testing.TB
	ln       net.Listener
	upstream string

	mode      atomic.Int32 // cutNone, cutBeforeCommit, cutAfterCommit; disarms after one cut
	refuse    atomic.Bool  // close new connections at once
	downOnCut atomic.Bool  // a cut also closes every connection and sets refuse
	cuts      atomic.Int32
	mu        sync.Mutex
	conns     []net.Conn
	closing   atomic.Bool
	wg        sync.WaitGroup
}

const (
	cutNone int32 = iota
	cutBeforeCommit
	cutAfterCommit
)

// newCutProxy listens on loopback and forwards to the host of dsn; it returns the
// proxy and dsn rewritten to go through it.
func newCutProxy(t testing.TB, dsn string) (*cutProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, upstream: u.Host}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *cutProxy) arm(mode int32) { p.mode.Store(mode) }

func (p *cutProxy) close() {
	p.closing.Store(true)
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// armedCut counts an armed cut and, when downOnCut is set, takes the database down.
func (p *cutProxy) armedCut() {
	p.cuts.Add(1)
	if p.downOnCut.Load() {
		p.down()
	}
}

// down refuses new connections and closes the open ones: the database is unreachable.
func (p *cutProxy) down() {
	p.refuse.Store(true)
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		p.wg.Add(2)
		swallow := make(chan struct{}) // closed: drop the server's next bytes and cut
		var once sync.Once
		cut := func() {
			once.Do(func() {
				_ = client.Close()
				_ = server.Close()
			})
		}
		go p.clientToServer(client, server, swallow, cut)
		go p.serverToClient(server, client, swallow, cut)
	}
}

// clientToServer forwards frontend messages one at a time, so that it can tell a
// COMMIT (simple or extended query) from the rest.
func (p *cutProxy) clientToServer(client, server net.Conn, swallow chan struct{}, cut func()) {
	defer p.wg.Done()
	defer cut()
	first := true // the startup message has no type byte
	for {
		var msg []byte
		if first {
			var n [4]byte
			if _, err := io.ReadFull(client, n[:]); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(n[:])-4)
			if _, err := io.ReadFull(client, body); err != nil {
				return
			}
			msg = append(n[:], body...)
			first = false
		} else {
			var h [5]byte
			if _, err := io.ReadFull(client, h[:]); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
			if _, err := io.ReadFull(client, body); err != nil {
				return
			}
			if (h[0] == 'Q' || h[0] == 'P') && isCommit(h[0], body) {
				switch p.mode.Swap(cutNone) {
				case cutBeforeCommit:
					p.armedCut()
					return // cut without sending COMMIT
				case cutAfterCommit:
					close(swallow)
				}
			}
			msg = append(h[:], body...)
		}
		if _, err := server.Write(msg); err != nil {
			return
		}
	}
}

func (p *cutProxy) serverToClient(server, client net.Conn, swallow chan struct{}, cut func()) {
	defer p.wg.Done()
	defer cut()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			select {
			case <-swallow:
				// The server answered the COMMIT: it is durable there, and the
				// client never learns it.
				p.armedCut()
				return
			default:
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// isCommit reports whether a Query ('Q': query NUL) or Parse ('P': name NUL query NUL
// ...) message holds a COMMIT statement.
func isCommit(typ byte, body []byte) bool {
	if typ == 'P' {
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			return false
		}
		body = body[i+1:]
	}
	i := bytes.IndexByte(body, 0)
	if i < 0 {
		return false
	}
	return isCommitText(body[:i])
}

func isCommitText(q []byte) bool {
	q = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(q), []byte(";")))
	return bytes.EqualFold(q, []byte("commit")) || bytes.EqualFold(q, []byte("commit transaction")) ||
		bytes.EqualFold(q, []byte("end"))
}
