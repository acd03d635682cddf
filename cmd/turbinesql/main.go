// Command turbinesql is the TurbineSQL server and its tools.
//
//	turbinesql serve [flags]   run the engine (embedded Kafka unless --brokers)
//	turbinesql rescale [flags] move a stopped app's keyed state to a new partition count
//	turbinesql size [flags]    recommend a partition count (SHOW SIZING, offline)
//	turbinesql skew [flags]    check a key's load per partition on a topic (SHOW SKEW, offline)
//	turbinesql audit [flags]   kill a server K times under load and audit every pane (exactly-once)
//	turbinesql version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/turbinesql/turbinesql/bench/harness"
)

var version = "0.1.0-dev"

func main() {
	// The audit's broker runs as a child process of this binary.
	harness.MaybeRunBroker()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// run is the command line without the process around it, so tests can run
// it: it returns the exit code.
func run(args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) int {
	if len(args) < 1 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return serve(ctx, args[1:], stdout, stderr, getenv)
	case "rescale":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return rescaleCmd(ctx, args[1:], stdout, stderr, getenv)
	case "size":
		return runTool("size", size, args[1:], stdout, stderr)
	case "skew":
		return runTool("skew", skew, args[1:], stdout, stderr)
	case "audit":
		return runAudit(args[1:])
	case "version", "--version":
		fmt.Fprintln(stdout, "turbinesql", version)
	case "help", "-h", "--help", "-help":
		usage(stdout)
	default:
		fmt.Fprintf(stderr, "turbinesql: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage: turbinesql <command> [flags]

commands:
  serve     run the engine (see turbinesql serve --help)
  rescale   move a stopped app's keyed state to a new partition count (turbinesql rescale -h)
  size      recommend a partition count from peak rate, record size and consumers
  skew      check how a key spreads over a topic's partitions under murmur2
  audit     SIGKILL a server K times while N events arrive, and audit every pane of its
            exactly-once streams (local, repartition, combine) against an independent
            computation (see turbinesql audit -h)
  version   print the version`)
}

func hostOf(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		return addr[:i]
	}
	return addr
}

func portOf(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		return addr[i+1:]
	}
	return addr
}
