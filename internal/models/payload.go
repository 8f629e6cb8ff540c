package models

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/awareness/awareness/internal/awareness"
)

// decodePayload reads a stored payload. The store writes payloads with json.Marshal of
// awareness.Payload, so nearly every one is a flat object of plain strings and one
// integer; that form is parsed directly (a reconciliation page decodes up to 500 of
// them, and encoding/json's reflection cost more than the rest of the row). Anything
// else, escapes included, goes through encoding/json.
func decodePayload(s string, p *awareness.Payload) error {
	if decodePlainPayload(s, p) {
		return nil
	}
	*p = awareness.Payload{}
	return json.Unmarshal([]byte(s), p)
}

// decodePlainPayload parses {"outcome":"…","channel":"…","turns":N} (any subset, any
// order, no whitespace, strings without escapes) into p and reports whether s had that
// form; on false p is unchanged.
func decodePlainPayload(s string, p *awareness.Payload) bool {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return false
	}
	s = s[1 : len(s)-1]
	var out awareness.Payload
	for s != "" {
		key, rest, ok := plainString(s)
		if !ok || !strings.HasPrefix(rest, ":") {
			return false
		}
		s = rest[1:]
		switch key {
		case "outcome", "channel":
			v, rest, ok := plainString(s)
			if !ok {
				return false
			}
			if key == "outcome" {
				out.Outcome = awareness.RunOutcome(v)
			} else {
				out.Channel = v
			}
			s = rest
		case "turns":
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			n, ok := plainInt(s[:end])
			if !ok {
				return false
			}
			out.Turns = n
			s = s[end:]
		default:
			return false
		}
		if s == "" {
			break
		}
		if s[0] != ',' || len(s) == 1 {
			return false
		}
		s = s[1:]
	}
	*p = out
	return true
}

// plainString reads a JSON string with no escapes and only printable ASCII or valid
// UTF-8 above it at the start of s.
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

// plainInt reads a JSON integer (no sign but '-', no leading zeros, no exponent).
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
