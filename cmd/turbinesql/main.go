// Command turbinesql is the TurbineSQL server and its tools.
//
//	turbinesql serve [flags]   run the engine (embedded Kafka unless --brokers)
//	turbinesql size [flags]    recommend a partition count (SHOW SIZING, offline)
//	turbinesql skew [flags]    check a key's load per partition on a topic (SHOW SKEW, offline)
//	turbinesql version
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/turbinesql/turbinesql/server"
)

var version = "0.1.0-dev"

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		if err := serve(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "turbinesql:", err)
			os.Exit(1)
		}
	case "size":
		runTool("size", size, os.Args[2:])
	case "skew":
		runTool("skew", skew, os.Args[2:])
	case "version", "--version":
		fmt.Println("turbinesql", version)
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "turbinesql: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: turbinesql <command> [flags]

commands:
  serve     run the engine (see turbinesql serve -h)
  size      recommend a partition count from peak rate, record size and consumers
  skew      check how a key spreads over a topic's partitions under murmur2
  version   print the version`)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "./turbinesql-data", "where state, the catalog and the embedded broker's topics live")
	pgAddr := fs.String("pg-addr", "127.0.0.1:5433", "PostgreSQL wire protocol listen address")
	httpAddr := fs.String("http-addr", "127.0.0.1:9464", "HTTP listen address (/metrics)")
	brokers := fs.String("brokers", "", "comma-separated Kafka bootstrap brokers; empty runs the embedded broker")
	kafkaAddr := fs.String("kafka-addr", "127.0.0.1:19092", "listen address of the embedded broker")
	appID := fs.String("app-id", "turbinesql", "application id: names internal topics and the catalog topic")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	commitEvery := fs.Duration("commit-interval", server.DefaultCommitInterval,
		"how often each stream closes due windows and commits its state and offsets (FLUSH always commits at once)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	cfg := server.Config{
		DataDir: *dataDir, PGAddr: *pgAddr, HTTPAddr: *httpAddr, KafkaAddr: *kafkaAddr, AppID: *appID, Logger: log,
		CommitInterval:  *commitEvery,
		AllowNonDivisor: os.Getenv("TURBINE_ALLOW_NON_DIVISOR_PARTITIONS") == "1",
	}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return err
	}
	kafkaDesc := "embedded broker on " + strings.Join(srv.KafkaAddrs(), ",")
	if !srv.Embedded() {
		kafkaDesc = "Kafka at " + strings.Join(srv.KafkaAddrs(), ",")
	}
	fmt.Printf("TurbineSQL %s\n  pgwire:  %s   (psql -h %s -p %s -U turbine turbine)\n  metrics: http://%s/metrics\n  kafka:   %s\n  data:    %s\n",
		version, srv.PGAddr(), hostOf(srv.PGAddr()), portOf(srv.PGAddr()), srv.HTTPAddr(), kafkaDesc, *dataDir)
	<-ctx.Done()
	fmt.Println("shutting down: finishing in-flight batches and persisting state")
	srv.Close()
	return nil
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
