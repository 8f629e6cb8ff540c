package awareness

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultAgentID is the agent of bare keys when none is given (KEY-3).
const DefaultAgentID = "main"

// MaxKeyBytes is the longest session key accepted (KEY-4).
const MaxKeyBytes = 512

var agentIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// SessionKind classifies a session key (KEY-2).
type SessionKind string

// Session kinds, the values of the GraphQL SessionKind enum.
const (
	KindMain     SessionKind = "main"
	KindSubagent SessionKind = "subagent"
	KindACP      SessionKind = "acp"
	KindDirect   SessionKind = "direct"
	KindGroup    SessionKind = "group"
	KindRoom     SessionKind = "room"
	KindChannel  SessionKind = "channel"
	KindCron     SessionKind = "cron"
	KindHook     SessionKind = "hook"
	KindGlobal   SessionKind = "global"
	KindOther    SessionKind = "other"
)

// AllSessionKinds lists every SessionKind, in schema order.
var AllSessionKinds = []SessionKind{KindMain, KindSubagent, KindACP, KindDirect, KindGroup, KindRoom, KindChannel, KindCron, KindHook, KindGlobal, KindOther}

// Valid reports whether k is a known kind.
func (k SessionKind) Valid() bool {
	for _, v := range AllSessionKinds {
		if k == v {
			return true
		}
	}
	return false
}

// ParsedKey is a canonical agent-qualified session key `agent:<agentId>:<rest>` (KEY-1).
type ParsedKey struct {
	AgentID string
	Rest    string
}

// String returns the canonical form of the key.
func (p ParsedKey) String() string { return "agent:" + p.AgentID + ":" + p.Rest }

// ParseSessionKey parses an agent-qualified key: it trims, lowercases, splits on ':'
// and drops empty segments; it needs at least three segments, the first `agent`, and a
// non-empty agent id (KEY-1). Each segment is trimmed too, so that a blank segment
// counts as empty and the canonical form parses to itself: otherwise `agent:main:x : `
// would give `agent:main:x `, which re-parses as `agent:main:x`. It does not check
// KEY-4 limits; see ResolveSession. ok is false for every other input, including bare
// keys.
func ParseSessionKey(raw string) (ParsedKey, bool) {
	if p, ok, done := parseCanonicalKey(raw); done {
		return p, ok
	}
	return parseKey(raw)
}

// parseKey is ParseSessionKey's general parse.
func parseKey(raw string) (ParsedKey, bool) {
	s := strings.ToLower(strings.TrimSpace(raw))
	if s == "" {
		return ParsedKey{}, false
	}
	parts := strings.Split(s, ":")
	segs := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			segs = append(segs, p)
		}
	}
	if len(segs) < 3 || segs[0] != "agent" || segs[1] == "" {
		return ParsedKey{}, false
	}
	return ParsedKey{AgentID: segs[1], Rest: strings.Join(segs[2:], ":")}, true
}

// parseCanonicalKey is ParseSessionKey without allocating, for the keys it leaves as
// they are: printable ASCII with no upper case, no space and no empty segment, which
// every stored key is. done is false for any other key, which the general parse takes.
func parseCanonicalKey(raw string) (p ParsedKey, ok, done bool) {
	colons, first, second := 0, -1, -1
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c <= ' ' || c >= 0x7f || c >= 'A' && c <= 'Z':
			return ParsedKey{}, false, false
		case c == ':':
			if i == 0 || raw[i-1] == ':' {
				return ParsedKey{}, false, false
			}
			if colons++; colons == 1 {
				first = i
			} else if colons == 2 {
				second = i
			}
		}
	}
	if raw == "" || raw[len(raw)-1] == ':' {
		return ParsedKey{}, false, false
	}
	if colons < 2 || raw[:first] != "agent" {
		return ParsedKey{}, false, true
	}
	return ParsedKey{AgentID: raw[first+1 : second], Rest: raw[second+1:]}, true, true
}

// IsSubagentKey reports whether an agent-qualified key names a nested sub-agent, whose
// notices carry wake=false (NTC-6).
func (p ParsedKey) IsSubagent() bool {
	return strings.HasPrefix(p.Rest, "subagent:")
}

// ValidAgentID reports whether id is a valid agent id (KEY-4).
func ValidAgentID(id string) bool { return agentIDPattern.MatchString(id) }

// SessionRef identifies a session by agentId and canonical key (KEY-1).
type SessionRef struct {
	AgentID string
	Key     string
}

// Qualified reports whether the key is agent-qualified, i.e. could be a watcher (KEY-3).
func (r SessionRef) Qualified() bool {
	_, ok := ParseSessionKey(r.Key)
	return ok
}

func checkKeyBytes(what, raw string) error {
	if raw == "" || strings.TrimSpace(raw) == "" {
		return Errorf(EINVALID, "%s is empty", what)
	}
	return checkText(what, raw, MaxKeyBytes)
}

// isLineSeparator reports the Unicode line and paragraph separators: not control
// characters, but line breaks all the same. Keys are echoed into one-line notice texts
// (NTC-1) and summaries are one line (SIG-2), so neither may contain them.
func isLineSeparator(r rune) bool { return r == '\u2028' || r == '\u2029' }

// checkCanonicalBytes checks the KEY-4 length limit on the canonical form: lowercasing
// can lengthen a key, U+023A being 2 bytes and its lowercase U+2C65 3, so the check on
// the raw input alone is not enough.
func checkCanonicalBytes(what, raw, canon string) error {
	if len(canon) > MaxKeyBytes {
		return Errorf(EINVALID, "%s %q is %d bytes once lowercased; the limit is %d", what, truncateForMessage(raw), len(canon), MaxKeyBytes)
	}
	return nil
}

// ResolveSession validates a session key and an optional agent id and returns the
// canonical reference (KEY-1..4). A canonical key carries its own agent: an agentId
// that contradicts it is an error. A bare key such as `global`, `cron:…` or `hook:…`
// takes agentID, default "main". A key that starts with `agent:` but does not parse is
// malformed.
func ResolveSession(key string, agentID *string) (SessionRef, error) {
	ref, _, err := resolveSession(key, agentID)
	return ref, err
}

// resolveSession is ResolveSession that also classifies the key (KEY-2) from the same
// parse.
func resolveSession(key string, agentID *string) (SessionRef, SessionKind, error) {
	if err := checkKeyBytes("sessionKey", key); err != nil {
		return SessionRef{}, "", err
	}
	var agent string
	if agentID != nil {
		agent = strings.ToLower(strings.TrimSpace(*agentID))
		if !ValidAgentID(agent) {
			return SessionRef{}, "", Errorf(EINVALID, "agentId %q is not a valid agent id ([a-z0-9][a-z0-9_-]{0,63})", truncateForMessage(*agentID))
		}
	}
	if p, ok := ParseSessionKey(key); ok {
		if !ValidAgentID(p.AgentID) {
			return SessionRef{}, "", Errorf(EINVALID, "sessionKey %q has an invalid agent id", truncateForMessage(key))
		}
		if agent != "" && agent != p.AgentID {
			return SessionRef{}, "", Errorf(EINVALID, "agentId %q contradicts the agent %q of sessionKey", agent, p.AgentID)
		}
		if err := checkCanonicalBytes("sessionKey", key, p.String()); err != nil {
			return SessionRef{}, "", err
		}
		return SessionRef{AgentID: p.AgentID, Key: p.String()}, classifyParsed(p), nil
	}
	canon := strings.ToLower(strings.TrimSpace(key))
	if canon == "agent" || strings.HasPrefix(canon, "agent:") {
		return SessionRef{}, "", Errorf(EINVALID, "sessionKey %q is malformed: want agent:<agentId>:<rest>", truncateForMessage(key))
	}
	if err := checkCanonicalBytes("sessionKey", key, canon); err != nil {
		return SessionRef{}, "", err
	}
	if agent == "" {
		agent = DefaultAgentID
	}
	return SessionRef{AgentID: agent, Key: canon}, classifyBare(canon), nil
}

// ResolveWatcher validates a watcher key: it must be agent-qualified (KEY-3, WAT-1).
func ResolveWatcher(key string) (SessionRef, error) {
	if err := checkKeyBytes("watcher", key); err != nil {
		return SessionRef{}, err
	}
	p, ok := ParseSessionKey(key)
	if !ok {
		return SessionRef{}, Errorf(EINVALID, "watcher %q is not an agent-qualified session key (agent:<agentId>:<rest>); bare keys cannot watch", truncateForMessage(key))
	}
	if !ValidAgentID(p.AgentID) {
		return SessionRef{}, Errorf(EINVALID, "watcher %q has an invalid agent id", truncateForMessage(key))
	}
	if err := checkCanonicalBytes("watcher", key, p.String()); err != nil {
		return SessionRef{}, err
	}
	return SessionRef{AgentID: p.AgentID, Key: p.String()}, nil
}

// ClassifyKey returns the kind of a canonical key (KEY-2).
func ClassifyKey(key string) SessionKind {
	p, ok := ParseSessionKey(key)
	if !ok {
		return classifyBare(strings.ToLower(strings.TrimSpace(key)))
	}
	return classifyParsed(p)
}

// classifyBare is the kind of a bare key, canonical (KEY-2).
func classifyBare(k string) SessionKind {
	switch {
	case k == "global":
		return KindGlobal
	case strings.HasPrefix(k, "cron:"):
		return KindCron
	case strings.HasPrefix(k, "hook:"):
		return KindHook
	}
	return KindOther
}

// classifyParsed is the kind of an agent-qualified key (KEY-2).
func classifyParsed(p ParsedKey) SessionKind {
	segs := strings.Split(p.Rest, ":")
	switch segs[0] {
	case "subagent":
		if len(segs) >= 2 {
			return KindSubagent
		}
	case "acp":
		if len(segs) >= 2 {
			return KindACP
		}
	case "cron":
		if len(segs) >= 2 {
			return KindCron
		}
	case "hook":
		if len(segs) >= 2 {
			return KindHook
		}
	}
	if len(segs) == 1 {
		return KindMain
	}
	// agent:<a>:direct:<peer>, agent:<a>:<channel>:direct:<peer>,
	// agent:<a>:<channel>:<account>:direct:<peer>, and group/room/channel shapes, with
	// optional :topic:/:thread: suffixes.
	for i := 0; i < len(segs)-1; i++ {
		switch segs[i] {
		case "direct", "dm":
			return KindDirect
		case "group":
			return KindGroup
		case "room":
			return KindRoom
		case "channel":
			return KindChannel
		}
	}
	return KindOther
}

func truncateForMessage(s string) string {
	const max = 80
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) || isLineSeparator(r) {
			r = '?'
		}
		b.WriteRune(r)
		if b.Len() >= max {
			b.WriteString("…")
			break
		}
	}
	return b.String()
}
