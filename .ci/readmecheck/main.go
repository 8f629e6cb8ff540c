// Command readmecheck runs the commands README.md marks for it, literally and in order,
// and checks their documented output. .ci/readme-check runs it in a fresh clone inside
// a private network namespace (so the tour's fixed port 8080 is this run's own).
//
// Every fenced block must follow a marker comment that says how it is checked:
//
//	<!-- readme-check: run -->         the next fenced block runs in bash -euo pipefail,
//	                                   in the clone's directory; it must exit 0 (what it
//	                                   left running in the background is stopped then)
//	<!-- readme-check: background -->  the next block starts in the background (the
//	                                   previous background block is stopped first), and
//	                                   the check waits until /readyz on 127.0.0.1:8080
//	                                   answers 200
//	<!-- readme-check: output -->      the next block is the exact standard output of
//	                                   the last run block (surrounding blank space aside)
//	<!-- readme-check: contains -->    every non-blank line of the next block appears
//	                                   in the standard output of the last run block
//	<!-- readme-check: file PATH -->   the next block is the content of the file PATH
//	                                   of the repository (tests check the file itself)
//	<!-- readme-check: graphql -->     the next block is a GraphQL document valid against
//	                                   graph/schema.graphqls
//	<!-- readme-check: go PARAMS -->   the next block is Go statements that type-check
//	                                   as the body of func(PARAMS), e.g. "ctx
//	                                   context.Context, token string", or of
//	                                   func(P) R for "P -> R"
//	<!-- readme-check: json -->        the next block is valid JSON
//	<!-- readme-check: paths -->       the next block is a layout: the paths each line
//	                                   starts with (comma-separated) exist
//	<!-- readme-check: skip REASON --> the next block is not run here, for REASON (it
//	                                   needs what this machine has not, e.g. a cluster)
package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

type block struct {
	kind, arg, text string
	line            int
}

var marker = regexp.MustCompile(`^<!--\s*readme-check:\s*([a-z]+)(?:\s+(.*?))?\s*-->\s*$`)

func parse(path string) ([]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     []block
		pending string // a marker waiting for its block
		arg     string // its argument
		in      bool
		fence   string
		cur     strings.Builder
		start   int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case in && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "":
			in = false
			if pending == "" {
				return nil, fmt.Errorf("%s:%d: a fenced block without a readme-check marker before it (run, background, output, contains, file PATH, graphql, go PARAMS, json, paths or skip REASON)", path, start)
			}
			out = append(out, block{kind: pending, arg: arg, text: cur.String(), line: start})
			pending, arg = "", ""
			cur.Reset()
		case in:
			cur.WriteString(line)
			cur.WriteByte('\n')
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			in, start = true, n
			fence = trimmed[:3]
		case marker.MatchString(trimmed):
			if pending != "" {
				return nil, fmt.Errorf("%s:%d: marker %q is not followed by a fenced block", path, n, pending)
			}
			m := marker.FindStringSubmatch(trimmed)
			pending, arg = m[1], m[2]
			switch pending {
			case "run", "background", "output", "contains", "graphql", "json", "paths":
				if arg != "" {
					return nil, fmt.Errorf("%s:%d: marker %q takes no argument (%q)", path, n, pending, arg)
				}
			case "file", "go", "skip":
				if arg == "" {
					return nil, fmt.Errorf("%s:%d: marker %q needs its argument", path, n, pending)
				}
			default:
				return nil, fmt.Errorf("%s:%d: unknown readme-check marker %q", path, n, pending)
			}
		case pending != "" && trimmed != "":
			return nil, fmt.Errorf("%s:%d: marker %q must be followed by a fenced block, found %q", path, n, pending, trimmed)
		}
	}
	if pending != "" || in {
		return nil, fmt.Errorf("%s: a marker or a fenced block is not closed", path)
	}
	return out, sc.Err()
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: readmecheck README.md")
		os.Exit(2)
	}
	blocks, err := parse(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "readme-check:", err)
		os.Exit(1)
	}
	os.Exit(check(blocks))
}

func check(blocks []block) int {
	var (
		last    []byte // stdout of the last run block
		lastAt  int
		bg      *exec.Cmd
		bgLog   bytes.Buffer
		checked int
		skipped int
	)
	stop := func() {
		if bg == nil {
			return
		}
		_ = syscall.Kill(-bg.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = bg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-bg.Process.Pid, syscall.SIGKILL)
			<-done
		}
		bg = nil
	}
	defer stop()
	fail := func(b block, format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "readme-check: README.md:%d (%s): %s\n", b.line, b.kind, fmt.Sprintf(format, args...))
		if bgLog.Len() > 0 {
			fmt.Fprintf(os.Stderr, "--- log of the background command ---\n%s\n", tail(bgLog.String(), 4000))
		}
		return 1
	}
	for _, b := range blocks {
		switch b.kind {
		case "run":
			fmt.Printf("\n$ %s", indent(b.text))
			start := time.Now()
			cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.text)
			// Files, not pipes: what the block starts with & keeps them open, and Run
			// must not wait for it. It is stopped when the block ends.
			stdout, stderr, err := runFiles(cmd)
			if err == nil {
				err = cmd.Run()
			}
			stopGroup(cmd)
			stdout.finish()
			stderr.finish()
			os.Stdout.Write(stdout.Bytes())
			fmt.Printf("(%.1fs)\n", time.Since(start).Seconds())
			if err != nil {
				return fail(b, "the block failed: %v\nstderr:\n%s", err, tail(stderr.String(), 4000))
			}
			last, lastAt = stdout.Bytes(), b.line
		case "background":
			stop()
			bgLog.Reset()
			fmt.Printf("\n$ %s  (in the background)\n", strings.TrimSpace(b.text))
			bg = exec.Command("bash", "-euo", "pipefail", "-c", b.text)
			bg.Stdout, bg.Stderr = &bgLog, &bgLog
			bg.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := bg.Start(); err != nil {
				return fail(b, "start: %v", err)
			}
			// `go run .` compiles first: minutes on a loaded machine.
			if err := waitReady(5 * time.Minute); err != nil {
				return fail(b, "%v", err)
			}
		case "output", "contains":
			if lastAt == 0 {
				return fail(b, "no run block before it")
			}
			got := string(last)
			if b.kind == "output" && strings.TrimSpace(got) != strings.TrimSpace(b.text) {
				return fail(b, "the output of the block at line %d differs\nwant:\n%s\ngot:\n%s", lastAt, b.text, got)
			}
			if b.kind == "contains" {
				for _, l := range strings.Split(b.text, "\n") {
					if l = strings.TrimSpace(l); l != "" && !strings.Contains(got, l) {
						return fail(b, "the output of the block at line %d lacks %q\ngot:\n%s", lastAt, l, got)
					}
				}
			}
			checked++
		case "skip":
			fmt.Printf("\n(not run here: README.md:%d: %s)\n", b.line, b.arg)
			skipped++
		default:
			if err := static(b); err != nil {
				return fail(b, "%v", err)
			}
			fmt.Printf("\nREADME.md:%d: %s %s: ok\n", b.line, b.kind, b.arg)
			checked++
		}
	}
	fmt.Printf("\nreadme-check: %d blocks, %d outputs and contents checked, %d not run here: ok\n", len(blocks), checked, skipped)
	return 0
}

// output is a run block's standard output or error, collected in a file.
type output struct {
	f   *os.File
	buf bytes.Buffer
}

func (o *output) finish() {
	if o.f == nil {
		return
	}
	_, _ = o.f.Seek(0, io.SeekStart)
	_, _ = io.Copy(&o.buf, o.f)
	o.f.Close()
	os.Remove(o.f.Name())
}

func (o *output) Bytes() []byte  { return o.buf.Bytes() }
func (o *output) String() string { return o.buf.String() }

// runFiles gives cmd files for its standard output and error, and its own process
// group.
func runFiles(cmd *exec.Cmd) (stdout, stderr *output, err error) {
	stdout, stderr = new(output), new(output)
	for _, o := range []*output{stdout, stderr} {
		if o.f, err = os.CreateTemp("", "readme-check-"); err != nil {
			return stdout, stderr, err
		}
	}
	cmd.Stdout, cmd.Stderr = stdout.f, stderr.f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return stdout, stderr, nil
}

// stopGroup ends what a run block left running in its process group: SIGTERM, then
// SIGKILL a few seconds later.
func stopGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // nothing left
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func waitReady(limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8080/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the service did not become ready on 127.0.0.1:8080 within %v", limit)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
