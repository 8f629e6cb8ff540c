package awareness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxJSONInt is the largest integer a JavaScript gateway writes exactly (2^53 − 1).
const maxJSONInt = 1<<53 - 1

// fieldSpec describes a documented SessionEntry field (REG-1).
type fieldSpec struct {
	// typed fields have their own column (or feed one, like updatedAt and
	// compactionCount) and are never kept in extra.
	typed bool
	// check validates the JSON type of a documented field kept in extra.
	check func(json.RawMessage) error
}

// entryFields are the documented SessionEntry fields of the gateway store. Every other
// field is kept in extra as it is (REG-2).
var entryFields = map[string]fieldSpec{
	"sessionId":                  {typed: true},
	"updatedAt":                  {typed: true},
	"chatType":                   {typed: true},
	"provider":                   {typed: true},
	"displayName":                {typed: true},
	"inputTokens":                {typed: true},
	"outputTokens":               {typed: true},
	"totalTokens":                {typed: true},
	"contextTokens":              {typed: true},
	"compactionCount":            {typed: true},
	"memoryFlushAt":              {typed: true},
	"memoryFlushCompactionCount": {typed: true},
	"parentSessionKey":           {typed: true},

	// Lineage: spawnedBy gives parentSessionKey when that is absent, and is kept too.
	"spawnedBy": {check: wantString},

	"sessionFile":         {check: wantString},
	"subject":             {check: wantString},
	"room":                {check: wantString},
	"space":               {check: wantString},
	"thinkingLevel":       {check: wantString},
	"verboseLevel":        {check: wantString},
	"reasoningLevel":      {check: wantString},
	"elevatedLevel":       {check: wantString},
	"sendPolicy":          {check: wantString},
	"providerOverride":    {check: wantString},
	"modelOverride":       {check: wantString},
	"authProfileOverride": {check: wantString},
	"label":               {check: wantString},
	"sessionStartedAt":    {check: func(v json.RawMessage) error { _, err := nonNegInt(v); return err }},
	"lastInteractionAt":   {check: func(v json.RawMessage) error { _, err := nonNegInt(v); return err }},
	"abortedLastRun":      {check: wantBool},
	"origin":              {check: wantObject},
}

// ParseSessionsJSON reads a gateway's sessions.json for one agent (REG-2): a JSON
// object mapping session keys to SessionEntry objects. Keys may be canonical
// (`agent:<id>:…`, which must name agentID) or bare (`global`, `cron:…`, `hook:…`),
// which belong to agentID (KEY-3). updatedAt and memoryFlushAt are epoch milliseconds.
// Documented fields are type-checked; unknown fields are kept in Extra (null values
// are dropped). The result is in document order, every write with Replace set.
//
// Any malformed part (bad key, wrong type, duplicate session, truncated or invalid
// JSON) rejects the whole document with an INVALID_ARGUMENT error naming the entry.
func ParseSessionsJSON(agentID string, data []byte) ([]SessionWrite, error) {
	agent := strings.ToLower(strings.TrimSpace(agentID))
	if !ValidAgentID(agent) {
		return nil, Errorf(EINVALID, "agentId %q is not a valid agent id ([a-z0-9][a-z0-9_-]{0,63})", truncateForMessage(agentID))
	}
	if len(data) > MaxImportBytes {
		return nil, Errorf(EINVALID, "sessions.json is %d bytes; the limit is %d", len(data), MaxImportBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, Errorf(EINVALID, "sessions.json is empty: want a JSON object mapping session keys to entries")
	}
	if err != nil {
		return nil, jsonErr(dec, err, "sessions.json")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, Errorf(EINVALID, "sessions.json must be a JSON object mapping session keys to entries, not %s", describeToken(tok))
	}
	var (
		out  []SessionWrite
		seen = map[SessionRef]string{}
		last string
	)
	for dec.More() {
		where := "sessions.json"
		if last != "" {
			where = fmt.Sprintf("sessions.json after entry %q", truncateForMessage(last))
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(dec, err, where)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, jsonErr(dec, err, fmt.Sprintf("sessions.json entry %q", truncateForMessage(key)))
		}
		w, err := importEntry(agent, key, raw)
		if err != nil {
			return nil, Errorf(EINVALID, "sessions.json entry %q: %s", truncateForMessage(key), ErrorMessage(err))
		}
		if prev, dup := seen[w.Ref]; dup {
			return nil, Errorf(EINVALID, "sessions.json entries %q and %q are the same session %q", truncateForMessage(prev), truncateForMessage(key), truncateForMessage(w.Ref.Key))
		}
		seen[w.Ref] = key
		if len(out) == MaxImportEntries {
			return nil, Errorf(EINVALID, "sessions.json has more than %d entries", MaxImportEntries)
		}
		out = append(out, w)
		last = key
	}
	if _, err := dec.Token(); err != nil {
		where := "sessions.json"
		if last != "" {
			where = fmt.Sprintf("sessions.json after entry %q", truncateForMessage(last))
		}
		return nil, jsonErr(dec, err, where)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, Errorf(EINVALID, "sessions.json has data after its top-level object (at byte %d)", dec.InputOffset())
	}
	return out, nil
}

// jsonErr describes a decoding failure of where.
func jsonErr(dec *json.Decoder, err error, where string) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return Errorf(EINVALID, "%s is truncated: the JSON ends early", where)
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return Errorf(EINVALID, "%s is not valid JSON at byte %d: %s", where, se.Offset, se.Error())
	}
	return Errorf(EINVALID, "%s is not valid JSON at byte %d", where, dec.InputOffset())
}

// importEntry decodes one entry of sessions.json.
func importEntry(agent, key string, raw json.RawMessage) (SessionWrite, error) {
	if p, ok := ParseSessionKey(key); ok && p.AgentID != agent {
		return SessionWrite{}, Errorf(EINVALID, "the key belongs to agent %q, not %q: import each agent's sessions.json with its own agent id", truncateForMessage(p.AgentID), agent)
	}
	ref, err := ResolveSession(key, &agent)
	if err != nil {
		return SessionWrite{}, err
	}
	raw = trimRaw(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return SessionWrite{}, Errorf(EINVALID, "want an object, got %s", describeRaw(raw))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return SessionWrite{}, Errorf(EINVALID, "not a JSON object")
	}
	w := SessionWrite{Ref: ref, Replace: true}
	e := &w.Entry
	size := 0
	for _, name := range sortedKeys(fields) {
		v := trimRaw(fields[name])
		if err := decodeField(&w, name, v); err != nil {
			return SessionWrite{}, Errorf(EINVALID, "%s: %s", truncateForMessage(name), ErrorMessage(err))
		}
		if f, ok := entryFields[name]; (ok && f.typed) || isNull(v) {
			continue
		}
		if err := checkExtraKey(name); err != nil {
			return SessionWrite{}, err
		}
		if err := checkJSONText(truncateForMessage(name), v); err != nil {
			return SessionWrite{}, err
		}
		if e.Extra == nil {
			e.Extra = map[string]json.RawMessage{}
		}
		e.Extra[name] = v
		size += len(name) + len(v) + 4
	}
	if size > MaxExtraBytes {
		return SessionWrite{}, Errorf(EINVALID, "its other fields are about %d bytes; the limit is %d", size, MaxExtraBytes)
	}
	if e.ParentSessionKey == nil {
		if v, ok := e.Extra["spawnedBy"]; ok {
			p, err := parentKey(v)
			if err != nil {
				return SessionWrite{}, Errorf(EINVALID, "spawnedBy: %s", ErrorMessage(err))
			}
			e.ParentSessionKey = &p
		}
	}
	if err := checkTypedFields(e); err != nil {
		return SessionWrite{}, err
	}
	return w, nil
}

// decodeField decodes one field into w's typed fields, or type-checks a documented
// field that stays in extra.
func decodeField(w *SessionWrite, name string, v json.RawMessage) error {
	e := &w.Entry
	var err error
	switch name {
	case "sessionId":
		e.SessionID, err = optStringRaw(v)
	case "chatType":
		e.ChatType, err = optStringRaw(v)
	case "provider":
		e.Provider, err = optStringRaw(v)
	case "displayName":
		e.DisplayName, err = optStringRaw(v)
	case "parentSessionKey":
		if isNull(v) {
			return nil
		}
		var p string
		if p, err = parentKey(v); err == nil {
			e.ParentSessionKey = &p
		}
	case "inputTokens":
		e.InputTokens, err = nonNegInt(v)
	case "outputTokens":
		e.OutputTokens, err = nonNegInt(v)
	case "totalTokens":
		e.TotalTokens, err = nonNegInt(v)
	case "contextTokens":
		e.ContextTokens, err = nonNegInt(v)
	case "memoryFlushCompactionCount":
		e.MemoryFlushCompactionCount, err = nonNegInt(v)
	case "compactionCount":
		w.CompactionCount, err = nonNegInt(v)
	case "updatedAt":
		w.UpdatedAt, err = epochMillis(v)
	case "memoryFlushAt":
		e.MemoryFlushAt, err = epochMillis(v)
	default:
		if f, ok := entryFields[name]; ok && f.check != nil && !isNull(v) {
			err = f.check(v)
		}
	}
	return err
}

// parentKey reads a lineage field (parentSessionKey, spawnedBy): a session key, in
// canonical form.
func parentKey(v json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", Errorf(EINVALID, "want a session key string, got %s", describeRaw(v))
	}
	ref, err := ResolveSession(s, nil)
	if err != nil {
		return "", err
	}
	return ref.Key, nil
}

func optStringRaw(v json.RawMessage) (*string, error) {
	if isNull(v) {
		return nil, nil
	}
	if err := wantString(v); err != nil {
		return nil, err
	}
	var s string
	_ = json.Unmarshal(v, &s)
	return &s, nil
}

// nonNegInt reads a non-negative integer (null is nil). An integral number written
// with a fraction or exponent (12.0, 1.2e4) is accepted; anything else is not.
func nonNegInt(v json.RawMessage) (*int64, error) {
	if isNull(v) {
		return nil, nil
	}
	bad := Errorf(EINVALID, "want a non-negative integer, got %s", describeRaw(v))
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return nil, bad
	}
	s := string(v)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > maxJSONInt {
			return nil, bad
		}
		return &n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > maxJSONInt || f != math.Trunc(f) {
		return nil, bad
	}
	n := int64(f)
	return &n, nil
}

// epochMillis reads a time written as epoch milliseconds, as the gateway writes
// Date.now().
func epochMillis(v json.RawMessage) (*time.Time, error) {
	n, err := nonNegInt(v)
	if err != nil || n == nil {
		if err != nil {
			return nil, Errorf(EINVALID, "want epoch milliseconds, got %s", describeRaw(v))
		}
		return nil, nil
	}
	t := time.UnixMilli(*n).UTC()
	return &t, nil
}

func wantString(v json.RawMessage) error {
	if len(v) == 0 || v[0] != '"' {
		return Errorf(EINVALID, "want a string, got %s", describeRaw(v))
	}
	return nil
}

func wantBool(v json.RawMessage) error {
	if s := string(v); s != "true" && s != "false" {
		return Errorf(EINVALID, "want a boolean, got %s", describeRaw(v))
	}
	return nil
}

func wantObject(v json.RawMessage) error {
	if len(v) == 0 || v[0] != '{' {
		return Errorf(EINVALID, "want an object, got %s", describeRaw(v))
	}
	return nil
}

func trimRaw(v json.RawMessage) json.RawMessage { return bytes.TrimSpace(v) }

func isNull(v json.RawMessage) bool { return string(v) == "null" }

// describeRaw names the JSON type of v, with the value when it is short.
func describeRaw(v json.RawMessage) string {
	if len(v) == 0 {
		return "nothing"
	}
	kind := "a number"
	switch v[0] {
	case '"':
		kind = "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		kind = "a boolean"
	case 'n':
		return "null"
	}
	if len(v) <= 40 {
		return kind + " " + truncateForMessage(string(v))
	}
	return kind
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "an array"
		}
		return "a " + string(t)
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a number"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Sorted so that the first error of an entry is stable.
	slices.Sort(keys)
	return keys
}
