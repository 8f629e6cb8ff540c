package awareness

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func ptr[T any](v T) *T { return &v }

// wantInvalid fails unless err is an INVALID_ARGUMENT *Error with a message a person
// can act on (ERR-1).
func wantInvalid(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %s", EINVALID)
	}
	if got, want := ErrorCode(err), EINVALID; got != want {
		t.Fatalf("ErrorCode(%v) = %q, want %q", err, got, want)
	}
	if ErrorMessage(err) == "" {
		t.Fatalf("ErrorMessage(%v) is empty", err)
	}
}

func TestClassifyKey_KEY2(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want SessionKind
	}{
		// main: agent:<a>:<mainKey>
		{"agent:main:main", KindMain},
		{"agent:ops:work", KindMain},
		{"  AGENT:Main:Main ", KindMain},
		{"agent:main:subagent", KindMain}, // a one-segment rest is a main key, whatever its name
		// sub-agent and ACP children
		{"agent:main:subagent:abc", KindSubagent},
		{"agent:main:subagent:abc:subagent:def", KindSubagent},
		{"agent:main:acp:7f3c", KindACP},
		// direct
		{"agent:a:direct:peer", KindDirect},
		{"agent:a:telegram:direct:peer", KindDirect},
		{"agent:a:telegram:acct:direct:peer", KindDirect},
		{"agent:a:telegram:direct:peer:thread:42", KindDirect},
		{"agent:a:dm:peer", KindDirect},
		// group / room / channel, with topic and thread suffixes
		{"agent:a:discord:group:g1", KindGroup},
		{"agent:a:telegram:group:g1:topic:7", KindGroup},
		{"agent:a:matrix:room:r1", KindRoom},
		{"agent:a:matrix:room:r1:thread:t1", KindRoom},
		{"agent:a:slack:channel:c1", KindChannel},
		{"agent:a:slack:channel:c1:thread:t1", KindChannel},
		{"agent:a:telegram:direct:group", KindDirect}, // a peer named "group" is still direct
		// cron
		{"cron:job", KindCron},
		{"cron:job:run:r1", KindCron},
		{"CRON:Job", KindCron},
		{"agent:a:cron:job", KindCron},
		{"agent:a:cron:job:run:r1", KindCron},
		// webhook
		{"hook:0b6f3c2e-8d7a-4f61-9a53-2d9c1e0f4b7a", KindHook},
		{"agent:a:hook:0b6f3c2e-8d7a-4f61-9a53-2d9c1e0f4b7a", KindHook},
		// bare global
		{"global", KindGlobal},
		{" GLOBAL ", KindGlobal},
		// everything else
		{"main", KindOther},
		{"", KindOther},
		{"agent:main:", KindOther},
		{"agent:main:foo:bar", KindOther},
		{"agent:a:telegram:direct", KindOther}, // no peer
		{"globalx", KindOther},
	}
	for _, tt := range tests {
		if got := ClassifyKey(tt.key); got != tt.want {
			t.Errorf("ClassifyKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestSessionKindValid_KEY2(t *testing.T) {
	t.Parallel()
	for _, k := range AllSessionKinds {
		if !k.Valid() {
			t.Errorf("%q.Valid() = false, want true", k)
		}
	}
	if SessionKind("bogus").Valid() {
		t.Errorf(`"bogus".Valid() = true, want false`)
	}
}

func TestParseSessionKey_KEY1(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw    string
		want   ParsedKey
		wantOK bool
	}{
		{"agent:main:subagent:abc", ParsedKey{"main", "subagent:abc"}, true},
		{"agent:main:main", ParsedKey{"main", "main"}, true},
		{"  AGENT:Main:Main  ", ParsedKey{"main", "main"}, true},
		{"agent::x:y", ParsedKey{"x", "y"}, true},
		{"agent:main::subagent::abc:", ParsedKey{"main", "subagent:abc"}, true},
		{":agent:main:main", ParsedKey{"main", "main"}, true},
		{"agent:Ops:Telegram:Direct:Peer", ParsedKey{"ops", "telegram:direct:peer"}, true},
		{"agent: Main : x ", ParsedKey{"main", "x"}, true},
		{"agent:main:x : ", ParsedKey{"main", "x"}, true},
		{"agent:main:a b", ParsedKey{"main", "a b"}, true},
		{"agent:main:", ParsedKey{}, false},
		{"AGENT:0: :", ParsedKey{}, false},
		{"agent::main", ParsedKey{}, false},
		{"agent:main", ParsedKey{}, false},
		{"agent", ParsedKey{}, false},
		{"agents:main:main", ParsedKey{}, false},
		{"global", ParsedKey{}, false},
		{"cron:job:run:r1", ParsedKey{}, false},
		{"hook:abc", ParsedKey{}, false},
		{"", ParsedKey{}, false},
		{"   ", ParsedKey{}, false},
		{":::", ParsedKey{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseSessionKey(tt.raw)
		if ok != tt.wantOK {
			t.Errorf("ParseSessionKey(%q) ok = %v, want %v", tt.raw, ok, tt.wantOK)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseSessionKey(%q) mismatch (-want +got):\n%s", tt.raw, diff)
		}
	}
}

func TestParsedKeyString_KEY1(t *testing.T) {
	t.Parallel()
	p, ok := ParseSessionKey(" Agent:Main::SubAgent:ABC: ")
	if !ok {
		t.Fatal("ParseSessionKey failed")
	}
	if got, want := p.String(), "agent:main:subagent:abc"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if !p.IsSubagent() {
		t.Errorf("IsSubagent() = false, want true")
	}
}

func TestResolveSession_KEY1_KEY3_KEY4(t *testing.T) {
	t.Parallel()
	key512 := "agent:main:" + strings.Repeat("x", MaxKeyBytes-len("agent:main:"))
	bare512 := "cron:" + strings.Repeat("j", MaxKeyBytes-len("cron:"))
	tests := []struct {
		name    string
		key     string
		agent   *string
		want    SessionRef
		wantErr bool
	}{
		{"canonical", "agent:main:main", nil, SessionRef{"main", "agent:main:main"}, false},
		{"normalised", "  Agent:Ops::Work: ", nil, SessionRef{"ops", "agent:ops:work"}, false},
		{"agent agrees", "agent:ops:work", ptr("ops"), SessionRef{"ops", "agent:ops:work"}, false},
		{"agent agrees after trim+lower", "agent:ops:work", ptr(" OPS "), SessionRef{"ops", "agent:ops:work"}, false},
		{"agent contradicts", "agent:ops:work", ptr("main"), SessionRef{}, true},
		{"empty agent with canonical key", "agent:ops:work", ptr(""), SessionRef{}, true},
		{"bare global defaults to main", "global", nil, SessionRef{"main", "global"}, false},
		{"bare global with agent", " GLOBAL ", ptr("Ops"), SessionRef{"ops", "global"}, false},
		{"bare cron", "cron:Job:run:R1", ptr("ops"), SessionRef{"ops", "cron:job:run:r1"}, false},
		{"bare hook", "hook:0b6f3c2e", nil, SessionRef{"main", "hook:0b6f3c2e"}, false},
		{"bare with empty agent", "global", ptr(""), SessionRef{}, true},
		{"bare with invalid agent", "global", ptr("bad/id"), SessionRef{}, true},
		{"agent id starting with dash", "global", ptr("-ops"), SessionRef{}, true},
		{"agent id of 64 chars", "global", ptr(strings.Repeat("a", 64)), SessionRef{strings.Repeat("a", 64), "global"}, false},
		{"agent id of 65 chars", "global", ptr(strings.Repeat("a", 65)), SessionRef{}, true},
		{"agent id with underscore and dash", "global", ptr("a_b-9"), SessionRef{"a_b-9", "global"}, false},
		{"invalid agent in key", "agent:bad/id:main", nil, SessionRef{}, true},
		{"agent in key too long", "agent:" + strings.Repeat("a", 65) + ":main", nil, SessionRef{}, true},
		{"agent:main: does not parse", "agent:main:", nil, SessionRef{}, true},
		{"agent::main does not parse", "agent::main", nil, SessionRef{}, true},
		{"bare agent", "agent", nil, SessionRef{}, true},
		{"empty", "", nil, SessionRef{}, true},
		{"blank", "   ", nil, SessionRef{}, true},
		{"512 bytes", key512, nil, SessionRef{"main", key512}, false},
		{"513 bytes", key512 + "x", nil, SessionRef{}, true},
		{"bare 512 bytes", bare512, nil, SessionRef{"main", bare512}, false},
		{"bare 513 bytes", bare512 + "j", nil, SessionRef{}, true},
		// U+023A is 2 bytes and lowercases to U+2C65 (3 bytes): the canonical key
		// must still respect the limit.
		{"canonical form over 512 bytes", "agent:main:" + strings.Repeat("\u023a", 250), nil, SessionRef{}, true},
		{"bare canonical form over 512 bytes", "cron:" + strings.Repeat("\u023a", 250), nil, SessionRef{}, true},
		{"invalid UTF-8", "agent:main:\xff", nil, SessionRef{}, true},
		{"truncated UTF-8", "agent:main:\xe2\x82", nil, SessionRef{}, true},
		{"NUL", "agent:main:a\x00b", nil, SessionRef{}, true},
		{"tab inside", "agent:main:a\tb", nil, SessionRef{}, true},
		{"newline inside", "agent:main:a\nb", nil, SessionRef{}, true},
		{"DEL", "agent:main:a\x7fb", nil, SessionRef{}, true},
		{"C1 NEL", "agent:main:a\u0085b", nil, SessionRef{}, true},
		{"line separator", "agent:main:a\u2028b", nil, SessionRef{}, true},
		{"paragraph separator", "global\u2029x", nil, SessionRef{}, true},
		{"non-ASCII rest", "agent:main:Ünïcode", nil, SessionRef{"main", "agent:main:ünïcode"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveSession(tt.key, tt.agent)
			if tt.wantErr {
				wantInvalid(t, err)
				if diff := cmp.Diff(SessionRef{}, got); diff != "" {
					t.Errorf("rejected key returned a ref (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("ResolveSession(%q) error: %v", tt.key, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ResolveSession(%q) mismatch (-want +got):\n%s", tt.key, diff)
			}
		})
	}
}

func TestResolveSession_ErrorMessagesAreBounded_ERR1(t *testing.T) {
	t.Parallel()
	_, err := ResolveSession("agent:"+strings.Repeat("b/", 200)+":main", nil)
	wantInvalid(t, err)
	if n := len(ErrorMessage(err)); n > 300 {
		t.Errorf("message is %d bytes, want a truncated echo of the key", n)
	}
	_, err = ResolveSession("global", ptr("bad\x00id"))
	wantInvalid(t, err)
	if strings.ContainsRune(ErrorMessage(err), 0) {
		t.Errorf("message %q echoes a control character", ErrorMessage(err))
	}
}

func TestResolveWatcher_KEY3_WAT1(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key     string
		want    SessionRef
		wantErr bool
	}{
		{"agent:main:main", SessionRef{"main", "agent:main:main"}, false},
		{" AGENT:Main:SubAgent:X ", SessionRef{"main", "agent:main:subagent:x"}, false},
		{"agent:ops:telegram:direct:peer", SessionRef{"ops", "agent:ops:telegram:direct:peer"}, false},
		{"global", SessionRef{}, true},
		{"cron:job", SessionRef{}, true},
		{"hook:abc", SessionRef{}, true},
		{"main", SessionRef{}, true},
		{"agent:main:", SessionRef{}, true},
		{"agent:bad/id:main", SessionRef{}, true},
		{"", SessionRef{}, true},
		{"agent:main:a\x00", SessionRef{}, true},
		{"agent:main:" + strings.Repeat("x", MaxKeyBytes), SessionRef{}, true},
		{"agent:main:" + strings.Repeat("\u023a", 250), SessionRef{}, true},
	}
	for _, tt := range tests {
		got, err := ResolveWatcher(tt.key)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ResolveWatcher(%q) = %+v, want error", tt.key, got)
				continue
			}
			if got, want := ErrorCode(err), EINVALID; got != want {
				t.Errorf("ResolveWatcher(%q) code = %q, want %q", tt.key, got, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("ResolveWatcher(%q) error: %v", tt.key, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ResolveWatcher(%q) mismatch (-want +got):\n%s", tt.key, diff)
		}
		if !got.Qualified() {
			t.Errorf("ResolveWatcher(%q).Qualified() = false, want true", tt.key)
		}
	}
}

func TestSessionRefQualified_KEY3(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ref  SessionRef
		want bool
	}{
		{SessionRef{"main", "agent:main:main"}, true},
		{SessionRef{"main", "global"}, false},
		{SessionRef{"main", "cron:job"}, false},
	} {
		if got := tt.ref.Qualified(); got != tt.want {
			t.Errorf("%+v.Qualified() = %v, want %v", tt.ref, got, tt.want)
		}
	}
}

// FuzzParseSessionKey checks the KEY-1/KEY-4 invariants of the key grammar. Seeds live in
// testdata/fuzz/FuzzParseSessionKey.
func FuzzParseSessionKey(f *testing.F) {
	for _, s := range []string{
		"agent:main:main", "agent:main:subagent:abc", "agent::x:y", "agent:main:", "global",
		"cron:job:run:r1", "hook:0b6f3c2e", " AGENT:Ops:Work ", "agent:bad/id:main",
		"agent:main:\u023a", "agent:main:\xff", "agent:\u212aai:main",
		"agent:a:b", "agent:a:b:", "agent:a::b", ":agent:a:b", "agent:a", "agentx:a:b", "agent:a:b c",
		"agent:a:B", "agent:a:\x7f", "agent:a:\tb",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if k := ClassifyKey(raw); !k.Valid() {
			t.Errorf("ClassifyKey(%q) = %q, not a valid kind", raw, k)
		}
		// The allocation-free parse of stored keys gives what the general one gives.
		p, ok := ParseSessionKey(raw)
		if wp, wok := parseKey(raw); ok != wok || p != wp {
			t.Fatalf("ParseSessionKey(%q) = %+v, %v; the general parse gives %+v, %v", raw, p, ok, wp, wok)
		}
		if ok {
			c := p.String()
			p2, ok2 := ParseSessionKey(c)
			if !ok2 {
				t.Fatalf("canonical %q of %q does not re-parse", c, raw)
			}
			if diff := cmp.Diff(p, p2); diff != "" {
				t.Fatalf("re-parse of %q changed it (-first +second):\n%s", c, diff)
			}
			if got := p2.String(); got != c {
				t.Fatalf("canonical form not idempotent: %q → %q", c, got)
			}
			if p.AgentID == "" || strings.Contains(p.AgentID, ":") {
				t.Fatalf("agent id %q of %q is empty or has a colon", p.AgentID, raw)
			}
			for _, seg := range strings.Split(c, ":") {
				if seg == "" {
					t.Fatalf("canonical %q has an empty segment", c)
				}
			}
			if low := strings.ToLower(c); low != c {
				t.Fatalf("canonical %q is not lowercase (%q)", c, low)
			}
			if got, want := ClassifyKey(c), ClassifyKey(raw); got != want {
				t.Fatalf("ClassifyKey(%q) = %q, but ClassifyKey(%q) = %q", c, got, raw, want)
			}
		}

		ref, err := ResolveSession(raw, nil)
		if err != nil {
			if ErrorCode(err) != EINVALID {
				t.Fatalf("ResolveSession(%q) code = %q, want %q", raw, ErrorCode(err), EINVALID)
			}
		} else {
			checkResolved(t, raw, ref)
			again, err := ResolveSession(ref.Key, &ref.AgentID)
			if err != nil {
				t.Fatalf("ResolveSession(%q, %q) of a resolved ref: %v", ref.Key, ref.AgentID, err)
			}
			if diff := cmp.Diff(ref, again); diff != "" {
				t.Fatalf("resolving %+v again changed it (-first +second):\n%s", ref, diff)
			}
		}

		w, err := ResolveWatcher(raw)
		if err == nil {
			checkResolved(t, raw, w)
			if !w.Qualified() {
				t.Fatalf("ResolveWatcher(%q) = %+v, not agent-qualified", raw, w)
			}
			if ref2, err := ResolveSession(raw, nil); err != nil || ref2 != w {
				t.Fatalf("ResolveWatcher(%q) = %+v but ResolveSession = %+v, %v", raw, w, ref2, err)
			}
		}
	})
}

func checkResolved(t *testing.T, raw string, ref SessionRef) {
	t.Helper()
	if len(ref.Key) > MaxKeyBytes {
		t.Fatalf("resolved key of %q is %d bytes, over %d", raw, len(ref.Key), MaxKeyBytes)
	}
	if !utf8.ValidString(ref.Key) {
		t.Fatalf("resolved key %q is not valid UTF-8", ref.Key)
	}
	if strings.TrimSpace(ref.Key) != ref.Key || ref.Key == "" {
		t.Fatalf("resolved key %q is empty or untrimmed", ref.Key)
	}
	for _, r := range ref.Key {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			t.Fatalf("resolved key %q contains %U", ref.Key, r)
		}
	}
	if !ValidAgentID(ref.AgentID) {
		t.Fatalf("resolved agent id %q of %q is invalid", ref.AgentID, raw)
	}
}
