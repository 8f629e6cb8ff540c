package edge

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/awareness/awareness/internal/awareness"
)

// Hosts is the allowlist of Host headers the service answers, its defence against DNS
// rebinding: a page of another site whose name is made to resolve to this service's
// address sends its requests with its own name in Host, and in Origin, so an Origin
// check alone passes it as same-origin. A request's Host is allowed when it is
//
//   - an IP address: a rebinding page's requests always carry a name;
//   - a loopback name: localhost or a name under .localhost;
//   - the host of the listen address;
//   - one of the extra names of serve --allowed-hosts: an exact name, "*.example.com"
//     for the names under example.com, or "*" for every name, which protects nothing.
//
// Names are compared without case, a trailing dot and the port.
type Hosts struct {
	any      bool
	names    map[string]bool
	suffixes []string // ".example.com" of "*.example.com"
}

// NewHosts returns the allowlist of a service listening on listenAddr, a host:port
// whose host may be empty or an IP, with the extra patterns. It refuses a malformed
// pattern.
func NewHosts(listenAddr string, extra []string) (*Hosts, error) {
	h := &Hosts{names: map[string]bool{"localhost": true}}
	host := listenAddr
	if hh, _, err := net.SplitHostPort(listenAddr); err == nil {
		host = hh
	}
	if host = normalizeHost(host); host != "" {
		h.names[host] = true
	}
	for _, p := range extra {
		p = strings.TrimSpace(p)
		switch {
		case p == "*":
			h.any = true
		case strings.HasPrefix(p, "*."):
			name := normalizeHost(p[2:])
			if !validName(name) {
				return nil, fmt.Errorf("host pattern %q: want a name, *.name or *", p)
			}
			h.suffixes = append(h.suffixes, "."+name)
		default:
			name := normalizeHost(p)
			if !validName(name) {
				return nil, fmt.Errorf("host pattern %q: want a name (no scheme, port or path), *.name or *", p)
			}
			h.names[name] = true
		}
	}
	return h, nil
}

// normalizeHost lowercases a name and drops its trailing dot and the brackets of an
// IPv6 literal.
func normalizeHost(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	return strings.TrimSuffix(s, ".")
}

// validName reports whether s is a DNS name or an IP address, without a scheme, port,
// path or wildcard.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Allowed reports whether a request with this Host header, host or host:port, may be
// answered. A nil *Hosts allows every host.
func (h *Hosts) Allowed(hostHeader string) bool {
	if h == nil || h.any {
		return true
	}
	host := hostHeader
	if hh, port, err := net.SplitHostPort(hostHeader); err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr != nil && port != "" {
			return false
		}
		host = hh
	}
	host = normalizeHost(host)
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if h.names[host] || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for _, s := range h.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// RefusalMessage is the message of a request refused for its Host.
func RefusalMessage(hostHeader string) string {
	if len(hostHeader) > 80 {
		hostHeader = hostHeader[:80] + "…"
	}
	return "host " + strconv.Quote(hostHeader) + " is not a name this service answers to (DNS rebinding protection): " +
		"reach it by an IP address, localhost or its listen address, or start it with --allowed-hosts naming the host"
}

// Guard refuses, before next sees it, a request whose Host is not Allowed: 403 with a
// GraphQL-shaped body whose extensions.code is FORBIDDEN, on every route and every
// transport; a WebSocket handshake is refused before the upgrade. skip names the
// paths answered whatever the Host: health probes, which carry no data.
func (h *Hosts) Guard(next http.Handler, skip ...string) http.Handler {
	if h == nil || h.any {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.Allowed(r.Host) || slices.Contains(skip, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		Forbid(w, RefusalMessage(r.Host))
	})
}

// Forbid answers 403 with a GraphQL-shaped body whose extensions.code is FORBIDDEN:
// the refusal of a Host or an Origin, before any transport runs.
func Forbid(w http.ResponseWriter, message string) {
	body, _ := json.Marshal(map[string]any{"errors": []any{map[string]any{
		"message": message, "extensions": map[string]any{"code": awareness.EFORBIDDEN},
	}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(body)
}
