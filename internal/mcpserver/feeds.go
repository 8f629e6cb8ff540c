package mcpserver

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/awareness"
)

// session is what the server keeps of one MCP session: its owner, the caller that
// opened it (CLT-6), and its feeds, one per watcher.
type session struct {
	ss    *mcp.ServerSession
	owner string
	feeds map[string]*feed // canonical watcher key → feed
	// lastSeen is the time of its last request; Server.mu guards it.
	lastSeen time.Time
}

// feed follows one watcher's notices for one session: one hub subscription, a push
// stream with no goroutine while idle, shared by the session's resource
// subscriptions to that watcher and its wait_for_notices calls, and ended with them.
type feed struct {
	srv     *Server
	sess    *session
	watcher string

	// Guarded by srv.mu.
	uris  map[string]bool // subscribed URI spellings of the watcher's resource
	waits int
	unsub func()

	mu      sync.Mutex
	wake    chan struct{} // closed (and replaced) when a notice opens
	due     bool          // a resources/updated is to be sent
	sending bool          // a goroutine sends it
	ended   bool
	// inFlight counts, per URI, the resources/updated sends under way: send lets the
	// SDK's notification reach this session only then, and marks it in reached.
	inFlight map[string]int
	reached  map[string]bool
}

// The SDK registers a session's subscription after the subscribe handler returns,
// and a subscriptions/listen client's Subscribe returns before that; until then its
// ResourceUpdated reaches nobody. An update that found no subscriber is sent again,
// every announceRetry at first and then less often, for up to announceFor.
const (
	announceRetry = 5 * time.Millisecond
	announceFor   = 5 * time.Second
)

// ownerOf returns the caller a request's token identifies; "" without
// authentication, where every caller shares the limits.
func ownerOf(extra *mcp.RequestExtra) string {
	if extra != nil && extra.TokenInfo != nil {
		return extra.TokenInfo.UserID
	}
	return ""
}

// principalKey is the TokenInfo.Extra key of the caller's awareness.Principal.
const principalKey = "awareness.principal"

// callerContext returns ctx carrying the request's principal, for the service's
// authorize (CLT-1). A request without one runs as admin: there is no authentication.
func callerContext(ctx context.Context, extra *mcp.RequestExtra) context.Context {
	if extra == nil || extra.TokenInfo == nil {
		return ctx
	}
	if p, ok := extra.TokenInfo.Extra[principalKey].(awareness.Principal); ok {
		return awareness.WithPrincipal(ctx, p)
	}
	return ctx
}

// tokenInfo is the SDK's view of an authenticated caller: UserID binds the sessions it
// opens to its token, so the SDK refuses another token on them; Extra carries the
// principal to the handlers.
func tokenInfo(owner string, p awareness.Principal) *auth.TokenInfo {
	return &auth.TokenInfo{UserID: owner, Expiration: time.Now().Add(24 * time.Hour), Extra: map[string]any{principalKey: p}}
}

// charge draws a call's cost from its caller's budget through Config.Charge.
func (s *Server) charge(ctx context.Context, points, writes int) error {
	if s.cfg.Charge == nil {
		return nil
	}
	return s.cfg.Charge(ctx, points, writes)
}

// sessionOf returns the state of ss, made at its initialize or first subscription.
// Past the owner's MaxSessions its least recently used session idle for
// Config.EvictIdle is closed to make room, since a client that went away without
// DELETE leaves such sessions; with none, the new session is refused.
func (s *Server) sessionOf(ss *mcp.ServerSession, owner string) (*session, error) {
	for {
		s.mu.Lock()
		if st := s.sessions[ss]; st != nil {
			s.mu.Unlock()
			return st, nil
		}
		if s.closed {
			s.mu.Unlock()
			return nil, awareness.Errorf(awareness.EUNAVAILABLE, "the service is shutting down")
		}
		if !s.over(owner) {
			st := &session{ss: ss, owner: owner, feeds: map[string]*feed{}, lastSeen: time.Now()}
			s.sessions[ss] = st
			if id := ss.ID(); id != "" {
				s.byID[id] = st
			}
			s.owner(owner).sessions++
			s.mu.Unlock()
			return st, nil
		}
		victim := s.evictable(owner)
		var idle time.Duration
		if victim != nil {
			idle = time.Since(victim.lastSeen)
		}
		s.mu.Unlock()
		if victim == nil {
			return nil, s.tooManySessions()
		}
		s.log.Debug("mcp session closed for a new one of its token", "idle", idle.Round(time.Second))
		_ = victim.ss.Close()
		s.dropSession(victim.ss)
	}
}

// over reports whether owner holds MaxSessions sessions; s.mu is held.
func (s *Server) over(owner string) bool {
	c := s.owners[owner]
	return c != nil && c.sessions >= s.cfg.MaxSessions
}

// evictable returns owner's least recently used session idle for EvictIdle, or nil;
// s.mu is held.
func (s *Server) evictable(owner string) *session {
	var oldest *session
	for _, st := range s.sessions {
		if st.owner == owner && time.Since(st.lastSeen) >= s.cfg.EvictIdle && (oldest == nil || st.lastSeen.Before(oldest.lastSeen)) {
			oldest = st
		}
	}
	return oldest
}

func (s *Server) tooManySessions() error {
	return awareness.Errorf(awareness.ERATELIMITED, "this token holds %d MCP sessions, each used within the last %s, the most it may: end one (DELETE /mcp with its Mcp-Session-Id)",
		s.cfg.MaxSessions, s.cfg.EvictIdle)
}

// roomForSession refuses at once a request that would open a session past owner's
// MaxSessions with none to replace, after forgetting the sessions that ended;
// sessionOf decides under the lock when the session starts.
func (s *Server) roomForSession(owner string) error {
	room := func() bool { return !s.over(owner) || s.evictable(owner) != nil }
	s.mu.Lock()
	ok := room()
	s.mu.Unlock()
	if ok {
		return nil
	}
	s.dropEnded()
	s.mu.Lock()
	defer s.mu.Unlock()
	if room() {
		return nil
	}
	return s.tooManySessions()
}

// seen records the session's last use.
func (s *Server) seen(ss *mcp.ServerSession) {
	s.mu.Lock()
	if st := s.sessions[ss]; st != nil {
		st.lastSeen = time.Now()
	}
	s.mu.Unlock()
}

func (s *Server) owner(o string) *ownerCount {
	c := s.owners[o]
	if c == nil {
		c = &ownerCount{}
		s.owners[o] = c
	}
	return c
}

// dropSession ends a session's feeds and forgets it.
func (s *Server) dropSession(ss *mcp.ServerSession) {
	s.mu.Lock()
	st := s.sessions[ss]
	if st == nil {
		s.mu.Unlock()
		return
	}
	delete(s.sessions, ss)
	if s.byID[ss.ID()] == st {
		delete(s.byID, ss.ID())
	}
	c := s.owner(st.owner)
	c.sessions--
	var unsubs []func()
	for _, f := range st.feeds {
		c.subscriptions -= len(f.uris) + f.waits
		if f.unsub != nil {
			unsubs = append(unsubs, f.unsub)
		}
		f.end()
	}
	st.feeds = nil
	s.gcOwner(st.owner)
	s.mu.Unlock()
	for _, u := range unsubs {
		u()
	}
}

func (s *Server) gcOwner(o string) {
	if c := s.owners[o]; c != nil && c.sessions == 0 && c.subscriptions == 0 {
		delete(s.owners, o)
	}
}

// acquire returns the session's feed of watcher, starting its hub subscription when
// it has none, and counts one more subscription, for a non-empty uri, or wait of the
// caller against MaxSubscriptions.
func (s *Server) acquire(ctx context.Context, st *session, watcher, uri string) (*feed, error) {
	ref, err := awareness.ResolveWatcher(watcher)
	if err != nil {
		return nil, err
	}
	key := ref.Key
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, awareness.Errorf(awareness.EUNAVAILABLE, "the service is shutting down")
	}
	f := st.feeds[key]
	if uri != "" && f != nil && f.uris[uri] {
		s.mu.Unlock()
		return f, nil // subscribing again changes nothing
	}
	c := s.owner(st.owner)
	if c.subscriptions >= s.cfg.MaxSubscriptions {
		s.mu.Unlock()
		return nil, awareness.Errorf(awareness.ERATELIMITED, "this token holds %d MCP subscriptions and waits, the most it may: unsubscribe from a notices resource, or wait for a wait_for_notices to answer", s.cfg.MaxSubscriptions)
	}
	c.subscriptions++
	fresh := f == nil
	if fresh {
		f = &feed{srv: s, sess: st, watcher: key, uris: map[string]bool{}, wake: make(chan struct{}), inFlight: map[string]int{}, reached: map[string]bool{}}
		st.feeds[key] = f
	}
	if uri != "" {
		f.uris[uri] = true
	} else {
		f.waits++
	}
	s.mu.Unlock()
	if !fresh {
		return f, nil
	}
	// Subscribe outside s.mu: the hub replays the pending notices through Push.
	unsub, err := s.svc.SubscribeNoticesTo(ctx, &watcher, true, awareness.Sink[awareness.Notice]{Push: f.push, End: f.endedBy})
	s.mu.Lock()
	if err == nil && st.feeds[key] == f && !f.isEnded() {
		f.unsub = unsub
		s.mu.Unlock()
		return f, nil
	}
	// Refused, or the session ended meanwhile: undo.
	if st.feeds[key] == f {
		delete(st.feeds, key)
		c.subscriptions -= len(f.uris) + f.waits
	}
	f.end()
	s.gcOwner(st.owner)
	s.mu.Unlock()
	if unsub != nil {
		unsub()
	}
	if err == nil {
		err = awareness.Errorf(awareness.EUNAVAILABLE, "the MCP session ended")
	}
	return nil, err
}

// release drops one subscription, for a non-empty uri, or wait from the feed, and
// the feed with the last.
func (s *Server) release(f *feed, uri string) {
	s.mu.Lock()
	st := f.sess
	if st.feeds[f.watcher] != f {
		s.mu.Unlock()
		return // the session ended
	}
	if uri != "" {
		if !f.uris[uri] {
			s.mu.Unlock()
			return
		}
		delete(f.uris, uri)
	} else {
		f.waits--
	}
	s.owner(st.owner).subscriptions--
	var unsub func()
	if len(f.uris) == 0 && f.waits == 0 {
		delete(st.feeds, f.watcher)
		unsub = f.unsub
		f.end()
	}
	s.gcOwner(st.owner)
	s.mu.Unlock()
	if unsub != nil {
		unsub()
	}
}

// push is the feed's hub sink: it wakes the waits on an opened notice and sends a
// resources/updated for any change, and once for what was pending when the feed
// started, so a client that subscribes, then waits, is told it has something to read.
// It never blocks: sending is another goroutine's, started only while something is
// due.
func (f *feed) push(n *awareness.Notice, replay bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return true
	}
	if !n.Closed && !replay {
		close(f.wake)
		f.wake = make(chan struct{})
	}
	f.due = true
	if !f.sending {
		f.sending = true
		go f.sendUpdates()
	}
	return true
}

// endedBy is the sink's End: the hub closed the subscription. The feed's waits
// return and later ones start another.
func (f *feed) endedBy(error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		f.ended = true
		close(f.wake)
	}
}

// end marks the feed over, under srv.mu: waits return, nothing more is sent.
func (f *feed) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		f.ended = true
		close(f.wake)
	}
}

func (f *feed) isEnded() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended
}

// waitChan returns the channel the next opened notice closes.
func (f *feed) waitChan() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wake
}

// sendUpdates sends resources/updated for each subscribed URI until nothing is due.
// The SDK's ResourceUpdated notifies every session subscribed to a URI; the sending
// middleware, send, lets it through to this session only. A URI whose update reached
// no subscription of the SDK yet is sent again after announceRetry.
func (f *feed) sendUpdates() {
	var missed map[string]bool
	var giveUp time.Time
	delay := announceRetry
	for {
		f.mu.Lock()
		if f.ended || (!f.due && len(missed) == 0) {
			f.sending = false
			f.mu.Unlock()
			return
		}
		due := f.due
		f.due = false
		f.mu.Unlock()
		if !due {
			if time.Now().After(giveUp) {
				missed = nil
				continue
			}
			time.Sleep(delay)
			delay = min(2*delay, 200*time.Millisecond)
		}
		f.srv.mu.Lock()
		uris := make([]string, 0, len(f.uris))
		for u := range f.uris {
			if due || missed[u] {
				uris = append(uris, u)
			}
		}
		f.srv.mu.Unlock()
		missed = nil
		for _, u := range uris {
			f.mu.Lock()
			f.inFlight[u]++
			f.reached[u] = false
			f.mu.Unlock()
			_ = f.srv.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: u})
			f.mu.Lock()
			f.inFlight[u]--
			if !f.reached[u] {
				if missed == nil {
					missed = map[string]bool{}
					if giveUp.IsZero() {
						giveUp = time.Now().Add(announceFor)
					}
				}
				missed[u] = true
			}
			f.mu.Unlock()
		}
	}
}

// send is the sending middleware: a resources/updated reaches a session only while
// that session's own feed sends it.
func (s *Server) send(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "notifications/resources/updated" {
			return next(ctx, method, req)
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		p, _ := req.GetParams().(*mcp.ResourceUpdatedNotificationParams)
		if ss == nil || p == nil || !s.sending(ss, p.URI) {
			return nil, nil
		}
		return next(ctx, method, req)
	}
}

func (s *Server) sending(ss *mcp.ServerSession, uri string) bool {
	s.mu.Lock()
	st := s.sessions[ss]
	var fs []*feed
	if st != nil {
		for _, f := range st.feeds {
			if f.uris[uri] {
				fs = append(fs, f)
			}
		}
	}
	s.mu.Unlock()
	for _, f := range fs {
		f.mu.Lock()
		n := f.inFlight[uri]
		if n > 0 {
			f.reached[uri] = true
		}
		f.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// receive is the receiving middleware: it makes a session's state at its initialize,
// not for a request that opens no MCP session such as server/discover; it refuses a
// resource URI with a control character before the SDK echoes it, and gives every
// refusal an ERR-1 code in the JSON-RPC error's data.code.
func (s *Server) receive(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			if method == "initialize" {
				if _, err := s.sessionOf(ss, ownerOf(req.GetExtra())); err != nil {
					return nil, rpcError(err)
				}
			} else {
				s.seen(ss)
			}
		}
		switch p := req.GetParams().(type) {
		case *mcp.ReadResourceParams:
			if err := checkURI(p.URI); err != nil {
				return nil, rpcError(err)
			}
		case *mcp.SubscribeParams:
			if err := checkURI(p.URI); err != nil {
				return nil, rpcError(err)
			}
		case *mcp.UnsubscribeParams:
			if err := checkURI(p.URI); err != nil {
				return nil, rpcError(err)
			}
		}
		res, err := next(ctx, method, req)
		if err != nil {
			return res, rpcError(err)
		}
		return res, nil
	}
}

// checkURI refuses a URI that holds a control character or is not valid UTF-8.
func checkURI(uri string) error {
	if !strings.HasPrefix(uri, NoticesURIPrefix) {
		return awareness.Errorf(awareness.ENOTFOUND, "no resource %q: the resources are %s{watcher}", truncateArg(uri), NoticesURIPrefix)
	}
	for _, r := range uri {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return awareness.Errorf(awareness.EINVALID, "the resource URI %q holds a control character or invalid text", truncateArg(uri))
		}
	}
	return nil
}

// JSON-RPC error codes of coded refusals.
const (
	codeInvalidParams    = -32602
	codeResourceNotFound = -32002
	codeInternal         = -32603
	// codeRefused is the server-defined code of FORBIDDEN, UNAUTHENTICATED,
	// RATE_LIMITED and the other ERR-1 refusals that are no JSON-RPC error.
	codeRefused = -32001
)

// rpcError turns err into a JSON-RPC error whose data.code is its ERR-1 code. An
// error the SDK made, a JSON-RPC error without our data, keeps its code and message,
// with data.code INVALID_ARGUMENT, or INTERNAL for an internal error.
func rpcError(err error) error {
	if je, ok := err.(*jsonrpc.Error); ok {
		if len(je.Data) > 0 {
			return je
		}
		code := awareness.EINVALID
		if je.Code == codeInternal {
			code = awareness.EINTERNAL
		} else if je.Code == codeResourceNotFound {
			code = awareness.ENOTFOUND
		}
		data, _ := json.Marshal(map[string]string{"code": code})
		return &jsonrpc.Error{Code: je.Code, Message: sanitize(je.Message), Data: data}
	}
	code, msg := coded(err)
	rc := int64(codeRefused)
	switch code {
	case awareness.EINVALID, awareness.ECURSORAHEAD:
		rc = codeInvalidParams
	case awareness.ENOTFOUND:
		rc = codeResourceNotFound
	case awareness.EINTERNAL:
		rc = codeInternal
	}
	data, _ := json.Marshal(map[string]string{"code": code})
	return &jsonrpc.Error{Code: rc, Message: msg, Data: data}
}

// sanitize replaces the control characters of an SDK message, which may echo input.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// parseNoticesURI returns the watcher of an awareness://notices/{watcher} URI.
func parseNoticesURI(uri string) (string, error) {
	if err := checkURI(uri); err != nil {
		return "", err
	}
	rest := strings.TrimPrefix(uri, NoticesURIPrefix)
	w, err := url.PathUnescape(rest)
	if err != nil || w == "" {
		return "", awareness.Errorf(awareness.ENOTFOUND, "no resource %q: the resources are %s{watcher}, the watcher's session key", truncateArg(uri), NoticesURIPrefix)
	}
	if err := checkURI(NoticesURIPrefix + w); err != nil {
		return "", err
	}
	return w, nil
}

func (s *Server) readNotices(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	watcher, err := parseNoticesURI(req.Params.URI)
	if err != nil {
		return nil, rpcError(err)
	}
	ctx = callerContext(ctx, req.Extra)
	if err := s.charge(ctx, pendingCost, 0); err != nil {
		return nil, rpcError(err)
	}
	ns, err := s.svc.PendingNotices(ctx, watcher)
	if err != nil {
		return nil, rpcError(err)
	}
	b, err := json.Marshal(pendingData{noticesOf(ns)})
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}}, nil
}

// pendingData is the resource's JSON: the pendingNotices query's data.
type pendingData struct {
	PendingNotices []noticeOut `json:"pendingNotices"`
}

// subscribe authorizes the caller on the watcher and starts, or joins, the session's
// feed of that watcher.
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	watcher, err := parseNoticesURI(req.Params.URI)
	if err != nil {
		return rpcError(err)
	}
	ctx = callerContext(ctx, req.Extra)
	if err := s.charge(ctx, pendingCost, 1); err != nil {
		return rpcError(err)
	}
	st, err := s.sessionOf(req.Session, ownerOf(req.Extra))
	if err != nil {
		return rpcError(err)
	}
	if _, err := s.acquire(ctx, st, watcher, req.Params.URI); err != nil {
		return rpcError(err)
	}
	return nil
}

func (s *Server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	watcher, err := parseNoticesURI(req.Params.URI)
	if err != nil {
		return rpcError(err)
	}
	ref, err := awareness.ResolveWatcher(watcher)
	if err != nil {
		return rpcError(err)
	}
	s.mu.Lock()
	st := s.sessions[req.Session]
	var f *feed
	if st != nil {
		f = st.feeds[ref.Key]
	}
	s.mu.Unlock()
	if f != nil {
		s.release(f, req.Params.URI)
	}
	return nil
}

// waitForNotices answers at once with the watcher's pending notices, or once one
// opens, or at the timeout.
func (s *Server) waitForNotices(ctx context.Context, req *mcp.CallToolRequest, in waitIn) (waitOut, error) {
	timeout := MaxWait
	if in.TimeoutMs != nil {
		if *in.TimeoutMs < 0 || time.Duration(*in.TimeoutMs)*time.Millisecond > MaxWait {
			return waitOut{}, awareness.Errorf(awareness.EINVALID, "timeoutMs must be from 0 to %d, got %d", MaxWait.Milliseconds(), *in.TimeoutMs)
		}
		timeout = time.Duration(*in.TimeoutMs) * time.Millisecond
	}
	st, err := s.sessionOf(req.Session, ownerOf(req.Extra))
	if err != nil {
		return waitOut{}, err
	}
	f, err := s.acquire(ctx, st, in.Watcher, "")
	if err != nil {
		return waitOut{}, err
	}
	defer s.release(f, "")
	wake := f.waitChan() // before the read: a notice opening after it wakes us
	ns, err := s.svc.PendingNotices(ctx, in.Watcher)
	if err != nil {
		return waitOut{}, err
	}
	timedOut := false
	if len(ns) == 0 {
		t := time.NewTimer(timeout)
		select {
		case <-wake:
		case <-t.C:
			timedOut = true
		case <-ctx.Done():
		}
		t.Stop()
		if ns, err = s.svc.PendingNotices(context.WithoutCancel(ctx), in.Watcher); err != nil {
			return waitOut{}, err
		}
		timedOut = timedOut && len(ns) == 0
	}
	out := waitOut{PendingNotices: noticesOf(ns), TimedOut: timedOut}
	if timedOut {
		out.Summary = "No stale notice opened within " + timeout.String() + ": call wait_for_notices again to keep waiting."
	} else {
		out.Summary = noticesSummary(out.PendingNotices, "No pending notices.", "pending notice")
	}
	return out, nil
}
