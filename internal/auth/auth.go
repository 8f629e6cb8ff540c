// Package auth authenticates callers with bearer tokens named in an auth file.
//
// The auth file, serve --auth-file PATH or $AWARENESS_AUTH_FILE, is JSON:
//
//	{
//	  "tokens": [
//	    {"name": "dashboard", "role": "admin",     "token": "8f1c…(at least 32 characters)"},
//	    {"name": "gw-ops",    "role": "agent:ops", "token": "b27e…"}
//	  ]
//	}
//
// role is "admin", allowed everything including the dashboard and unfiltered streams,
// or "agent:<agentId>", allowed the sessions of that agent only; see
// awareness.Principal. An optional "grants" object widens agents explicitly (CLT-1),
// and nothing is granted without it:
//
//	"grants": {
//	  "watch":    {"dev": ["ops"]},
//	  "catalogs": {"claude": ["dev", "ops"]}
//	}
//
// watch lets the sessions of agent dev watch the sessions of agent ops, not the other
// way round; catalogs restricts adoption from catalog claude to agents dev and ops. A
// catalog not named there is open to every agent, and admins may always adopt. name
// is optional and only appears in logs. Tokens are opaque strings of at least
// MinTokenLength printable ASCII characters; generate them with e.g.
// `openssl rand -hex 32`. Load refuses a file that other users may read or write:
// chmod 600.
//
// Only the SHA-256 of each token is kept in memory, and a presented token is compared
// with every known hash in constant time.
package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/awareness/awareness/internal/awareness"
)

// MinTokenLength is the shortest token an auth file may name.
const MinTokenLength = 32

// maxFileBytes bounds the auth file.
const maxFileBytes = 1 << 20

// Errors of Authenticate. They are safe to show to the caller.
var (
	// ErrNoCredentials means no bearer token was presented.
	ErrNoCredentials = errors.New("a bearer token is required: send the header 'Authorization: Bearer <token>'")
	// ErrBadCredentials means the token or the header is not valid.
	ErrBadCredentials = errors.New("the bearer token is not valid")
)

// Keyring holds the known tokens, as SHA-256 hashes, and their principals, and the
// auth file's grants.
type Keyring struct {
	entries []entry
	grants  awareness.Grants
}

type entry struct {
	hash      [sha256.Size]byte
	principal awareness.Principal
}

// fileFormat is the JSON of an auth file.
type fileFormat struct {
	Tokens []struct {
		Name  string `json:"name"`
		Role  string `json:"role"`
		Token string `json:"token"`
	} `json:"tokens"`
	Grants struct {
		Watch    map[string][]string `json:"watch"`
		Catalogs map[string][]string `json:"catalogs"`
	} `json:"grants"`
}

// Load reads and parses the auth file at path. It refuses a file that other users may
// read or write; warnings, such as a group-readable file, are for the caller to log.
func Load(path string) (k *Keyring, warnings []string, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("auth file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("auth file %q is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return nil, nil, fmt.Errorf("auth file %q has mode %#o: other users may read or change its tokens; run 'chmod 600 %s'", path, perm, path)
	} else if perm&0o070 != 0 {
		warnings = append(warnings, fmt.Sprintf("auth file %q has mode %#o: its group may read the tokens; consider 'chmod 600'", path, perm))
	}
	if fi.Size() > maxFileBytes {
		return nil, nil, fmt.Errorf("auth file %q is larger than %d bytes", path, maxFileBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("auth file: %w", unwrapPath(err))
	}
	k, err = Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("auth file %q: %w", path, err)
	}
	return k, warnings, nil
}

func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// Parse parses the JSON of an auth file. Error messages never contain a token.
func Parse(data []byte) (*Keyring, error) {
	var f fileFormat
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not the expected JSON ({\"tokens\":[{\"name\":…,\"role\":…,\"token\":…}]}): %v", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	if len(f.Tokens) == 0 {
		return nil, errors.New("no tokens: name at least one {\"role\":\"admin\",\"token\":…}")
	}
	k := &Keyring{}
	seen := map[[sha256.Size]byte]int{}
	for i, t := range f.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		if t.Name != "" {
			where += fmt.Sprintf(" (%q)", t.Name)
		}
		p, err := awareness.ParseRole(t.Role)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		if len(t.Token) < MinTokenLength {
			return nil, fmt.Errorf("%s: the token is shorter than %d characters", where, MinTokenLength)
		}
		for _, c := range []byte(t.Token) {
			if c <= ' ' || c > '~' {
				return nil, fmt.Errorf("%s: the token must be printable ASCII without spaces", where)
			}
		}
		h := sha256.Sum256([]byte(t.Token))
		if j, dup := seen[h]; dup {
			return nil, fmt.Errorf("%s: the same token as tokens[%d]", where, j)
		}
		seen[h] = i
		p.Name = t.Name
		if p.Name == "" {
			p.Name = fmt.Sprintf("tokens[%d]", i)
		}
		k.entries = append(k.entries, entry{hash: h, principal: p})
	}
	for what, m := range map[string]map[string][]string{"watch": f.Grants.Watch, "catalogs": f.Grants.Catalogs} {
		for from, agents := range m {
			if !awareness.ValidAgentID(from) {
				return nil, fmt.Errorf("grants.%s: %q is not an agent or catalog id of [a-z0-9][a-z0-9_-]{0,63}", what, from)
			}
			for _, a := range agents {
				if !awareness.ValidAgentID(a) {
					return nil, fmt.Errorf("grants.%s.%s: %q is not an agent id of [a-z0-9][a-z0-9_-]{0,63}", what, from, a)
				}
			}
		}
	}
	k.grants = awareness.Grants{Watch: f.Grants.Watch, Catalogs: f.Grants.Catalogs}
	return k, nil
}

// Grants returns the auth file's cross-agent grants, for awareness.Config.Grants.
func (k *Keyring) Grants() awareness.Grants { return k.grants }

// Len returns the number of tokens.
func (k *Keyring) Len() int { return len(k.entries) }

// Roles returns the roles of the tokens, for the startup log.
func (k *Keyring) Roles() []string {
	out := make([]string, len(k.entries))
	for i, e := range k.entries {
		out[i] = e.principal.Name + "=" + e.principal.Role()
	}
	return out
}

// Lookup returns the principal of token. It hashes the token and compares the hash
// with every known one in constant time, without stopping at a match.
func (k *Keyring) Lookup(token string) (awareness.Principal, bool) {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range k.entries {
		if subtle.ConstantTimeCompare(h[:], k.entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return awareness.Principal{}, false
	}
	return k.entries[found].principal, true
}

// BearerToken extracts the token of an Authorization value "Bearer <token>", the
// scheme in any case. ok is false for an empty value or another scheme.
func BearerToken(authorization string) (token string, ok bool) {
	v := strings.TrimSpace(authorization)
	scheme, rest, found := strings.Cut(v, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(rest)
	return token, token != ""
}

// Authenticate returns the principal of an Authorization value: ErrNoCredentials when
// it is empty, ErrBadCredentials when it is not a known bearer token.
func (k *Keyring) Authenticate(authorization string) (awareness.Principal, error) {
	if strings.TrimSpace(authorization) == "" {
		return awareness.Principal{}, ErrNoCredentials
	}
	tok, ok := BearerToken(authorization)
	if !ok {
		return awareness.Principal{}, ErrBadCredentials
	}
	p, ok := k.Lookup(tok)
	if !ok {
		return awareness.Principal{}, ErrBadCredentials
	}
	return p, nil
}
