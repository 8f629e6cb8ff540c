// Package loadkeys names the sessions of the WebSocket load runs, so that the load
// generator (bench/cmd/wsload) and the bare baseline server (bench/cmd/wsbaseline)
// agree on them.
//
// Subscriber i watches as Watcher(i). Target sets:
//
//	'a'  Target('a', i): the target of subscriber i in L1(a) (one watcher each)
//	'u'  Target('u', i): the same for the L1(a)+L3 phase
//	'c'  Target('c', r): broadcast round r to the first "small" subscribers (L1(b) 1k)
//	'b'  Target('b', r): broadcast round r to every subscriber (L1(b) 10k)
package loadkeys

import (
	"strconv"
	"strings"
)

// StatusSession is the session the L3 sessionStatus queries read.
const StatusSession = "agent:bench:status"

// Watcher is the watcher key of subscriber i.
func Watcher(i int) string { return "agent:w" + strconv.Itoa(i) + ":main" }

// ParseWatcher returns i for Watcher(i).
func ParseWatcher(w string) (int, bool) {
	s, ok := strings.CutPrefix(w, "agent:w")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, ":main")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}

// Target is the key of target i of a set ('a', 'u', 'c' or 'b').
func Target(set byte, i int) string { return "agent:bench:" + string(set) + strconv.Itoa(i) }

// ParseTarget returns the set and index of a Target key.
func ParseTarget(t string) (set byte, i int, ok bool) {
	s, ok := strings.CutPrefix(t, "agent:bench:")
	if !ok || len(s) < 2 {
		return 0, 0, false
	}
	i, err := strconv.Atoi(s[1:])
	return s[0], i, err == nil && i >= 0
}
