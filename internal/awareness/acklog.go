package awareness

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The acknowledgement history: one durable row per acknowledged notice, written by
// Store.Ack in the transaction of the acknowledgement itself, so that the history
// never misses an acknowledgement that committed nor shows one that did not. Rows are
// pruned with the log's retention by Store.Prune and go with a deleted session.

// MaxClientNameBytes bounds the client name kept with an acknowledgement.
const MaxClientNameBytes = 128

// MaxAckHistoryLimit bounds one page of AckHistory.
const MaxAckHistoryLimit = 200

// ClientInfo is the client a request came from, as the transport saw it.
type ClientInfo struct {
	// Transport is how the request reached the service: "http", "websocket", "sse",
	// "mcp"; "" when unknown.
	Transport string
	// Name is what the client calls itself in a header such as X-Awareness-Client,
	// else its User-Agent, cleaned by CleanClientName.
	Name string
}

type clientKey struct{}

// WithClient returns ctx carrying the client of the request; the transports call it
// once per request or connection.
func WithClient(ctx context.Context, c ClientInfo) context.Context {
	c.Name = CleanClientName(c.Name)
	return context.WithValue(ctx, clientKey{}, c)
}

// ClientFrom returns the client WithClient put in ctx, or the zero ClientInfo.
func ClientFrom(ctx context.Context) ClientInfo {
	c, _ := ctx.Value(clientKey{}).(ClientInfo)
	return c
}

// CleanClientName makes a client-supplied name safe to keep: valid UTF-8, one line
// with control and format characters as spaces and runs of space folded into one,
// trimmed, at most MaxClientNameBytes bytes cut at a rune boundary. A header is never
// refused for its User-Agent: it is cleaned instead.
func CleanClientName(s string) string {
	var b strings.Builder
	space := false
	for i := 0; i < len(s) && b.Len() < MaxClientNameBytes; {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r == utf8.RuneError && n <= 1 {
			continue
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			space = b.Len() > 0
			continue
		}
		add := utf8.RuneLen(r)
		if space {
			add++
		}
		if b.Len()+add > MaxClientNameBytes {
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// AckClient is who sent an acknowledgement: the principal of its token and the
// client it came from.
type AckClient struct {
	// Principal is the token's name in the auth file; "" without authentication.
	Principal string
	// Role is "admin" or "agent:<id>"; "" without authentication.
	Role string
	// Transport and Client are the request's ClientInfo.
	Transport string
	Client    string
}

// ackClientOf is the AckClient of a request's context.
func ackClientOf(ctx context.Context) AckClient {
	c := ClientFrom(ctx)
	a := AckClient{Transport: c.Transport, Client: c.Name}
	if a.Transport == "" {
		a.Transport = TransportUnknown
	}
	if p, ok := PrincipalFrom(ctx); ok {
		a.Principal, a.Role = p.Name, p.Role()
	}
	return a
}

// AckForm is how an acknowledgement named its notices (NTC-3).
type AckForm string

// The forms of an acknowledgement.
const (
	// AckFormExact named each notice by its notifiedVersion.
	AckFormExact AckForm = "exact"
	// AckFormTargets named targets: whatever was pending on them.
	AckFormTargets AckForm = "targets"
	// AckFormAll acknowledged every pending notice of the watcher.
	AckFormAll AckForm = "all"
)

// Form is the form of the request.
func (r AckRequest) Form() AckForm {
	switch {
	case r.Exact != nil:
		return AckFormExact
	case r.Targets != nil:
		return AckFormTargets
	}
	return AckFormAll
}

// AckRecord is one acknowledged notice of the acknowledgement history.
type AckRecord struct {
	// ID orders the history: a later acknowledgement has a larger ID. On PostgreSQL
	// that is the order the rows were written, and concurrent acknowledgements may
	// commit in another order.
	ID      int64
	Watcher string
	Target  SessionRef
	// ChangesSince and NotifiedVersion are the notice's L and N: the acknowledgement
	// moved L to N.
	ChangesSince    int64
	NotifiedVersion int64
	OpenedAt        time.Time
	AckedAt         time.Time
	Form            AckForm
	// FollowUp is the N of the follow-up notice the acknowledgement opened (NTC-3);
	// 0 when none.
	FollowUp int64
	By       AckClient
}

// AckRecords returns the history rows of one acknowledgement: one per notice it
// closed, in res.Closed's order, with the follow-up opened on the same pair. A store
// writes them in the acknowledgement's transaction and assigns their IDs.
func AckRecords(req AckRequest, res AckResult) []AckRecord {
	if len(res.Closed) == 0 {
		return nil
	}
	follow := make(map[SessionRef]int64, len(res.Opened))
	for _, n := range res.Opened {
		follow[n.Target] = n.NotifiedVersion
	}
	out := make([]AckRecord, 0, len(res.Closed))
	for _, n := range res.Closed {
		out = append(out, AckRecord{
			Watcher: n.Watcher, Target: n.Target,
			ChangesSince: n.ChangesSince, NotifiedVersion: n.NotifiedVersion,
			OpenedAt: n.OpenedAt, AckedAt: req.Now, Form: req.Form(),
			FollowUp: follow[n.Target], By: req.By,
		})
	}
	return out
}

// AckHistoryQuery selects acknowledgement records, newest first. Empty fields match
// all.
type AckHistoryQuery struct {
	Watcher string
	// WatcherAgent keeps the records of this agent's watchers.
	WatcherAgent string
	// Target keeps the records about one session.
	Target *SessionRef
	// TargetAgents, when non-nil, keeps the records whose target is of one of these
	// agents: an agent principal's visible targets (CLT-1).
	TargetAgents []string
	// Before keeps the records with ID < Before, the keyset of the next page; 0 for
	// no bound.
	Before int64
	Limit  int
}

// AckHistoryPage is one page of AckHistory, newest first.
type AckHistoryPage struct {
	Records     []AckRecord
	HasNextPage bool
	EndCursor   string
}

// AckHistory lists acknowledged notices, newest first: of one watcher, or about one
// target, which targetAgentID qualifies when bare (KEY-3), or of one agent's
// watchers, or of every watcher for an admin; an agent principal sees its own
// agent's, as listings do. It is authorized as the other reads (CLT-1): a watcher's
// history by its agent, a target's by the target's agent; an agent principal never
// sees a record about a target its agent may not watch.
func (s *Service) AckHistory(ctx context.Context, watcher, target, targetAgentID, agentID *string, first int, after *string) (AckHistoryPage, error) {
	if first < 1 || first > MaxAckHistoryLimit {
		return AckHistoryPage{}, Errorf(EINVALID, "first must be between 1 and %d, got %d", MaxAckHistoryLimit, first)
	}
	q := AckHistoryQuery{Limit: first + 1}
	var owners []string
	if watcher != nil {
		w, err := ResolveWatcher(*watcher)
		if err != nil {
			return AckHistoryPage{}, err
		}
		q.Watcher = w.Key
		owners = append(owners, w.AgentID)
	}
	if target == nil && targetAgentID != nil {
		return AckHistoryPage{}, Errorf(EINVALID, "targetAgentId qualifies target; give target too")
	}
	if target != nil {
		t, err := ResolveSession(*target, targetAgentID)
		if err != nil {
			return AckHistoryPage{}, err
		}
		q.Target = &t
		if watcher == nil {
			owners = append(owners, t.AgentID)
		}
	}
	if agentID != nil {
		if watcher != nil || target != nil {
			return AckHistoryPage{}, Errorf(EINVALID, "agentId selects an agent's watchers; it cannot be combined with watcher or target")
		}
		a := strings.ToLower(strings.TrimSpace(*agentID))
		if !ValidAgentID(a) {
			return AckHistoryPage{}, Errorf(EINVALID, "agentId %q is not a valid agent id", truncateForMessage(*agentID))
		}
		q.WatcherAgent = a
	}
	if after != nil && *after != "" {
		b, err := decodeAckCursor(*after)
		if err != nil {
			return AckHistoryPage{}, err
		}
		q.Before = b
	}
	if len(owners) > 0 {
		if err := s.authorize(ctx, owners...); err != nil {
			return AckHistoryPage{}, err
		}
	} else {
		scoped, err := s.scopeAgent(ctx, q.WatcherAgent)
		if err != nil {
			return AckHistoryPage{}, err
		}
		q.WatcherAgent = scoped
	}
	if p, ok := PrincipalFrom(ctx); ok && !p.Admin {
		q.TargetAgents = append([]string{p.AgentID}, s.grants.Watch[p.AgentID]...)
	}
	recs, err := s.store.AckHistory(ctx, q)
	if err != nil {
		return AckHistoryPage{}, err
	}
	page := AckHistoryPage{Records: recs}
	if len(recs) > first {
		page.Records, page.HasNextPage = recs[:first], true
	}
	if page.Records == nil {
		page.Records = []AckRecord{}
	}
	if n := len(page.Records); n > 0 {
		page.EndCursor = encodeAckCursor(page.Records[n-1].ID)
	}
	return page, nil
}

func encodeAckCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("ack:" + strconv.FormatInt(id, 10)))
}

func decodeAckCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if v, ok := strings.CutPrefix(string(b), "ack:"); ok {
			if id, err := strconv.ParseInt(v, 10, 64); err == nil && id > 0 {
				return id, nil
			}
		}
	}
	return 0, Errorf(EINVALID, "after is not a cursor returned by ackHistory")
}
