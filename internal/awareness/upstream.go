package awareness

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// OwnPromptWindow is how many salted hashes of the gateway's own prompts per session
// are kept for self-echo detection (UPS-3).
const OwnPromptWindow = 10

// Catalog is a source of external sessions that can be adopted (UPS-1) and monitored
// (UPS-2..5). The product ships one implementation in package upstream, a directory
// of JSONL transcripts; the monitor only ever reads a thread through this interface.
// Implementations must be safe for concurrent use.
type Catalog interface {
	// ID is the catalog id: a token shaped like an agent id (KEY-4). It is the channel
	// of the events the catalog causes.
	ID() string
	// Resolve validates threadID and locates the thread now. Errors: INVALID_ARGUMENT
	// for a malformed thread id, NOT_FOUND when the thread does not exist.
	Resolve(ctx context.Context, threadID string) (CatalogThread, error)
	// Scan classifies the thread's complete lines after req.Marker, reading at most
	// req.MaxBytes. A definitive "the thread is gone" is ScanResult.Missing; an error is
	// inconclusive, neither a miss nor a success. Error messages are shown to operators
	// in UpstreamLink.BlockedReason and must not contain file paths.
	Scan(ctx context.Context, req ScanRequest) (ScanResult, error)
}

// CatalogThread is a thread as Resolve found it.
type CatalogThread struct {
	// ThreadID is the canonical thread id.
	ThreadID string
	// Source identifies where the thread is read from, such as a directory catalog's
	// file. Adopting again from the same source keeps the link's marker.
	Source string
	// End is the marker of the end of the thread's last complete line: what adoption
	// treats as history (UPS-1).
	End int64
}

// ScanRequest asks a catalog to classify a thread from a marker.
type ScanRequest struct {
	ThreadID string
	Marker   int64
	MaxBytes int64
	// IsOwn reports whether a human prompt's text is an echo of a prompt the gateway
	// itself sent into the session (UPS-3). Nil means none is.
	IsOwn func(text string) bool
}

// ScanResult is the outcome of one Scan.
type ScanResult struct {
	// Missing is true when the thread definitively does not exist any more (UPS-4).
	Missing bool
	// Next is the marker after the classified bytes; Next >= the request's Marker.
	Next int64
	// Turns counts the external human prompts in [Marker, Next).
	Turns int
	// LastAt is the time the transcript gives for the last external prompt; zero when
	// it gives none.
	LastAt time.Time
	// Blocked says why the scan cannot advance past Next (UPS-5); "" when it can.
	Blocked string
}

// UpstreamLink links an adopted session to its upstream thread (UPS-1). There is at
// most one link per session.
type UpstreamLink struct {
	Session SessionRef
	// ID identifies this link: adopting again from the same source keeps it and the
	// marker; any other adoption, and every adoption after the link was removed,
	// creates a new link with a new ID. Dedupe keys of the link's events contain it.
	ID        string
	CatalogID string
	ThreadID  string
	Source    string
	// Marker is the offset up to which the upstream thread is classified: observed up
	// to, but not including, this byte.
	Marker int64
	// ConsecutiveMisses counts checks in a row that did not find the thread (UPS-4).
	// It is durable, so a restart does not reset the streak.
	ConsecutiveMisses int
	LastCheckedAt     time.Time // zero: never checked
	BlockedReason     string    // "" when the scan can advance
	CreatedAt         time.Time
	// UpdatedAt changes when the link is adopted again, never on a check: a check
	// compares it to notice a re-adoption during its scan.
	UpdatedAt time.Time
}

// SameSource reports whether o reads the same upstream thread as l.
func (l UpstreamLink) SameSource(o UpstreamLink) bool {
	return l.CatalogID == o.CatalogID && l.ThreadID == o.ThreadID && l.Source == o.Source
}

// UpstreamCheck is the settlement of one check of a link: Expect, the link as the
// check read it, and its new state. It applies only while the link's ID, marker,
// miss count and UpdatedAt are still Expect's; a marker never moves backwards.
type UpstreamCheck struct {
	Expect            UpstreamLink
	Marker            int64
	ConsecutiveMisses int
	BlockedReason     string
	CheckedAt         time.Time
}

// UpstreamQuery selects links.
type UpstreamQuery struct {
	AgentID string // "": every agent
	// Watched keeps only links of sessions that at least one cursor targets (UPS-2).
	Watched bool
}

// UpstreamStore is the durable state of adoption and monitoring (UPS-1..5). The store
// of package models implements it next to Store; the service finds it by a type
// assertion on its Store.
type UpstreamStore interface {
	// AdoptUpstream creates the session's link from l, or, when a link with the same
	// source exists, keeps that link's ID and marker and restarts its miss streak. A
	// link with another source is replaced by l. created is true when l was written.
	AdoptUpstream(ctx context.Context, l UpstreamLink, now time.Time) (stored UpstreamLink, created bool, err error)
	// UpstreamLink returns the session's link.
	UpstreamLink(ctx context.Context, ref SessionRef) (l UpstreamLink, ok bool, err error)
	// UpstreamLinks lists links ordered by catalog, agent, key.
	UpstreamLinks(ctx context.Context, q UpstreamQuery) ([]UpstreamLink, error)
	// SettleUpstream applies checks in one transaction; applied[i] is false when check
	// i's link changed since it was read: a compare-and-set.
	SettleUpstream(ctx context.Context, checks []UpstreamCheck) (applied []bool, err error)
	// UpstreamRecordedEnd finds the session's upstream activity event recorded for the
	// byte range starting at start of link linkID, by its UpstreamDedupeKey, and
	// returns where that range ended. ok is false when none was recorded: the marker
	// at start is settled, or the event never committed.
	UpstreamRecordedEnd(ctx context.Context, ref SessionRef, linkID string, start int64) (end int64, ok bool, err error)
	// RemoveUpstream deletes the link if its ID and UpdatedAt are still expect's.
	RemoveUpstream(ctx context.Context, expect UpstreamLink) (ok bool, err error)
	// ForgetUnwatchedMisses restarts the miss streak of links no cursor targets.
	ForgetUnwatchedMisses(ctx context.Context) (n int64, err error)
	// UpstreamSalt returns the database's random salt for own-prompt hashes, creating
	// it on first use. It never changes afterwards.
	UpstreamSalt(ctx context.Context) ([]byte, error)
	// AddOwnPrompt appends a prompt hash to the session's window and keeps the last
	// `keep`. ok is false, and nothing is written, when the session has no link.
	AddOwnPrompt(ctx context.Context, ref SessionRef, hash string, now time.Time, keep int) (ok bool, err error)
	// OwnPrompts returns the session's kept prompt hashes, oldest first.
	OwnPrompts(ctx context.Context, ref SessionRef) ([]string, error)
}

// CheckUpstreamLink refuses with INVALID_ARGUMENT a link a store must not adopt:
// without a session, an id, a catalog, thread or source, or with a negative marker.
func CheckUpstreamLink(l UpstreamLink) error {
	bad := func(what string) error {
		return Errorf(EINVALID, "upstream link: %s", what)
	}
	switch {
	case l.Session.AgentID == "" || l.Session.Key == "":
		return bad("session is empty")
	case l.ID == "":
		return bad("link id is empty")
	case l.CatalogID == "" || l.ThreadID == "" || l.Source == "":
		return bad("catalog, thread or source is empty")
	case l.Marker < 0:
		return bad("marker is negative")
	}
	return nil
}

// CheckUpstreamChecks refuses a settlement batch a store must not apply: a zero check
// time by CheckClock; with INVALID_ARGUMENT a marker that would move backwards, a
// negative miss count or a check without a link id.
func CheckUpstreamChecks(checks []UpstreamCheck) error {
	for i, c := range checks {
		if err := CheckClock("SettleUpstream", c.CheckedAt); err != nil {
			return err
		}
		if c.Marker < c.Expect.Marker || c.ConsecutiveMisses < 0 || c.Expect.ID == "" {
			return Errorf(EINVALID, "upstream check %d: marker %d before %d, misses %d or empty link id",
				i, c.Marker, c.Expect.Marker, c.ConsecutiveMisses)
		}
	}
	return nil
}

// Applies reports whether the check still applies to cur, the session's link now: cur
// has the ID, marker, miss count and UpdatedAt of the link the check read.
func (c UpstreamCheck) Applies(cur UpstreamLink) bool {
	e := c.Expect
	return cur.Session == e.Session && cur.ID == e.ID && cur.Marker == e.Marker &&
		cur.ConsecutiveMisses == e.ConsecutiveMisses && cur.UpdatedAt.Equal(e.UpdatedAt)
}

// AdoptLink is an adoption of l at now over the session's current link cur, nil when
// none (UPS-1): a link of the same source keeps its ID and marker, with its miss
// streak restarted and UpdatedAt moved; otherwise l replaces it, never checked yet.
// created is true when l is the result.
func AdoptLink(cur *UpstreamLink, l UpstreamLink, now time.Time) (next UpstreamLink, created bool) {
	if cur != nil && cur.SameSource(l) {
		next = *cur
		next.ConsecutiveMisses, next.UpdatedAt = 0, now
		return next, false
	}
	next = l
	next.ConsecutiveMisses, next.LastCheckedAt, next.BlockedReason = 0, time.Time{}, ""
	next.CreatedAt, next.UpdatedAt = now, now
	return next, true
}

// CheckOwnPrompt refuses an own-prompt write a store must not make: a zero now by
// CheckClock; with INVALID_ARGUMENT an empty hash or a window under one.
func CheckOwnPrompt(hash string, now time.Time, keep int) error {
	if err := CheckClock("AddOwnPrompt", now); err != nil {
		return err
	}
	if hash == "" || keep < 1 {
		return Errorf(EINVALID, "own prompt: empty hash or keep %d < 1", keep)
	}
	return nil
}

// UpstreamDedupeKey is the dedupe key of the human_direct_message that records the
// external prompts of bytes [start, end) of link linkID's thread (UPS-2, SIG-4). It
// names the exact range: a retry after a failed or crashed settlement that scans past
// end, over prompts appended meanwhile, has another key, and UpstreamRecordedEnd tells
// the monitor where the recorded range ended, so that it records only what follows.
func UpstreamDedupeKey(linkID string, start, end int64) string {
	return UpstreamDedupePrefix(linkID, start) + strconv.FormatInt(end, 10)
}

// UpstreamDedupePrefix is the part of UpstreamDedupeKey that names the link and the
// start of the range.
func UpstreamDedupePrefix(linkID string, start int64) string {
	return "upstream:" + linkID + ":" + strconv.FormatInt(start, 10) + "-"
}

// ParseUpstreamDedupeEnd returns the end of the range named by an UpstreamDedupeKey
// that starts with prefix, UpstreamDedupePrefix; ok is false for any other key.
func ParseUpstreamDedupeEnd(key, prefix string) (end int64, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return 0, false
	}
	end, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || end < 0 || strconv.FormatInt(end, 10) != rest {
		return 0, false
	}
	return end, true
}

// upstreamState is the Service's part of UPS: the configured catalogs and the cached
// own-prompt salt.
type upstreamState struct {
	catalogs map[string]Catalog
	mu       sync.Mutex
	salt     []byte
}

func (u *upstreamState) init(cs []Catalog) {
	u.catalogs = make(map[string]Catalog, len(cs))
	for _, c := range cs {
		if c != nil {
			u.catalogs[c.ID()] = c
		}
	}
}

// Catalog returns the configured catalog with the given id.
func (s *Service) Catalog(id string) (Catalog, bool) {
	c, ok := s.ups.catalogs[strings.ToLower(strings.TrimSpace(id))]
	return c, ok
}

// UpstreamStore returns the service's store as an UpstreamStore, or UNIMPLEMENTED when
// the store does not keep upstream links.
func (s *Service) UpstreamStore() (UpstreamStore, error) {
	us, ok := s.store.(UpstreamStore)
	if !ok {
		return nil, Errorf(EUNIMPLEMENTED, "this store does not keep upstream links (UPS-1)")
	}
	return us, nil
}

// AdoptSession links a session to a catalog thread and records `adopted` (UPS-1). The
// marker starts at the end of the thread's last complete line: existing history is not
// new activity. Adopting again from the same source keeps the link and its marker and
// records nothing new, since the event's dedupe key names the link; after
// upstream_missing removed the link, adopting creates a new one.
func (s *Service) AdoptSession(ctx context.Context, key string, agentID *string, catalogID, threadID string) (UpstreamLink, error) {
	ref, err := ResolveSession(key, agentID)
	if err != nil {
		return UpstreamLink{}, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return UpstreamLink{}, err
	}
	cat, ok := s.Catalog(catalogID)
	if !ok {
		return UpstreamLink{}, Errorf(EINVALID, "catalogId %q is not a configured catalog", truncateForMessage(catalogID))
	}
	if err := s.authorizeAdopt(ctx, cat.ID()); err != nil {
		return UpstreamLink{}, err
	}
	us, err := s.UpstreamStore()
	if err != nil {
		return UpstreamLink{}, err
	}
	th, err := cat.Resolve(ctx, threadID)
	if err != nil {
		return UpstreamLink{}, err
	}
	if err := writing(ctx); err != nil {
		return UpstreamLink{}, err
	}
	id, err := newLinkID()
	if err != nil {
		return UpstreamLink{}, Internal(err)
	}
	link, created, err := us.AdoptUpstream(ctx, UpstreamLink{
		Session: ref, ID: id, CatalogID: cat.ID(), ThreadID: th.ThreadID, Source: th.Source, Marker: th.End,
	}, s.Now())
	if err != nil {
		return UpstreamLink{}, err
	}
	channel, dedupe := cat.ID(), "adopted:"+link.ID
	_, err = s.RecordEvent(ctx, RecordInput{
		SessionKey: ref.Key, AgentID: &ref.AgentID, Kind: Adopted, ActorType: ActorSystem,
		Channel: &channel, DedupeKey: &dedupe,
	})
	if err != nil {
		if created {
			// ERR-2: a failed adoption leaves no link behind. A kept link stays: it
			// existed before this call.
			if _, rerr := us.RemoveUpstream(context.WithoutCancel(ctx), link); rerr != nil {
				s.log.Warn("adopt: could not remove the link of a failed adoption", "session", ref.Key, "agent", ref.AgentID, "err", rerr)
			}
		}
		return UpstreamLink{}, err
	}
	return link, nil
}

// RecordOwnPrompt keeps a salted hash of a prompt the gateway sent into an adopted
// session, so that its echo upstream is not taken for a human (UPS-3). Only the last
// OwnPromptWindow hashes per session are kept, never the text. It returns false, and
// keeps nothing, when the text is empty once normalized or the session has no link.
func (s *Service) RecordOwnPrompt(ctx context.Context, key string, agentID *string, text string) (bool, error) {
	ref, err := ResolveSession(key, agentID)
	if err != nil {
		return false, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return false, err
	}
	us, err := s.UpstreamStore()
	if err != nil {
		return false, err
	}
	norm := NormalizePrompt(text)
	if norm == "" {
		return false, nil
	}
	if err := writing(ctx); err != nil {
		return false, err
	}
	salt, err := s.upstreamSalt(ctx, us)
	if err != nil {
		return false, err
	}
	return us.AddOwnPrompt(ctx, ref, promptHash(salt, norm), s.Now(), OwnPromptWindow)
}

// UpstreamLinks lists links, of one agent when agentID is given.
func (s *Service) UpstreamLinks(ctx context.Context, agentID *string) ([]UpstreamLink, error) {
	var q UpstreamQuery
	if agentID != nil {
		a := strings.ToLower(strings.TrimSpace(*agentID))
		if !ValidAgentID(a) {
			return nil, Errorf(EINVALID, "agentId %q is not a valid agent id", truncateForMessage(*agentID))
		}
		q.AgentID = a
	}
	scoped, err := s.scopeAgent(ctx, q.AgentID)
	if err != nil {
		return nil, err
	}
	q.AgentID = scoped
	us, err := s.UpstreamStore()
	if err != nil {
		return nil, err
	}
	return us.UpstreamLinks(ctx, q)
}

// OwnPromptMatcher returns the self-echo test of one session (UPS-3): whether a text,
// once normalized, equals one of the session's kept own prompts.
func (s *Service) OwnPromptMatcher(ctx context.Context, ref SessionRef) (func(text string) bool, error) {
	us, err := s.UpstreamStore()
	if err != nil {
		return nil, err
	}
	hashes, err := us.OwnPrompts(ctx, ref)
	if err != nil {
		return nil, err
	}
	if len(hashes) == 0 {
		return func(string) bool { return false }, nil
	}
	salt, err := s.upstreamSalt(ctx, us)
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(hashes))
	for _, h := range hashes {
		set[h] = true
	}
	return func(text string) bool {
		n := NormalizePrompt(text)
		return n != "" && set[promptHash(salt, n)]
	}, nil
}

func (s *Service) upstreamSalt(ctx context.Context, us UpstreamStore) ([]byte, error) {
	s.ups.mu.Lock()
	defer s.ups.mu.Unlock()
	if s.ups.salt != nil {
		return s.ups.salt, nil
	}
	salt, err := us.UpstreamSalt(ctx)
	if err != nil {
		return nil, err
	}
	if len(salt) < 16 {
		return nil, Internal(errors.New("upstream salt is shorter than 16 bytes"))
	}
	s.ups.salt = salt
	return salt, nil
}

// NormalizePrompt is the comparison form of a prompt (UPS-3): trimmed, with every run
// of white space collapsed to one space.
func NormalizePrompt(text string) string {
	return strings.Join(strings.FieldsFunc(text, unicode.IsSpace), " ")
}

// promptHash is HMAC-SHA256 of a normalized prompt under the database's salt, in hex.
func promptHash(salt []byte, normalized string) string {
	m := hmac.New(sha256.New, salt)
	m.Write([]byte(normalized))
	return hex.EncodeToString(m.Sum(nil))
}

// newLinkID returns 16 random hex digits.
func newLinkID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// RecordEvents validates and appends several events in one group-commit write
// transaction and publishes their notices after the commit. It is all or nothing: one
// invalid input, or one failing append, writes none of them (ERR-2). The results are
// in input order.
func (s *Service) RecordEvents(ctx context.Context, ins []RecordInput) ([]RecordResult, error) {
	res, err := s.recordEvents(ctx, ins)
	if err != nil && err != ErrCheckOnly {
		s.obs.AppendFailed(ErrorCode(err))
	}
	return res, err
}

func (s *Service) recordEvents(ctx context.Context, ins []RecordInput) ([]RecordResult, error) {
	now := s.Now()
	ops := make([]*AppendOp, len(ins))
	for i, in := range ins {
		op, err := s.checkRecord(ctx, in, now)
		if err != nil {
			return nil, err
		}
		ops[i] = op
	}
	if len(ops) == 0 {
		return nil, nil
	}
	if err := s.beforeAppend(ctx); err != nil {
		return nil, err
	}
	if err := s.store.Append(ctx, ops); err != nil {
		return nil, err
	}
	s.appended(now, ops...)
	out := make([]RecordResult, len(ops))
	for i, op := range ops {
		out[i] = recordResult(op)
	}
	return out, nil
}
