package main

import (
	"flag"
	"strings"
	"time"
)

// config is the command line.
type config struct {
	mode, bin, db, out, logFile string
	pg                          string
	serverArgs, header          string
	profileDir                  string
	saveTemplate, fromTemplate  string
	subs, small                 int
	roundsSmall, roundsBig      int
	rate, statusRate            int
	frameBytes                  int
	setupWorkers                int
	wait, timeout               time.Duration
	noA2                        bool
	feed                        bool
	pings                       bool
	phases                      map[string]bool
}

// parseConfig reads the command line; it exits with status 2 on a bad one.
func parseConfig() config {
	var c config
	flag.StringVar(&c.mode, "mode", "service", "service or baseline")
	flag.StringVar(&c.bin, "bin", "", "server binary (the service, bench/cmd/profserve or bench/cmd/wsbaseline)")
	flag.StringVar(&c.db, "db", "", "database file of the service (created)")
	flag.StringVar(&c.pg, "pg", "", "service: run it on a fresh PostgreSQL database created (and dropped after the run) on this server URL's server, instead of -db")
	flag.StringVar(&c.out, "out", "wsload.json", "result file")
	flag.StringVar(&c.logFile, "server-log", "", "file for the server's output (default: discarded)")
	flag.StringVar(&c.serverArgs, "server-args", "", "extra arguments for the server, space-separated")
	flag.StringVar(&c.header, "header", "", "extra HTTP header on every request, e.g. 'Authorization: Bearer X'")
	flag.StringVar(&c.profileDir, "profile-dir", "", "capture CPU profiles per phase (profserve only) into this directory")
	flag.StringVar(&c.saveTemplate, "save-template", "", "service: copy the database here after the setup")
	flag.StringVar(&c.fromTemplate, "from-template", "", "service: start from this copy of a set-up database and skip the setup")
	flag.IntVar(&c.subs, "subs", 10000, "subscribers")
	flag.IntVar(&c.small, "small", 1000, "subscribers of the small broadcast")
	flag.IntVar(&c.roundsSmall, "rounds-small", 9, "broadcast rounds to -small subscribers (the first is a warm-up)")
	flag.IntVar(&c.roundsBig, "rounds-big", 4, "broadcast rounds to -subs subscribers (the first is a warm-up)")
	flag.IntVar(&c.rate, "rate", 500, "appends per second in L1(a)")
	flag.IntVar(&c.statusRate, "status-rate", 200, "sessionStatus requests per second in L3")
	flag.IntVar(&c.frameBytes, "frame-bytes", 0, "baseline: frame size (0: the server's default)")
	flag.IntVar(&c.setupWorkers, "setup-workers", 32, "concurrent setup requests")
	flag.DurationVar(&c.wait, "wait", 15*time.Second, "how long to wait for the frames of one round or phase")
	flag.DurationVar(&c.timeout, "timeout", 9*time.Minute, "hard limit of the whole run")
	flag.BoolVar(&c.noA2, "no-l3", false, "skip the L1(a)+L3 phase")
	flag.BoolVar(&c.pings, "pings", false, "service: keep its default WebSocket pings (every 20 s, each answered by a pong); without it the service pings once an hour, like the peers, which send none on graphql-transport-ws")
	flag.BoolVar(&c.feed, "feed", false, "service: subscribe to staleNoticeFeed (the notices with the feed's markers, FEED-3) instead of staleNotices")
	phases := flag.String("phases", "b_small,b_big,a,a_l3,b_none", "phases to run")
	flag.Parse()
	c.phases = map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		c.phases[strings.TrimSpace(p)] = true
	}
	if c.mode != "service" && c.mode != "baseline" {
		fatalf("-mode must be service or baseline")
	}
	if c.bin == "" || (c.mode == "service" && c.db == "" && c.pg == "") {
		fatalf("-bin (and -db or -pg for the service) are required")
	}
	if c.pg != "" && (c.mode != "service" || c.db != "" || c.saveTemplate != "" || c.fromTemplate != "") {
		fatalf("-pg is for the service, without -db, -save-template or -from-template")
	}
	if c.small > c.subs {
		c.small = c.subs
	}
	return c
}
