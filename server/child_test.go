package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// childEnv makes the test binary run one server (the Config it holds, as
// JSON) instead of the tests: a real process that a test can SIGKILL, on
// a data dir and a broker (the test's, in its own process) that outlive
// it. It prints its pgwire address, and stops cleanly on SIGTERM.
const childEnv = "TURBINESQL_TEST_CHILD_SERVER"

func TestMain(m *testing.M) {
	if js := os.Getenv(childEnv); js != "" {
		os.Exit(runChild(js))
	}
	os.Exit(m.Run())
}

// childConfig is what a child server is started with.
type childConfig struct {
	DataDir        string
	Brokers        []string
	Kafka          kafkaio.Conn // SASL and TLS to Brokers
	AppID          string
	CommitInterval time.Duration
}

func runChild(js string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TURBINE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	srv, err := Start(ctx, Config{DataDir: c.DataDir, PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Brokers: c.Brokers,
		Kafka: c.Kafka, AppID: c.AppID, Logger: log, MetadataInterval: 500 * time.Millisecond, CommitInterval: c.CommitInterval})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	fmt.Printf("pgwire %s\n", srv.PGAddr())
	<-stop
	srv.Close()
	return 0
}

// childServer is a server running in a child process.
type childServer struct {
	cmd    *exec.Cmd
	pgAddr string
	exited chan struct{}
}

// startChild starts a server in a child process and waits until it
// answers on pgwire.
func startChild(t *testing.T, c childConfig) *childServer {
	t.Helper()
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cs := &childServer{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "pgwire "); ok {
				addr <- a
			}
		}
		_ = cmd.Wait()
		close(cs.exited)
	}()
	t.Cleanup(func() { cs.kill(t) })
	select {
	case cs.pgAddr = <-addr:
	case <-cs.exited:
		t.Fatalf("child server exited at start: %s", stderr.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("child server did not start: %s", stderr.String())
	}
	return cs
}

// kill SIGKILLs the child, as the OOM killer or a power cut would: no
// commit, no handover, nothing flushed.
func (cs *childServer) kill(t *testing.T) {
	t.Helper()
	select {
	case <-cs.exited:
		return
	default:
	}
	if err := cs.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-cs.exited
}
