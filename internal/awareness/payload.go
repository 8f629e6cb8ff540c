package awareness

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Payload is the whitelisted event payload (SIG-2): nothing else can be stored.
// Each field has its JSON key in payloadKeys and its case in field, from which Map,
// AppendJSON and ParsePayload write every JSON form of a payload.
type Payload struct {
	Outcome RunOutcome `json:"outcome,omitempty"`
	Channel string     `json:"channel,omitempty"`
	Turns   int        `json:"turns,omitempty"`
}

// payloadKeys are the JSON keys of Payload's fields, sorted as the JSON scalar writes
// an object's keys; field maps each to its field.
var payloadKeys = []string{"channel", "outcome", "turns"}

// field returns the field with the JSON key key: a string field as s, an integer field
// as n; both nil for an unknown key.
func (p *Payload) field(key string) (s *string, n *int) {
	switch key {
	case "channel":
		return &p.Channel, nil
	case "outcome":
		return (*string)(&p.Outcome), nil
	case "turns":
		return nil, &p.Turns
	}
	return nil, nil
}

// IsZero reports whether the payload is empty.
func (p Payload) IsZero() bool { return p == Payload{} }

// Map returns the payload as a JSON object, nil when empty.
func (p Payload) Map() map[string]any {
	if p.IsZero() {
		return nil
	}
	m := map[string]any{}
	for _, k := range payloadKeys {
		switch s, n := p.field(k); {
		case s != nil && *s != "":
			m[k] = *s
		case n != nil && *n != 0:
			m[k] = *n
		}
	}
	return m
}

// AppendJSON appends the payload as a JSON object of its non-zero fields, byte for
// byte what encoding/json writes for Map's object, keys sorted and strings escaped
// alike, without building the map: a sessionStatus page writes up to 500 of them.
// The zero payload is {}.
func (p Payload) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	first := true
	for _, k := range payloadKeys {
		s, n := p.field(k)
		if (s == nil || *s == "") && (n == nil || *n == 0) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":`...)
		if s != nil {
			b = appendJSONString(b, *s)
		} else {
			b = strconv.AppendInt(b, int64(*n), 10)
		}
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json encodes a string, with its HTML-safe
// escapes; plain ASCII, the usual case, is copied as is.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// ParsePayload reads a payload's JSON object. A store writes payloads with
// encoding/json, so nearly every one is a flat object of plain strings and integers;
// that form is parsed directly, since a reconciliation page decodes up to 500 of them
// and encoding/json's reflection cost more than the rest of the row. Anything else,
// escapes included, goes through encoding/json.
func ParsePayload(s string) (Payload, error) {
	if p, ok := parsePlainPayload(s); ok {
		return p, nil
	}
	var p Payload
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return Payload{}, err
	}
	return p, nil
}

// parsePlainPayload parses an object of any subset of payloadKeys in any order,
// without whitespace or escapes in strings, and reports whether s had that form.
func parsePlainPayload(s string) (Payload, bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return Payload{}, false
	}
	s = s[1 : len(s)-1]
	var out Payload
	for s != "" {
		key, rest, ok := plainString(s)
		if !ok || !strings.HasPrefix(rest, ":") {
			return Payload{}, false
		}
		s = rest[1:]
		str, num := out.field(key)
		switch {
		case str == nil && num == nil:
			return Payload{}, false
		case str != nil:
			v, rest, ok := plainString(s)
			if !ok {
				return Payload{}, false
			}
			*str = v
			s = rest
		default:
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			n, ok := plainInt(s[:end])
			if !ok {
				return Payload{}, false
			}
			*num = n
			s = s[end:]
		}
		if s == "" {
			break
		}
		if s[0] != ',' || len(s) == 1 {
			return Payload{}, false
		}
		s = s[1:]
	}
	return out, true
}

// plainString reads a JSON string with no escapes and only printable ASCII at the start
// of s.
func plainString(s string) (v, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", false
	}
	i := strings.IndexByte(s[1:], '"')
	if i < 0 {
		return "", "", false
	}
	v = s[1 : 1+i]
	for j := 0; j < len(v); j++ {
		if c := v[j]; c < 0x20 || c == '\\' || c >= 0x80 {
			return "", "", false // escapes, control or non-ASCII bytes: encoding/json decides
		}
	}
	return v, s[2+i:], true
}

// plainInt reads a JSON integer: no sign but '-', no leading zeros, no exponent.
func plainInt(s string) (int, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}
