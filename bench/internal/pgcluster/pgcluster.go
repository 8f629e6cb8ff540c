// Package pgcluster runs a private PostgreSQL cluster for the measurements of
// bench/cmd/pgscale: initdb in a directory of its own, a free port on loopback, trust
// authentication, pg_stat_statements preloaded and room for many connections, so that a
// run can give each process a role of its own and attribute statements to it without
// touching the machine's shared server.
package pgcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Cluster is a running private cluster.
type Cluster struct {
	bin     string
	as      []string
	dir     string
	data    string
	logFile string
	opts    string
	Port    int
	Version string
}

// Start initialises a cluster under a fresh directory in parent ("" is the system's
// temporary directory) and starts it with settings (each a postgres -c name=value).
func Start(parent string, settings ...string) (*Cluster, error) {
	initdbs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(initdbs) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			initdbs = []string{p}
		}
	}
	if len(initdbs) == 0 {
		return nil, errors.New("no initdb (/usr/lib/postgresql/*/bin or PATH)")
	}
	sort.Strings(initdbs)
	c := &Cluster{bin: filepath.Dir(initdbs[len(initdbs)-1])}
	dir, err := os.MkdirTemp(parent, "pgscale-cluster-")
	if err != nil {
		return nil, err
	}
	c.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 { // initdb refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root without a postgres user to own the cluster: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		c.as = []string{"runuser", "-u", "postgres", "--"}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	c.data = filepath.Join(dir, "data")
	c.logFile = filepath.Join(dir, "postgres.log")
	opts := []string{"-k", dir, "-p", strconv.Itoa(c.Port), "-c", "listen_addresses=127.0.0.1"}
	for _, s := range settings {
		opts = append(opts, "-c", s)
	}
	c.opts = strings.Join(opts, " ")
	if out, err := c.cmd("initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "-E", "UTF8").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if out, err := c.cmd("pg_ctl", "-D", c.data, "-l", c.logFile, "-o", c.opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	if out, err := c.cmd("postgres", "--version").Output(); err == nil {
		c.Version = strings.TrimSpace(string(out))
	}
	return c, nil
}

func (c *Cluster) cmd(tool string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, c.as...), filepath.Join(c.bin, tool)), args...)
	return exec.Command(argv[0], argv[1:]...)
}

// URL is the URL of database db as the superuser postgres.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Stop stops the cluster (fast shutdown) and removes its directory.
func (c *Cluster) Stop() {
	_, _ = c.cmd("pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "60", "stop").CombinedOutput()
	os.RemoveAll(c.dir)
}
