package awareness

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of the sessions registry (REG-1, REG-2).
const (
	// MaxEntryFieldBytes bounds each typed string field of an entry: sessionId,
	// chatType, provider, displayName.
	MaxEntryFieldBytes = 1024
	// MaxExtraBytes bounds the encoded extra fields of one entry, after a merge too.
	MaxExtraBytes = 256 << 10
	// MaxExtraKeyBytes bounds the name of one extra field.
	MaxExtraKeyBytes = 128
	// MaxImportBytes bounds one sessions.json import.
	MaxImportBytes = 64 << 20
	// MaxImportEntries bounds the entries of one import; the gateway's own default
	// maintenance cap is 500.
	MaxImportEntries = 100_000
)

// Compaction policy defaults (REG-3), the gateway's documented defaults.
const (
	DefaultReserveTokens       = 16384
	DefaultSoftThresholdTokens = 4000
)

// SessionWrite is one registry write (REG-1, REG-2).
type SessionWrite struct {
	Ref   SessionRef
	Entry SessionEntry
	// Replace makes the registry entry exactly Entry, as an import does, the gateway
	// being the authority: nil fields are cleared and Extra replaces every stored
	// extra field. Otherwise, as in an upsert, nil fields are left unchanged and Extra
	// is merged key by key, a JSON null removing a key.
	Replace bool
	// UpdatedAt is the gateway's last activity time, sessions.json updatedAt; nil
	// means now. A live session's time never goes backwards: the later of the stored
	// and the given time is kept.
	UpdatedAt *time.Time
	// CompactionCount, when not nil, replaces the session's compaction count with the
	// gateway's own, on import. Otherwise the count is left as it is.
	CompactionCount *int64
}

// RegistryStore is the registry part of the durable state (REG-1..3). *models.Store
// implements it; a Store without it answers the registry operations UNIMPLEMENTED.
//
// Implementations read the rows a call writes, merge each write with
// MergeSessionWrite, and write the results back, in one transaction. Store.Append
// keeps the compaction count: a recorded, not deduplicated, op adds its
// AppendOp.Compactions in the append transaction (REG-3).
type RegistryStore interface {
	// UpsertSessions applies ws in order in one write transaction and returns the
	// resulting sessions: every write commits or none does. A write creates the
	// session's row when absent, its kind classified from the key, revives a deleted
	// one, and marks it registered.
	UpsertSessions(ctx context.Context, ws []SessionWrite, now time.Time) ([]Session, error)
	// RecordMemoryFlush sets memoryFlushAt = now and memoryFlushCompactionCount =
	// compactionCount on a registered session, in one statement (REG-3). ok is false
	// when the session is not registered.
	RecordMemoryFlush(ctx context.Context, ref SessionRef, now time.Time) (s Session, ok bool, err error)
}

// CheckSessionWrites refuses a registry batch a store must not write: a write without a
// session, INVALID_ARGUMENT, or a zero now, by CheckClock.
func CheckSessionWrites(ws []SessionWrite, now time.Time) error {
	if err := CheckClock("UpsertSessions", now); err != nil {
		return err
	}
	for i, w := range ws {
		if w.Ref.AgentID == "" || w.Ref.Key == "" {
			return Errorf(EINVALID, "session write %d: session is empty", i)
		}
	}
	return nil
}

// RegistryRow is a session's row as a registry write finds it and as it leaves it.
type RegistryRow struct {
	Session Session
	// New is true for a row the same call created, without a head or entry before:
	// the first write then sets its update time as given, even one before now.
	New bool
	// Deleted is true for a session DeleteSession deleted: a write revives it with a
	// fresh entry and a compaction count of 0.
	Deleted bool
}

// MergeSessionWrite is the registry write w applied to row at now (REG-1, REG-2): the
// row to store, registered, its kind classified from the key. A deleted row is
// revived anew; Replace clears the entry first; non-nil fields are set; Extra is
// merged key by key into the stored fields, a JSON null removing a key, and the
// merged fields, encoded, stay within MaxExtraBytes; a live session's update time
// never goes backwards. Extra values come back compact, as encoding/json writes
// them, which is how a store that encodes them gives them back. row is not
// modified. Several writes of one session in one call merge in order, each into the
// result of the previous one.
func MergeSessionWrite(row RegistryRow, w SessionWrite, now time.Time) (RegistryRow, error) {
	s := row.Session
	if row.Deleted {
		s.CreatedAt, s.CompactionCount = now, 0
		s.Entry = SessionEntry{}
		row.New = true
	}
	if w.Replace {
		s.Entry = SessionEntry{}
	}
	e := w.Entry
	setPtr(&s.Entry.SessionID, e.SessionID)
	setPtr(&s.Entry.ParentSessionKey, e.ParentSessionKey)
	setPtr(&s.Entry.ChatType, e.ChatType)
	setPtr(&s.Entry.Provider, e.Provider)
	setPtr(&s.Entry.DisplayName, e.DisplayName)
	setPtr(&s.Entry.InputTokens, e.InputTokens)
	setPtr(&s.Entry.OutputTokens, e.OutputTokens)
	setPtr(&s.Entry.TotalTokens, e.TotalTokens)
	setPtr(&s.Entry.ContextTokens, e.ContextTokens)
	setPtr(&s.Entry.MemoryFlushCompactionCount, e.MemoryFlushCompactionCount)
	if e.MemoryFlushAt != nil {
		t := e.MemoryFlushAt.UTC()
		s.Entry.MemoryFlushAt = &t
	}
	extra, err := mergeExtra(s.Entry.Extra, e.Extra)
	if err != nil {
		return RegistryRow{}, err
	}
	s.Entry.Extra = extra
	if w.CompactionCount != nil {
		s.CompactionCount = *w.CompactionCount
	}
	updated := now
	if w.UpdatedAt != nil {
		updated = w.UpdatedAt.UTC()
	}
	if row.New || updated.After(s.UpdatedAt) {
		s.UpdatedAt = updated
	}
	s.Kind = ClassifyKey(s.Ref.Key)
	s.Registered = true
	return RegistryRow{Session: s}, nil
}

func setPtr[T any](dst **T, v *T) {
	if v != nil {
		c := *v
		*dst = &c
	}
}

// mergeExtra merges patch into the stored extra fields: a key with a JSON null is
// removed, every other key is set. The result is nil when no key remains. stored is
// not modified.
func mergeExtra(stored, patch map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	if len(patch) == 0 {
		return stored, nil
	}
	m := make(map[string]json.RawMessage, len(stored)+len(patch))
	for k, v := range stored {
		m[k] = v
	}
	for k, v := range patch {
		if isNull(v) {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m) // sorted keys, compact values
	if err != nil {
		return nil, Errorf(EINVALID, "extra is not valid JSON: %v", err)
	}
	if len(b) > MaxExtraBytes {
		return nil, Errorf(EINVALID, "the merged extra fields are %d bytes; the limit is %d", len(b), MaxExtraBytes)
	}
	out := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, Internal(err)
	}
	return out, nil
}

func (s *Service) registry() (RegistryStore, error) {
	if r, ok := s.store.(RegistryStore); ok {
		return r, nil
	}
	return nil, Errorf(EUNIMPLEMENTED, "the sessions registry is not available on this store")
}

// SessionInput is an upsert of one registry entry (REG-1): nil fields are left
// unchanged; Extra is merged into the stored extra fields, a JSON null removing a key.
type SessionInput struct {
	SessionKey string
	AgentID    *string
	Entry      SessionEntry
}

// UpsertSession validates and writes one registry entry and returns the session.
func (s *Service) UpsertSession(ctx context.Context, in SessionInput) (Session, error) {
	reg, err := s.registry()
	if err != nil {
		return Session{}, err
	}
	ref, err := ResolveSession(in.SessionKey, in.AgentID)
	if err != nil {
		return Session{}, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return Session{}, err
	}
	e, err := upsertEntry(in.Entry)
	if err != nil {
		return Session{}, err
	}
	if err := writing(ctx); err != nil {
		return Session{}, err
	}
	out, err := reg.UpsertSessions(ctx, []SessionWrite{{Ref: ref, Entry: e}}, s.Now())
	if err != nil {
		return Session{}, err
	}
	if len(out) != 1 {
		return Session{}, Internal(errorString("UpsertSessions returned no session"))
	}
	return out[0], nil
}

// ImportSessions imports a gateway's sessions.json for one agent (REG-2) in one
// transaction and returns the number of entries imported. A malformed document is
// rejected as a whole, naming the offending entry; nothing is written then (ERR-2).
func (s *Service) ImportSessions(ctx context.Context, agentID string, sessionsJSON []byte) (int, error) {
	reg, err := s.registry()
	if err != nil {
		return 0, err
	}
	ws, err := ParseSessionsJSON(agentID, sessionsJSON)
	if err != nil {
		return 0, err
	}
	if err := s.authorize(ctx, strings.ToLower(strings.TrimSpace(agentID))); err != nil {
		return 0, err
	}
	if len(ws) == 0 {
		return 0, nil
	}
	if err := writing(ctx); err != nil {
		return 0, err
	}
	if _, err := reg.UpsertSessions(ctx, ws, s.Now()); err != nil {
		return 0, err
	}
	return len(ws), nil
}

// RecordMemoryFlush records that a pre-compaction memory flush ran now (REG-3): the
// flush is then not due again until the next compaction. NOT_FOUND when the session
// is not registered.
func (s *Service) RecordMemoryFlush(ctx context.Context, key string, agentID *string) (Session, error) {
	reg, err := s.registry()
	if err != nil {
		return Session{}, err
	}
	ref, err := s.sessionToWrite(ctx, key, agentID)
	if err != nil {
		return Session{}, err
	}
	sess, ok, err := reg.RecordMemoryFlush(ctx, ref, s.Now())
	if err != nil {
		return Session{}, err
	}
	if !ok {
		return Session{}, notRegistered(ref)
	}
	return sess, nil
}

// CompactionQuery asks the compaction policy of one session (REG-3).
type CompactionQuery struct {
	SessionKey          string
	AgentID             *string
	ContextWindow       int64
	ReserveTokens       int64
	SoftThresholdTokens int64
}

// CompactionPolicy is the answer of the compaction policy (REG-3).
type CompactionPolicy struct {
	// ContextTokens is the session's last reported context size; 0 when unknown.
	ContextTokens   int64
	CompactionCount int64
	// MemoryFlushCompactionCount is the compaction count when the last flush ran.
	MemoryFlushCompactionCount *int64
	// MemoryFlushThreshold is contextWindow − reserveTokens − softThresholdTokens.
	MemoryFlushThreshold int64
	// CompactionThreshold is contextWindow − reserveTokens.
	CompactionThreshold int64
	// MemoryFlushDue: contextTokens > MemoryFlushThreshold and no flush ran in this
	// compaction cycle: memoryFlushCompactionCount ≠ compactionCount.
	MemoryFlushDue bool
	// CompactionDue: contextTokens > CompactionThreshold.
	CompactionDue bool
}

// CompactionPolicy answers, for a registered session and its model's window, whether
// a pre-compaction memory flush and a compaction are due (REG-3).
func (s *Service) CompactionPolicy(ctx context.Context, q CompactionQuery) (CompactionPolicy, error) {
	ref, err := ResolveSession(q.SessionKey, q.AgentID)
	if err != nil {
		return CompactionPolicy{}, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return CompactionPolicy{}, err
	}
	if err := checkCompactionArgs(q.ContextWindow, q.ReserveTokens, q.SoftThresholdTokens); err != nil {
		return CompactionPolicy{}, err
	}
	sess, ok, err := s.store.Session(ctx, ref)
	if err != nil {
		return CompactionPolicy{}, err
	}
	if !ok || !sess.Registered {
		return CompactionPolicy{}, notRegistered(ref)
	}
	return EvaluateCompaction(sess, q.ContextWindow, q.ReserveTokens, q.SoftThresholdTokens)
}

// EvaluateCompaction is the pure compaction policy of REG-3 over one session. The
// thresholds are strict: contextTokens equal to a threshold is not over it. A flush
// runs at most once per compaction cycle: it is not due while the session's
// memoryFlushCompactionCount equals its compactionCount.
func EvaluateCompaction(sess Session, contextWindow, reserveTokens, softThresholdTokens int64) (CompactionPolicy, error) {
	if err := checkCompactionArgs(contextWindow, reserveTokens, softThresholdTokens); err != nil {
		return CompactionPolicy{}, err
	}
	p := CompactionPolicy{
		CompactionCount:            sess.CompactionCount,
		MemoryFlushCompactionCount: sess.Entry.MemoryFlushCompactionCount,
		CompactionThreshold:        contextWindow - reserveTokens,
		MemoryFlushThreshold:       contextWindow - reserveTokens - softThresholdTokens,
	}
	if sess.Entry.ContextTokens != nil {
		p.ContextTokens = *sess.Entry.ContextTokens
	}
	flushedThisCycle := p.MemoryFlushCompactionCount != nil && *p.MemoryFlushCompactionCount == p.CompactionCount
	p.MemoryFlushDue = p.ContextTokens > p.MemoryFlushThreshold && !flushedThisCycle
	p.CompactionDue = p.ContextTokens > p.CompactionThreshold
	return p, nil
}

// maxTokens bounds the token arguments of the policy, so that no arithmetic on them
// can overflow and GraphQL clients that read Int as a double stay exact.
const maxTokens = 1 << 40

func checkCompactionArgs(window, reserve, soft int64) error {
	switch {
	case window <= 0 || window > maxTokens:
		return Errorf(EINVALID, "contextWindow must be between 1 and %d, got %d", int64(maxTokens), window)
	case reserve < 0:
		return Errorf(EINVALID, "reserveTokens must be 0 or more, got %d", reserve)
	case soft < 0:
		return Errorf(EINVALID, "softThresholdTokens must be 0 or more, got %d", soft)
	case reserve >= window:
		return Errorf(EINVALID, "reserveTokens (%d) must be smaller than contextWindow (%d)", reserve, window)
	case soft >= window-reserve:
		return Errorf(EINVALID, "softThresholdTokens (%d) must be smaller than contextWindow − reserveTokens (%d)", soft, window-reserve)
	}
	return nil
}

func notRegistered(ref SessionRef) error {
	return Errorf(ENOTFOUND, "session %q of agent %q is not registered: upsert or import it first", truncateForMessage(ref.Key), ref.AgentID)
}

type errorString string

func (e errorString) Error() string { return string(e) }

// upsertEntry validates the entry of an upsert. Extra may not name a field that has
// its own column and argument; a `spawnedBy` in Extra gives the lineage when
// ParentSessionKey is nil, as on import.
func upsertEntry(e SessionEntry) (SessionEntry, error) {
	out := e
	out.Extra = nil
	if err := checkTypedFields(&out); err != nil {
		return SessionEntry{}, err
	}
	if e.Extra == nil {
		return out, nil
	}
	out.Extra = make(map[string]json.RawMessage, len(e.Extra))
	size := 0
	for _, k := range sortedKeys(e.Extra) {
		v := e.Extra[k]
		if err := checkExtraKey(k); err != nil {
			return SessionEntry{}, err
		}
		if f, ok := entryFields[k]; ok && f.typed {
			return SessionEntry{}, Errorf(EINVALID, "extra.%s has its own field: set it there, not in extra", k)
		}
		if reservedNames[k] {
			return SessionEntry{}, Errorf(EINVALID, "extra.%s is reserved: it is not a SessionEntry field", k)
		}
		v = trimRaw(v)
		if len(v) == 0 {
			return SessionEntry{}, Errorf(EINVALID, "extra.%s is not a JSON value", k)
		}
		if err := checkJSONText("extra."+k, v); err != nil {
			return SessionEntry{}, err
		}
		if !isNull(v) {
			if f, ok := entryFields[k]; ok && f.check != nil {
				if err := f.check(v); err != nil {
					return SessionEntry{}, Errorf(EINVALID, "extra.%s: %s", k, err)
				}
			}
			if k == "spawnedBy" && out.ParentSessionKey == nil {
				p, err := parentKey(v)
				if err != nil {
					return SessionEntry{}, Errorf(EINVALID, "extra.spawnedBy: %s", err)
				}
				out.ParentSessionKey = &p
			}
		}
		size += len(k) + len(v) + 4
		out.Extra[k] = v
	}
	if size > MaxExtraBytes {
		return SessionEntry{}, Errorf(EINVALID, "extra is about %d bytes; the limit is %d", size, MaxExtraBytes)
	}
	return out, nil
}

// checkTypedFields validates the typed fields of an entry and canonicalises its
// parent key.
func checkTypedFields(e *SessionEntry) error {
	// One rule for every typed text field, displayName included: one line, no NUL
	// or other control character. PostgreSQL refuses NUL where SQLite stores it.
	for _, f := range []struct {
		name string
		v    *string
	}{
		{"sessionId", e.SessionID},
		{"chatType", e.ChatType},
		{"provider", e.Provider},
		{"displayName", e.DisplayName},
	} {
		if f.v == nil || (f.name == "displayName" && *f.v == "") {
			continue // an empty displayName stays allowed, as before
		}
		if err := checkLine(f.name, *f.v, MaxEntryFieldBytes); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{
		{"inputTokens", e.InputTokens},
		{"outputTokens", e.OutputTokens},
		{"totalTokens", e.TotalTokens},
		{"contextTokens", e.ContextTokens},
		{"memoryFlushCompactionCount", e.MemoryFlushCompactionCount},
	} {
		if f.v != nil && (*f.v < 0 || *f.v > maxJSONInt) {
			return Errorf(EINVALID, "%s must be between 0 and %d, got %d", f.name, int64(maxJSONInt), *f.v)
		}
	}
	if e.ParentSessionKey != nil {
		ref, err := ResolveSession(*e.ParentSessionKey, nil)
		if err != nil {
			return Errorf(EINVALID, "parentSessionKey: %s", ErrorMessage(err))
		}
		e.ParentSessionKey = &ref.Key
	}
	if e.MemoryFlushAt != nil {
		t := e.MemoryFlushAt.UTC()
		e.MemoryFlushAt = &t
	}
	return nil
}

func checkExtraKey(k string) error {
	if k == "" || strings.TrimSpace(k) == "" {
		return Errorf(EINVALID, "extra has an empty field name")
	}
	if len(k) > MaxExtraKeyBytes {
		return Errorf(EINVALID, "extra field name %q is longer than %d bytes", truncateForMessage(k), MaxExtraKeyBytes)
	}
	if !utf8.ValidString(k) {
		return Errorf(EINVALID, "extra field name %q is not valid UTF-8", truncateForMessage(k))
	}
	if strings.ContainsRune(k, 0) {
		return Errorf(EINVALID, "extra field name %q contains NUL", truncateForMessage(k))
	}
	return nil
}

// checkJSONText refuses a JSON value with a NUL, \u0000, in any string or object
// key: PostgreSQL's jsonb refuses it where SQLite stores it (ERR-3). Other escaped
// control characters are kept, as the gateway wrote them.
func checkJSONText(what string, v json.RawMessage) error {
	if !bytes.Contains(v, []byte(`\u`)) {
		return nil // no escape at all: raw NUL is not valid JSON text
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // malformed JSON is refused elsewhere; io.EOF ends the value
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return Errorf(EINVALID, "%s contains a NUL character (\\u0000)", what)
		}
	}
}

// reservedNames are names the service itself puts next to an entry's fields in
// `awareness sessions --json`; no extra field may take them.
var reservedNames = map[string]bool{
	"sessionKey": true, "agentId": true, "kind": true, "stateVersion": true, "registered": true,
}
