package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// hintConfig is one way the processes of a run send their hints: a binary and the
// flags that choose the transport.
type hintConfig struct {
	label string
	bin   string
	args  []string
	// bus is true when the hints travel on the run's NATS server.
	bus bool
}

// hintConfigs returns the configurations of -modes (and -before, first), plus "off"
// when withOff.
func (r *runner) hintConfigs(withOff bool) []hintConfig {
	var out []hintConfig
	if r.cfg.before != "" {
		out = append(out, hintConfig{label: "before (" + r.cfg.beforeLabel + ")", bin: r.cfg.before})
	}
	for _, m := range strings.Split(r.cfg.modes, ",") {
		switch m = strings.TrimSpace(m); m {
		case "bus":
			out = append(out, hintConfig{label: "bus", bin: r.cfg.bin, args: []string{"--bus", r.nats.url}, bus: true})
		case "":
		default:
			out = append(out, hintConfig{label: "notify " + m, bin: r.cfg.bin, args: []string{"--pg-hints", m}})
		}
	}
	if withOff {
		out = append(out, hintConfig{label: "off", bin: r.cfg.bin, args: []string{"--pg-hints", "off"}})
	}
	return out
}

// startHC starts process idx of a run of hc on dsn.
func (r *runner) startHC(ctx context.Context, hc hintConfig, idx int, dsn string, extra ...string) (*server, error) {
	return r.startBin(ctx, hc.bin, idx, dsn, append(append([]string{}, hc.args...), extra...)...)
}

// ---------------------------------------------------------------------------------------
// Roles: with a private cluster each process connects as a role of its own, so that
// pg_stat_statements attributes its statements to it.

const maxRoles = 16

func roleName(idx int) string { return fmt.Sprintf("aw_p%d", idx) }

// roleDSN returns dsn connecting as process idx's role (dsn itself without roles).
func (r *runner) roleDSN(dsn string, idx int) string {
	if !r.roles || idx >= maxRoles {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.User = url.User(roleName(idx))
	return u.String()
}

func createRoles(ctx context.Context, admin string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for i := range maxRoles {
		if _, err := conn.Exec(ctx, "CREATE ROLE "+roleName(i)+" LOGIN SUPERUSER"); err != nil {
			return err
		}
	}
	return nil
}

// stmtStat is what pg_stat_statements counted for one role (process) in a database.
type stmtStat struct {
	calls, rows int64
	ms          float64
	// readCalls and readRows are the reads of pending notices by watcher (the
	// listener's reads and subscriptions' own).
	readCalls, readRows int64
}

// resetStatements resets pg_stat_statements (a no-op without a private cluster).
func (r *runner) resetStatements(ctx context.Context, dsn string) error {
	if !r.roles {
		return nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return err
}

// statements returns pg_stat_statements' counts in dsn's database by role.
func (r *runner) statements(ctx context.Context, dsn string) (map[string]stmtStat, error) {
	if !r.roles {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT r.rolname, sum(s.calls)::bigint, sum(s.rows)::bigint, sum(s.total_exec_time)::float8,
	coalesce(sum(s.calls) FILTER (WHERE s.query ~ 'watcher_key (IN|= \$1)' AND s.query LIKE '%n > l%'), 0)::bigint,
	coalesce(sum(s.rows) FILTER (WHERE s.query ~ 'watcher_key (IN|= \$1)' AND s.query LIKE '%n > l%'), 0)::bigint
FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY r.rolname`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]stmtStat{}
	for rows.Next() {
		var name string
		var s stmtStat
		if err := rows.Scan(&name, &s.calls, &s.rows, &s.ms, &s.readCalls, &s.readRows); err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, rows.Err()
}

// ---------------------------------------------------------------------------------------
// NATS: a private nats-server for the run, with its monitoring port, which the bus
// configurations use and the fault segments kill and start again.

type natsServer struct {
	bin        string
	port, mon  int
	url        string
	cmd        *exec.Cmd
	version    string
	monitorURL string
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startNATS(bin string) (*natsServer, error) {
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("nats-server"); err != nil {
			bin = "/usr/sbin/nats-server"
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	mon, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &natsServer{bin: bin, port: port, mon: mon, url: "nats://127.0.0.1:" + strconv.Itoa(port),
		monitorURL: "http://127.0.0.1:" + strconv.Itoa(mon) + "/varz"}
	if out, err := exec.Command(bin, "--version").Output(); err == nil {
		n.version = strings.TrimSpace(string(out))
	}
	return n, n.start()
}

func (n *natsServer) start() error {
	cmd := exec.Command(n.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-m", strconv.Itoa(n.mon))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	n.cmd = cmd
	for range 300 {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(n.port), time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("nats-server did not accept connections")
}

// kill stops the server with SIGKILL (its clients get no goodbye).
func (n *natsServer) kill() {
	if n.cmd != nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		n.cmd = nil
	}
}

type natsVarz struct {
	InMsgs   int64 `json:"in_msgs"`
	OutMsgs  int64 `json:"out_msgs"`
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
	Subs     int64 `json:"subscriptions"`
}

func (n *natsServer) varz(ctx context.Context) (natsVarz, error) {
	var v natsVarz
	req, err := http.NewRequestWithContext(ctx, "GET", n.monitorURL, nil)
	if err != nil {
		return v, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// ---------------------------------------------------------------------------------------
// NOTIFY volume: a LISTEN connection of pgscale's own counts the hints and their bytes.

type notifyCounter struct {
	conn  *pgx.Conn
	done  chan struct{}
	n, b  int64
	ended chan struct{}
}

func countNotifies(ctx context.Context, dsn string) (*notifyCounter, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN awareness_hints"); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	c := &notifyCounter{conn: conn, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		for {
			wctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-c.done:
				case <-wctx.Done():
				}
				cancel()
			}()
			note, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return
			}
			c.n++
			c.b += int64(len(note.Payload))
		}
	}()
	return c, nil
}

// stop ends the count and returns the hints and bytes seen.
func (c *notifyCounter) stop() (n, bytes int64) {
	close(c.done)
	<-c.ended
	c.conn.Close(context.Background())
	return c.n, c.b
}

// ---------------------------------------------------------------------------------------
// Metrics of a server

// metric reads one counter of p's /metrics (0 when absent).
func (r *runner) metric(ctx context.Context, p *server, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", p.Base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return 0, sc.Err()
}

// ---------------------------------------------------------------------------------------
// The machine

// loadavg returns /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
