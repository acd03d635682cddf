package audit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// server is one run of `turbinesql serve` as a child process, on the
// chaos run's data dir and broker. Its stderr (the log) goes to logPath.
type server struct {
	cmd        *exec.Cmd
	pgAddr     string
	metricsURL string
	exited     chan struct{} // closed when the process has exited
	err        error         // its exit status, once exited is closed
}

type serverConfig struct {
	bin, brokers, dataDir, logPath, appID string
	// crashAfterTxn is TURBINESQL_CRASH_AFTER_TXN for the server (0: unset).
	crashAfterTxn float64
	// cacheMB is the server's --state-cache-mb (0: its default).
	cacheMB int
	// minRun is TURBINESQL_STATE_MIN_RUN_PARTIALS for the server (0: unset).
	minRun int
	// maxRuns is TURBINESQL_STATE_MAX_WINDOW_RUNS for the server (0: unset).
	maxRuns int
	// hotGroups is TURBINESQL_STATE_MAX_HOT_GROUPS for the server (0: unset).
	hotGroups int
	// nodeID is the server's --node-id (empty: the one its data dir keeps).
	nodeID string
	// sessionTimeout is its --session-timeout (0: its default).
	sessionTimeout time.Duration
	// standbys is its --standby-replicas (0: none).
	standbys int
}

// crashAfterTxnExit is the exit code of a crash the server injected
// itself (TURBINESQL_CRASH_AFTER_TXN): a planned fault.
const crashAfterTxnExit = 77

// startServer starts the server and waits until it prints its pgwire
// address (state recovered, streams started) and answers a query.
func startServer(ctx context.Context, c serverConfig, run int) (*server, error) {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== chaos: server run %d starts at %s\n", run, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "serve", "--brokers", c.brokers, "--data-dir", c.dataDir,
		"--pg-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--app-id", c.appID)
	if c.cacheMB > 0 {
		cmd.Args = append(cmd.Args, "--state-cache-mb", strconv.Itoa(c.cacheMB))
	}
	if c.nodeID != "" {
		cmd.Args = append(cmd.Args, "--node-id", c.nodeID)
	}
	if c.sessionTimeout > 0 {
		cmd.Args = append(cmd.Args, "--session-timeout", c.sessionTimeout.String())
	}
	if c.standbys > 0 {
		cmd.Args = append(cmd.Args, "--standby-replicas", strconv.Itoa(c.standbys))
	}
	cmd.Stderr = logf
	cmd.Env = os.Environ()
	if c.crashAfterTxn > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("TURBINESQL_CRASH_AFTER_TXN=%g", c.crashAfterTxn))
	}
	if c.minRun > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("TURBINESQL_STATE_MIN_RUN_PARTIALS=%d", c.minRun))
	}
	if c.maxRuns > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("TURBINESQL_STATE_MAX_WINDOW_RUNS=%d", c.maxRuns))
	}
	if c.hotGroups > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("TURBINESQL_STATE_MAX_HOT_GROUPS=%d", c.hotGroups))
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", c.bin, err)
	}
	s := &server{cmd: cmd, exited: make(chan struct{})}
	// The banner names the pgwire address ("pgwire: ADDR") and the HTTP
	// address (a word http://...), on ports picked by the kernel; both are
	// set before ready closes.
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		var pg, metrics string
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, "stdout:", line)
			f := strings.Fields(line)
			for i, w := range f {
				switch {
				case w == "pgwire:" && i+1 < len(f):
					pg = f[i+1]
				case strings.HasPrefix(w, "http://") && metrics == "":
					// The HTTP address (the console at /, or /metrics
					// itself): the metrics are at /metrics on it.
					metrics = strings.TrimSuffix(strings.TrimSuffix(w, "/metrics"), "/") + "/metrics"
				}
			}
			if pg != "" && metrics != "" && s.pgAddr == "" {
				s.pgAddr, s.metricsURL = pg, metrics
				close(ready)
			}
		}
		_, _ = io.Copy(logf, out)
	}()
	go func() {
		s.err = cmd.Wait()
		fmt.Fprintf(logf, "=== chaos: server run %d exited: %v\n", run, s.err)
		logf.Close()
		close(s.exited)
	}()
	select {
	case <-ready:
	case <-s.exited:
		return nil, fmt.Errorf("server exited before serving: %w (log: %s)", s.err, c.logPath)
	case <-time.After(2 * time.Minute):
		s.stop(syscall.SIGKILL, 0)
		return nil, fmt.Errorf("server printed no pgwire address within 2 minutes (log: %s)", c.logPath)
	case <-ctx.Done():
		s.stop(syscall.SIGKILL, 0)
		return nil, ctx.Err()
	}
	conn, err := s.connect(ctx)
	if err != nil {
		s.stop(syscall.SIGKILL, 0)
		return nil, err
	}
	conn.Close(ctx)
	return s, nil
}

func (s *server) connect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, "postgres://chaos@"+s.pgAddr+"/chaos?sslmode=disable")
}

// stop sends sig and waits for the process to end. A clean stop (SIGTERM)
// that takes longer than grace is finished with SIGKILL, and reported.
func (s *server) stop(sig syscall.Signal, grace time.Duration) error {
	_ = s.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		<-s.exited
		return nil
	}
	select {
	case <-s.exited:
		if s.err != nil {
			return fmt.Errorf("clean stop ended with %v", s.err)
		}
		return nil
	case <-time.After(grace):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("clean stop took longer than %s: killed", grace)
	}
}

// injectedCrash reports whether the process exited by a crash it
// injected itself.
func (s *server) injectedCrash() bool { return isInjectedCrash(s.err) }

// waitInjectedCrash reports whether the process exited by a crash it
// injected (waiting a moment for an exit in progress to be seen).
func (s *server) waitInjectedCrash() bool {
	select {
	case <-s.exited:
		return s.injectedCrash()
	case <-time.After(2 * time.Second):
		return false
	}
}

func isInjectedCrash(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == crashAfterTxnExit
}

// waitExited reports whether the process exits within d.
func (s *server) waitExited(d time.Duration) bool {
	select {
	case <-s.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// alive reports whether the process is still running.
func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}
