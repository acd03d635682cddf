package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/config"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/sql"
)

const serveHelp = `usage: turbinesql serve [flags]

Every flag can also be given as an environment variable (TURBINE_ and the
flag's name in capitals, dashes as underscores: --pg-addr is TURBINE_PG_ADDR)
or as a key of the --config file (TOML, or YAML when it ends in .yaml/.yml;
keys are the flag names). Precedence: flag > environment > config file >
default. Secrets: TURBINE_PASSWORD is the password of the user turbine and
TURBINE_KAFKA_SASL_PASSWORD the Kafka SASL password, or give files with
--password-file and --kafka-sasl-password-file.

flags:`

// serveFlags are the flags of `serve`, bound to one place each.
type serveFlags struct {
	fs                                            *flag.FlagSet
	configFile                                    string
	dataDir, pgAddr, httpAddr, brokers            string
	kafkaAddr, appID, logLevel, logFormat, nodeID string
	auth, passwordFile, tlsCert, tlsKey           string
	tlsRequired                                   bool
	commitEvery, transitionWindow, session        time.Duration
	purgeEvery                                    time.Duration
	stateCacheMB, standbys                        int
	purgeSealRecords                              int64
	replicationFactor, minInsync                  int
	statementTimeout                              timeoutFlag
	saslMech, saslUser, saslPassFile              string
	kafkaTLS                                      bool
	kafkaCA, kafkaCert, kafkaKey, kafkaTLSName    string
}

func newServeFlags() *serveFlags {
	f := &serveFlags{fs: flag.NewFlagSet("serve", flag.ContinueOnError)}
	fs := f.fs
	fs.StringVar(&f.configFile, "config", "", "config file (TOML, or YAML if it ends in .yaml/.yml) whose keys are these flags")
	fs.StringVar(&f.dataDir, "data-dir", "./turbinesql-data", "where state, the catalog and the embedded broker's topics live")
	fs.StringVar(&f.pgAddr, "pg-addr", "127.0.0.1:5433", "PostgreSQL wire protocol listen address")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:9464", "HTTP listen address (/metrics, /healthz, /readyz)")
	fs.StringVar(&f.brokers, "brokers", "", "comma-separated Kafka bootstrap brokers; empty runs the embedded broker")
	fs.StringVar(&f.kafkaAddr, "kafka-addr", "127.0.0.1:19092", "listen address of the embedded broker")
	fs.StringVar(&f.appID, "app-id", "", "application id: names the catalog, internal topics, consumer groups and transactional ids; "+
		"required with --brokers (one per deployment, the same on each of its servers); "+server.DefaultAppID+" on the embedded broker")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.DurationVar(&f.commitEvery, "commit-interval", server.DefaultCommitInterval,
		"how often each stream closes due windows and commits its state and offsets (FLUSH always commits at once)")
	fs.StringVar(&f.nodeID, "node-id", "", "this process's name among the processes of its app (each needs its own); empty: one made up at the first start and kept in the data dir")
	fs.DurationVar(&f.session, "session-timeout", server.DefaultSessionTimeout,
		"how long the processes of an app wait for a silent one before its partitions move to the others (Kafka consumer-group session timeout)")
	fs.DurationVar(&f.purgeEvery, "purge-interval", server.DefaultPurgeInterval,
		"how often records of internal hop topics (repartition, combine) that every reader has committed past are deleted (Kafka DeleteRecords); 0 or negative: never")
	fs.Int64Var(&f.purgeSealRecords, "purge-seal-records", server.DefaultSealAfterRecords,
		"consumed records a repartition topic holds before it is sealed and purged; streams created after a seal read a new generation of the hop, which reads the source again")
	fs.IntVar(&f.standbys, "standby-replicas", 0,
		"how many other processes of the app keep a warm copy of each task's state, so a failover restores only what the copy had not applied yet (Kafka Streams' num.standby.replicas)")
	fs.DurationVar(&f.transitionWindow, "transition-window", 10*time.Minute,
		"after an input's partition count changes, how long producers get to place records under the new count before one placed under the old count counts as misplaced (keyed streams; see SHOW PARTITIONS)")
	fs.IntVar(&f.stateCacheMB, "state-cache-mb", server.DefaultStateCacheMB,
		"memory (MB, shared by every stream) for the groups of TUMBLE, HOP and unwindowed aggregations; the rest live only on disk in the state store; 0 is unlimited")
	fs.Var(&f.statementTimeout, "statement-timeout",
		"cancel any statement running longer than this (57014), unless its session SETs statement_timeout: 5s, 250ms, 2min, 30000 (ms) or 1m30s; 0 is no limit")
	fs.StringVar(&f.auth, "auth", server.AuthTrust, "how SQL clients log in: trust (any user, no password; keep it on loopback) or scram (SCRAM-SHA-256)")
	fs.StringVar(&f.passwordFile, "password-file", "", "file holding the password of the admin user turbine (or set TURBINE_PASSWORD)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate (chain) for TLS on the SQL port")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.BoolVar(&f.tlsRequired, "tls-required", false, "refuse SQL clients that do not use TLS")
	fs.StringVar(&f.saslMech, "kafka-sasl-mechanism", "", "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.StringVar(&f.saslUser, "kafka-sasl-username", "", "Kafka SASL user name")
	fs.StringVar(&f.saslPassFile, "kafka-sasl-password-file", "", "file holding the Kafka SASL password (or set TURBINE_KAFKA_SASL_PASSWORD)")
	fs.IntVar(&f.replicationFactor, "replication-factor", 0,
		"replication factor of every topic the server creates: the catalog, internal (hop, progress, DLQ, late) and output topics (0: the broker's default.replication.factor)")
	fs.IntVar(&f.minInsync, "min-insync-replicas", 0,
		"min.insync.replicas of every topic the server creates (0: the broker's default); at most --replication-factor")
	fs.BoolVar(&f.kafkaTLS, "kafka-tls", false, "connect to the brokers over TLS (implied by the other --kafka-tls-* flags)")
	fs.StringVar(&f.kafkaCA, "kafka-tls-ca", "", "PEM file of the CA that signed the brokers' certificates (default: system roots)")
	fs.StringVar(&f.kafkaCert, "kafka-tls-cert", "", "PEM client certificate for mTLS to the brokers")
	fs.StringVar(&f.kafkaKey, "kafka-tls-key", "", "PEM private key of --kafka-tls-cert")
	fs.StringVar(&f.kafkaTLSName, "kafka-tls-server-name", "", "name to verify the brokers' certificates against (default: each broker's host)")
	return f
}

// serve runs the engine until ctx ends; it returns the exit code.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) int {
	f := newServeFlags()
	f.fs.SetOutput(io.Discard) // usage is printed below, to the right stream
	cfg, err := f.load(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, serveHelp)
		f.fs.SetOutput(stdout)
		f.fs.PrintDefaults()
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "turbinesql serve:", err)
		fmt.Fprintln(stderr, "(turbinesql serve --help lists the flags)")
		return 2
	}
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "turbinesql:", err)
		return 1
	}
	kafkaDesc := "embedded broker on " + strings.Join(srv.KafkaAddrs(), ",")
	if !srv.Embedded() {
		kafkaDesc = "Kafka at " + strings.Join(srv.KafkaAddrs(), ",")
	}
	fmt.Fprintf(stdout, "TurbineSQL %s\n  pgwire:  %s   (psql -h %s -p %s -U turbine turbine)\n  http:    http://%s/ (console) /metrics /healthz /readyz\n  kafka:   %s\n  data:    %s\n",
		version, srv.PGAddr(), hostOf(srv.PGAddr()), portOf(srv.PGAddr()), srv.HTTPAddr(), kafkaDesc, cfg.DataDir)
	<-ctx.Done()
	fmt.Fprintln(stdout, "shutting down: cancelling running statements, finishing in-flight batches and persisting state")
	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
		return 0
	case <-time.After(shutdownTimeout):
		// Whatever still runs is abandoned: state and offsets are
		// committed together, so the next start resumes from the last
		// commit, as after a crash.
		fmt.Fprintf(stderr, "turbinesql: shutdown still not done after %v; exiting anyway\n", shutdownTimeout)
		return 1
	}
}

// shutdownTimeout bounds a SIGTERM shutdown: orchestrators kill after
// their own grace (Kubernetes: 30 s), and an operator expects it sooner.
// Statements are cancelled at once; this only guards against a part of
// the engine that will not stop.
const shutdownTimeout = 9 * time.Second

// load reads the flags from their four sources and checks them, naming
// the key, where its value came from and what is accepted.
func (f *serveFlags) load(args []string, getenv func(string) (string, bool), logOut io.Writer) (server.Config, error) {
	src, err := config.Load(f.fs, args, getenv, "config")
	if err != nil {
		return server.Config{}, err
	}
	var cfg server.Config
	lvlName, err := config.OneOf(src, "log-level", f.logLevel, "debug", "info", "warn", "error")
	if err != nil {
		return cfg, err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(lvlName)); err != nil {
		return cfg, fmt.Errorf("log-level: %w", err)
	}
	format, err := config.OneOf(src, "log-format", f.logFormat, "text", "json")
	if err != nil {
		return cfg, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	log := slog.New(slog.NewTextHandler(logOut, opts))
	if format == "json" {
		log = slog.New(slog.NewJSONHandler(logOut, opts))
	}
	auth, err := config.OneOf(src, "auth", f.auth, server.AuthTrust, server.AuthSCRAM)
	if err != nil {
		return cfg, err
	}
	mech, err := config.OneOf(src, "kafka-sasl-mechanism", f.saslMech, append([]string{""}, kafkaio.Mechanisms...)...)
	if err != nil {
		return cfg, err
	}
	password, err := secret(src, getenv, "password-file", f.passwordFile, "TURBINE_PASSWORD")
	if err != nil {
		return cfg, err
	}
	saslPass, err := secret(src, getenv, "kafka-sasl-password-file", f.saslPassFile, "TURBINE_KAFKA_SASL_PASSWORD")
	if err != nil {
		return cfg, err
	}
	allow, _ := getenv("TURBINE_ALLOW_NON_DIVISOR_PARTITIONS")
	afterTxn, err := crashAt(getenv, "exiting between a transaction's commit and the state's write")
	if err != nil {
		return cfg, err
	}
	afterIngest, err := crashAt(getenv, "exiting between a commit's runs' ingest and its state batch")
	if err != nil {
		return cfg, err
	}
	minRun, err := stateCount(getenv, "TURBINESQL_STATE_MIN_RUN_PARTIALS")
	if err != nil {
		return cfg, err
	}
	maxRuns, err := stateCount(getenv, "TURBINESQL_STATE_MAX_WINDOW_RUNS")
	if err != nil {
		return cfg, err
	}
	hotGroups, err := stateCount(getenv, "TURBINESQL_STATE_MAX_HOT_GROUPS")
	if err != nil {
		return cfg, err
	}
	if f.transitionWindow <= 0 {
		return cfg, fmt.Errorf("--transition-window %s: want a positive duration (10m by default)", f.transitionWindow)
	}
	cacheMB := f.stateCacheMB
	switch {
	case cacheMB < 0:
		return cfg, fmt.Errorf("--state-cache-mb %d: want a size in MB, or 0 for unlimited", cacheMB)
	case cacheMB == 0:
		cacheMB = -1 // unlimited
	}
	cfg = server.Config{
		AfterTxn: afterTxn, AfterIngest: afterIngest,
		DataDir: f.dataDir, PGAddr: f.pgAddr, HTTPAddr: f.httpAddr, KafkaAddr: f.kafkaAddr, AppID: f.appID, Logger: log,
		CommitInterval:      f.commitEvery,
		SessionTimeout:      f.session,
		StandbyReplicas:     f.standbys,
		PurgeInterval:       purgeInterval(f.purgeEvery),
		PurgeSealRecords:    f.purgeSealRecords,
		NodeID:              f.nodeID,
		TransitionWindow:    f.transitionWindow,
		StateCacheMB:        cacheMB,
		StateMinRunPartials: minRun,
		StateMaxWindowRuns:  maxRuns,
		StateMaxHotGroups:   hotGroups,
		StatementTimeout:    time.Duration(f.statementTimeout),
		AllowNonDivisor:     allow == "1",
		Auth:                auth, InitialPassword: password,
		TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSRequired: f.tlsRequired,
		Kafka: kafkaio.Conn{
			SASLMechanism: mech, SASLUser: f.saslUser, SASLPassword: saslPass,
			TLS: f.kafkaTLS, TLSCA: f.kafkaCA, TLSCert: f.kafkaCert, TLSKey: f.kafkaKey, TLSServerName: f.kafkaTLSName,
			ReplicationFactor: f.replicationFactor, MinInsyncReplicas: f.minInsync,
		},
	}
	for _, b := range strings.Split(f.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	// Checked here as well as by Start, so a missing or malformed id is a
	// usage error (exit 2) before anything opens.
	if _, err := server.AppIDOf(cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// timeoutFlag is a duration written as PostgreSQL's statement_timeout
// takes it (5s, 250ms, 2min, a number of milliseconds) or as Go writes
// it (1m30s).
type timeoutFlag time.Duration

func (t *timeoutFlag) String() string { return sql.FormatMillisSetting(time.Duration(*t)) }

func (t *timeoutFlag) Set(v string) error {
	d, err := sql.ParseMillisSetting("statement-timeout", v)
	if err != nil {
		gd, gerr := time.ParseDuration(strings.TrimSpace(v))
		if gerr != nil || gd < 0 {
			return fmt.Errorf("%w (units: us, ms, s, min, h, d; or a Go duration such as 1m30s)", err)
		}
		d = gd.Round(time.Millisecond)
	}
	*t = timeoutFlag(d)
	return nil
}

// secret is a password given either as a file (the flag fileKey, from any
// source) or in the environment variable envName. The stronger source
// wins, as for any flag: a --password-file flag beats TURBINE_PASSWORD,
// which beats a password-file key of the config file. One trailing newline
// of the file is dropped (echo adds it).
func secret(src config.Sources, getenv func(string) (string, bool), fileKey, path, envName string) (string, error) {
	env, hasEnv := getenv(envName)
	fileFrom := src.Of(fileKey)
	useFile := path != "" && (!hasEnv || strings.HasPrefix(fileFrom, "flag"))
	if path != "" && hasEnv && strings.HasPrefix(fileFrom, "environment") {
		return "", fmt.Errorf("%s and %s are both set: set one", envName, config.EnvName(fileKey))
	}
	if !useFile {
		return env, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s (from %s): %w", fileKey, fileFrom, err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s (from %s): %s is empty", fileKey, fileFrom, path)
	}
	return s, nil
}

// CrashAfterTxnExit is the exit code of a crash injected by
// TURBINESQL_CRASH_AFTER_TXN, so the audit tells it from a real failure.
const CrashAfterTxnExit = 77

// crashAt reads TURBINESQL_CRASH_AFTER_TXN, a probability, for one of
// its two points: after each exactly-once transaction commits and before
// the state is written, and (the state's AfterIngest) after a commit's
// runs are ingested and before its state batch. At each, the process
// exits at once with that probability (no deferred cleanup, as a
// SIGKILL), printing what. It is how the audit proves that a crash in
// those windows emits nothing twice and counts nothing twice. Unset:
// never.
func crashAt(getenv func(string) (string, bool), what string) (func(), error) {
	v, ok := getenv("TURBINESQL_CRASH_AFTER_TXN")
	if !ok || v == "" {
		return nil, nil
	}
	p, err := strconv.ParseFloat(v, 64)
	if err != nil || p < 0 || p > 1 {
		return nil, fmt.Errorf("TURBINESQL_CRASH_AFTER_TXN=%q: want a probability between 0 and 1", v)
	}
	return func() {
		if rand.Float64() < p {
			fmt.Fprintln(os.Stderr, "TURBINESQL_CRASH_AFTER_TXN: "+what)
			os.Exit(CrashAfterTxnExit)
		}
	}, nil
}

// stateCount reads environment variable name, a count of 1 or more
// (unset: 0, the store's default). The state knobs are for crash audits,
// whose commits are small: TURBINESQL_STATE_MIN_RUN_PARTIALS, the fewest
// partials a commit writes as a run of their own, and
// TURBINESQL_STATE_MAX_WINDOW_RUNS, the runs at which a window's partials
// are folded, and TURBINESQL_STATE_MAX_HOT_GROUPS, the groups at which a
// window goes cold however large the cache. Not flags, so that the previous release a rolling-upgrade
// audit starts with the same environment ignores them.
func stateCount(getenv func(string) (string, bool), name string) (int, error) {
	v, ok := getenv(name)
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a count of 1 or more", name, v)
	}
	return n, nil
}

// purgeInterval maps --purge-interval to server.Config's: there 0 means
// the default, here it means never.
func purgeInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
