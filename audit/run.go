// Package audit is the crash/restart audit behind `turbinesql audit` and
// `make chaos`: it runs `turbinesql serve` as a child process against a
// Kafka broker (a kfake broker in its own process, or one it is given),
// declares one stream per (window kind × plan) — TUMBLE, HOP, SESSION,
// EMIT EVERY and an upsert stream, each local and repartition, and
// TUMBLE, HOP and EMIT EVERY combine — under the guarantee asked for,
// produces input continuously from outside, and meanwhile kills the server
// K times at random moments (SIGKILL mostly, optionally some clean SIGTERM
// stops and broker restarts), restarting it on the same data dir. At the
// end it closes every window, FLUSHes, reads every output topic from its
// start (read_committed), and audits every pane against an independent
// computation from the produced rows: lost, wrong (last value of a (key,
// window) differs), duplicated (a failure under exactly-once, counted
// under at-least-once), unexpected, and late rows (the input makes none
// possible). Main returns 1 if anything is lost, wrong, unexpected, late or
// (exactly-once) duplicated, 2 if the harness itself failed.
package audit

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/bench/harness"
)

type options struct {
	bin                  string
	faults, brokerFaults int
	seconds              float64
	crashAfterTxn        float64
	cacheMB              int
	minRun               int
	users                int
	maxRuns              int
	hotGroups            int
	events               int
	extBrokers           string
	guarantee            string
	name                 string
	diskFulls            int
	seed                 uint64
	rate                 int
	parts                int
	termShare            float64
	finalRestart         bool
	keep, verbose        bool
	flushTimeout         time.Duration
	// nodes is how many server processes share the app (cluster.go).
	nodes int
	// wipe is the share of restarts (with nodes > 1) on an emptied data
	// dir: the node's tasks must come back from the changelog alone.
	wipe float64
	// sessionTimeout is the servers' --session-timeout (0: their default).
	sessionTimeout time.Duration
	// midFlush: with nodes > 1, FLUSH runs on another node at each fault.
	midFlush bool
	// standbys is the servers' --standby-replicas.
	standbys int
	// upgradeFrom is the previous release's binary (upgrade.go): every
	// node starts on it and is upgraded to bin during the run.
	upgradeFrom string
}

// Main runs the audit with the command line args (name names the command
// in messages and its usage) and returns the exit code.
func Main(name string, args []string, defaults Defaults) int {
	var o options
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", defaults.Bin, "the turbinesql binary to run as the server")
	fs.StringVar(&o.extBrokers, "brokers", "", "audit against this Kafka cluster (host:port,...); empty: start a kfake broker in its own process")
	fs.StringVar(&o.guarantee, "guarantee", defaults.Guarantee, "processing_guarantee of the audited streams: exactly_once (a duplicated pane fails the audit) or at_least_once")
	fs.IntVar(&o.faults, "kills", defaults.Kills, "server faults: SIGKILL (or a clean SIGTERM, see -sigterm), each followed by a restart on the same data dir")
	fs.IntVar(&o.events, "events", defaults.Events, "input rows to produce (0: produce for -seconds); with -rate this sets how long the run takes")
	fs.Float64Var(&o.crashAfterTxn, "crash-after-txn", defaults.CrashAfterTxn, "exactly-once only: probability, per task commit, that the server crashes itself between the transaction's commit and the state's write (the narrowest window; TURBINESQL_CRASH_AFTER_TXN)")
	fs.IntVar(&o.cacheMB, "state-cache-mb", 0, "the server's --state-cache-mb (0: its default): a small cache makes every stream's state live mostly in Pebble")
	fs.IntVar(&o.maxRuns, "state-max-window-runs", 0, "the runs at which a server folds a window's partials into one (TURBINESQL_STATE_MAX_WINDOW_RUNS; 0: its default, 512)")
	fs.IntVar(&o.hotGroups, "state-max-hot-groups", 0, "the groups at which a server's window goes cold however large its cache, its rows then held and written as runs (TURBINESQL_STATE_MAX_HOT_GROUPS; 0: its default, 131,072)")
	fs.IntVar(&o.users, "users", defaultUsers, "distinct user_id keys in the input: many (thousands) put windows' groups out of a small -state-cache-mb, so commits write runs and fold them")
	fs.IntVar(&o.minRun, "state-min-run-partials", 0, "the fewest partials a server commit writes as a run of their own (TURBINESQL_STATE_MIN_RUN_PARTIALS; 0: its default, 4,096, which the audit's small commits rarely reach)")
	fs.IntVar(&o.brokerFaults, "broker-restarts", 0, "broker restarts (clean stop and start on the same data dir and port) while the server runs; only with the broker the audit starts")
	fs.IntVar(&o.diskFulls, "disk-full", 0, "times the server's data dir (a tmpfs of its own; needs root) fills up while input arrives, then is freed")
	fs.Float64Var(&o.seconds, "seconds", 120, "how long input is produced (wall clock) when -events is 0; the faults fall within it")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the input and the fault schedule (0: pick one and print it)")
	fs.IntVar(&o.rate, "rate", defaults.Rate, "input rows per second, over all source partitions")
	fs.IntVar(&o.parts, "partitions", 4, "source partitions (must divide 960)")
	fs.Float64Var(&o.termShare, "sigterm", defaults.TermShare, "share of server faults that are clean SIGTERM stops instead of SIGKILL")
	fs.BoolVar(&o.finalRestart, "final-restart", true, "after the final FLUSH, stop cleanly, restart and FLUSH again before reading the outputs (a restart must change no result)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work dir (data, logs) even when the audit passes")
	fs.BoolVar(&o.verbose, "v", false, "print every fault and example panes of every stream")
	fs.DurationVar(&o.flushTimeout, "flush-timeout", 10*time.Minute, "how long the final FLUSH may take")
	fs.IntVar(&o.nodes, "nodes", 1, "server processes sharing the app (own data dirs, ports and --node-id); a fault stops one of them, FLUSH runs on another")
	fs.Float64Var(&o.wipe, "wipe", 0.3, "with -nodes > 1: share of restarts on an emptied data dir (state comes back from the changelog)")
	fs.IntVar(&o.standbys, "standby-replicas", 0, "the servers' --standby-replicas: warm copies of each task on other nodes (failover then restores only what a copy lacks)")
	fs.BoolVar(&o.midFlush, "flush-during-faults", false, "with -nodes > 1: also FLUSH on another node while a fault stops one, input still arriving (FLUSH declares the input complete so far: rows that arrive after it behind the highest watermark are late, so panes can come out short)")
	fs.StringVar(&o.upgradeFrom, "upgrade-from", "", "a rolling upgrade: every node starts on this binary (the previous release, make build-prev) and is upgraded to -bin one node at a time during the run (clean stop, restart on -bin, wait until it owns tasks again), the other faults going on")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 0, "the servers' --session-timeout (0: their default); with -nodes > 1 a SIGKILLed node stays down longer than it, so its tasks move")
	fs.SetOutput(io.Discard) // the flag package would print usage on every error
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Printf(`usage: %s [flags]

Runs a turbinesql server (-bin) on a broker of its own (or -brokers), feeds it
input while it SIGKILLs (or stops) the server -kills times, and checks every
pane of every audited stream (local, repartition, combine; tumbling, hopping,
session) against an independent computation of the same input: a missing,
wrong or (exactly-once) duplicated pane fails the audit, exit 1.

`, name)
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return 0
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n(%s -h lists the flags)\n", name, err, name)
		return 2
	}
	switch o.guarantee {
	case "exactly_once", "at_least_once":
	default:
		fmt.Fprintf(os.Stderr, "%s: -guarantee %q: use exactly_once or at_least_once\n", name, o.guarantee)
		return 2
	}
	if o.nodes < 1 || (o.nodes > 1 && o.diskFulls > 0) {
		fmt.Fprintf(os.Stderr, "%s: -nodes must be at least 1, and -disk-full runs with one node only\n", name)
		return 2
	}
	if o.extBrokers != "" && (o.brokerFaults > 0 || o.diskFulls > 0) {
		fmt.Fprintf(os.Stderr, "%s: -broker-restarts and -disk-full need the broker the audit starts itself (drop -brokers)\n", name)
		return 2
	}
	if o.rate <= 0 || o.parts <= 0 || o.events < 0 {
		fmt.Fprintf(os.Stderr, "%s: -rate and -partitions must be positive, -events not negative\n", name)
		return 2
	}
	if o.events > 0 {
		o.seconds = float64(o.events) / float64(o.rate)
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	o.name = name
	code, err := run(o)
	var ef engineFailure
	switch {
	case errors.As(err, &ef):
		fmt.Printf("%s: FAILED: %v\n", name, err)
		code = 1
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		code = 2
	}
	return code
}

// Defaults are the flag defaults of the command running the audit.
type Defaults struct {
	Bin       string
	Guarantee string
	Kills     int
	Events    int
	Rate      int
	TermShare float64
	// CrashAfterTxn is -crash-after-txn's default.
	CrashAfterTxn float64
}

// engineFailure is an error of the server, not of the harness: it could
// not restart, or FLUSH failed. The run fails (exit 1) as an audit does.
type engineFailure struct{ error }

func (e engineFailure) Unwrap() error { return e.error }

// chaos is one run's moving parts.
type chaos struct {
	o       options
	rng     *rand.Rand
	start   time.Time
	cfg     serverConfig // node 0's
	brokers string
	stopBrk func()
	work    string
	prefix  string // of every topic name

	mu        sync.Mutex
	nodes     []*member
	run       int                         // server runs started, over every node: a run number names one process
	late      map[int]map[string]lateSeen // server run → stream → late counts last seen
	status    map[string]string
	unplanned []string // exits nobody asked for

	killed, termed, brokerRestarts, diskFulls int
	wiped                                     int             // restarts on an emptied data dir
	cleanStops                                []time.Duration // SIGTERM to exit
	failovers                                 []failover
	midFlushes                                []string // FLUSHes on another node during a fault
	windowCrashes                             int      // injected between a transaction's commit and the state write
	prod                                      *producer
	bg                                        sync.WaitGroup // FLUSHes on other nodes under way
	names                                     []string       // of the audited streams
	// bin is the binary under test; prevBin, with -upgrade-from, the
	// previous release's, which the nodes start on (upgrade.go).
	bin, prevBin string
	upgrades     []upgrade
}

// lateSeen is what one server run reported late for a stream: SHOW
// STREAMS's late_rows, the /metrics late counter, and the partials a
// combine's merge stage dropped as redelivered.
type lateSeen struct{ show, metric, redelivered int64 }

func (c *chaos) logf(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(o options) (int, error) {
	ctx := context.Background()
	if _, err := os.Stat(o.bin); err != nil {
		return 0, fmt.Errorf("%w (build it: make build)", err)
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return 0, err
	}
	work, err := os.MkdirTemp("", "turbinesql-chaos-")
	if err != nil {
		return 0, err
	}
	c := &chaos{o: o, rng: rand.New(rand.NewPCG(o.seed, 1)), start: time.Now(), work: work,
		late: map[int]map[string]lateSeen{}, status: map[string]string{}}
	fmt.Printf("%s: seed %d, %s (replay: -seed %d -kills %d -broker-restarts %d -disk-full %d -seconds %g -rate %d -partitions %d -sigterm %g -guarantee %s -nodes %d -wipe %g -users %d)\n",
		o.name, o.seed, o.guarantee, o.seed, o.faults, o.brokerFaults, o.diskFulls, o.seconds, o.rate, o.parts, o.termShare, o.guarantee, o.nodes, o.wipe, o.users)
	if o.upgradeFrom != "" {
		fmt.Printf("%s: replay the rolling upgrade with -upgrade-from %s\n", o.name, o.upgradeFrom)
	}
	fmt.Printf("%s: work dir %s\n", o.name, work)
	if o.upgradeFrom != "" {
		if c.prevBin, err = filepath.Abs(o.upgradeFrom); err != nil {
			return 0, err
		}
		if _, err := os.Stat(c.prevBin); err != nil {
			return 0, fmt.Errorf("-upgrade-from: %w (build it: make build-prev)", err)
		}
		fmt.Printf("%s: rolling upgrade from %s to %s\n", o.name, describeBin(c.prevBin), describeBin(bin))
	}
	code, err := c.main(ctx, bin)
	if c.stopBrk != nil {
		c.stopBrk()
	}
	if code == 0 && err == nil && !o.keep {
		os.RemoveAll(work)
	} else {
		fmt.Printf("%s: kept %s (server.log: the server's log across runs)\n", o.name, work)
	}
	return code, err
}

func (c *chaos) main(ctx context.Context, bin string) (int, error) {
	o := c.o
	var err error
	brokerDir := filepath.Join(c.work, "broker")
	if o.extBrokers != "" {
		c.brokers = o.extBrokers
	} else if c.brokers, c.stopBrk, err = harness.StartBrokerAt("127.0.0.1:0", brokerDir); err != nil {
		return 0, err
	}
	// The last server run outlives the audit otherwise (the work dir it
	// uses is deleted under it). Registered before the disk's unmount, so
	// it runs after it and finds the server stopped already.
	defer c.stopServers()
	c.bin = bin
	c.cfg = serverConfig{bin: cmp.Or(c.prevBin, bin), brokers: c.brokers, dataDir: filepath.Join(c.work, "server"), logPath: filepath.Join(c.work, "server.log"), appID: "chaos", cacheMB: o.cacheMB, minRun: o.minRun, maxRuns: o.maxRuns, hotGroups: o.hotGroups,
		sessionTimeout: o.sessionTimeout, standbys: o.standbys}
	if o.extBrokers != "" {
		// A cluster given to the audit may hold earlier runs' topics: this
		// run's topics and app id (its catalog topic) are its own.
		c.prefix = fmt.Sprintf("audit%d-", o.seed)
		c.cfg.appID = fmt.Sprintf("audit%d", o.seed)
	}
	if o.diskFulls > 0 {
		if err := mountDisk(c.cfg.dataDir); err != nil {
			return 0, err
		}
		defer func() {
			c.stopServers()
			unmountDisk(c.cfg.dataDir)
		}()
	}
	c.nodes = members(c.cfg, o.nodes)
	if err := c.restart(ctx, c.nodes[0]); err != nil {
		return 0, err
	}
	streams := specs(c.prefix, o.guarantee)
	for _, s := range streams {
		c.names = append(c.names, s.name)
	}
	if len(c.nodes) == 1 {
		if err := c.declare(ctx, c.nodes[0], true, streams); err != nil {
			return 0, err
		}
	} else {
		// Every node up first, the source declared on the first node and
		// the streams on the second: each node follows the catalog live,
		// and the first must run what the second declared.
		if err := c.declare(ctx, c.nodes[0], true, nil); err != nil {
			return 0, err
		}
		for _, m := range c.nodes[1:] {
			if err := c.restart(ctx, m); err != nil {
				return 0, err
			}
		}
		began := time.Now()
		if err := c.declare(ctx, c.nodes[1], false, streams); err != nil {
			return 0, err
		}
		declared := time.Now()
		if err := c.awaitStreams(ctx, c.nodes[0], streams); err != nil {
			return 0, err
		}
		c.logf("DDL on %s: %d CREATE STREAMs took %s there; all run on %s %s after the last one returned",
			c.nodes[1].name(), len(streams), declared.Sub(began).Round(time.Millisecond), c.nodes[0].name(), time.Since(declared).Round(time.Millisecond))
	}
	if o.guarantee == "exactly_once" {
		// From the first restart on: a crash while the streams are being
		// declared would fail the declaring, not audit anything.
		for _, m := range c.nodes {
			m.cfg.crashAfterTxn = o.crashAfterTxn
		}
	}
	var addrs []string
	for _, m := range c.nodes {
		addrs = append(addrs, m.cur.pgAddr)
	}
	c.logf("broker %s (own process), %d server(s) %s, %d streams", c.brokers, len(c.nodes), strings.Join(addrs, " "), len(streams))
	if c.prevBin != "" {
		c.logf("every node runs the previous release (%s) until its upgrade", filepath.Base(c.prevBin))
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	w := &workload{parts: o.parts, keys: newKeys(o.parts, o.users), rng: rand.New(rand.NewPCG(o.seed, 2))}
	prod := &producer{cl: cl, topic: c.prefix + "ev", w: w}
	c.prod = prod
	interval := time.Duration(float64(time.Second) * float64(rowsPerPart*o.parts) / float64(o.rate))
	pctx, stopProducing := context.WithCancel(ctx)
	prodErr := make(chan error, 1)
	go func() { prodErr <- prod.run(pctx, interval, o.events) }()
	pollCtx, stopPolling := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() { c.poll(pollCtx); close(polled) }()

	finished, err := c.faults(ctx, prodErr)
	if err != nil {
		stopProducing()
		stopPolling()
		return 0, err
	}
	if !finished {
		if o.events == 0 {
			stopProducing()
		} else {
			c.logf("waiting for the producer to write its %d rows", o.events)
		}
		if err := <-prodErr; err != nil {
			stopProducing()
			stopPolling()
			return 0, err
		}
	}
	stopProducing()
	_, ticks := prod.produced()
	if err := prod.send(ctx, w.final(ticks)); err != nil {
		stopPolling()
		return 0, err
	}
	rows, _ := prod.produced()
	c.logf("produced %d rows in %d ticks (event time %s), then one closing row per partition", len(rows), ticks,
		time.Duration(ticks*tickMs)*time.Millisecond)

	if err := c.ensureUp(ctx); err != nil {
		stopPolling()
		return 0, err
	}
	if err := c.upgradeRest(ctx); err != nil {
		stopPolling()
		return 0, err
	}
	if err := c.flushAll(ctx); err != nil {
		stopPolling()
		return 0, err
	}
	if o.finalRestart {
		c.logf("final clean restart (one node after the other), then FLUSH with no new input")
		for _, m := range c.nodes {
			if err := c.fault(ctx, m, syscall.SIGTERM, false); err != nil {
				stopPolling()
				return 0, err
			}
		}
		if err := c.flushAll(ctx); err != nil {
			stopPolling()
			return 0, err
		}
	}
	stopPolling()
	<-polled
	if err := c.pollOnce(ctx); err != nil { // exact figures of the last run
		return 0, err
	}

	wm := base + ticks*tickMs + finalGapMs - delayMs
	var vs []verdict
	for _, s := range streams {
		v, err := c.auditStream(ctx, s, rows, wm)
		if err != nil {
			return 0, err
		}
		vs = append(vs, v)
	}
	c.logf("read and audited %d streams", len(vs))
	faults := c.killed + c.termed + c.brokerRestarts + c.diskFulls + len(c.upgrades)
	fmt.Printf("\nfaults: %d SIGKILL, %d SIGTERM, %d broker restarts, %d disk full, %d crashes between a transaction's commit and its state write",
		c.killed, c.termed, c.brokerRestarts, c.diskFulls, c.windowCrashes)
	if c.prevBin != "" {
		fmt.Printf(", %d upgrades (a clean stop, a restart on the new binary)", len(c.upgrades))
	}
	if o.finalRestart {
		fmt.Print(" (plus the final clean restart)")
	}
	fmt.Printf("; %d input rows; seed %d\n", len(rows), o.seed)
	if o.guarantee == "exactly_once" {
		fmt.Printf("recoveries that replayed a committed transaction into state (server log): %d\n", c.countInLogs("recovering: the last transaction committed past the state"))
		fmt.Printf("task opens that caught the state up from the changelog (server log): %d\n", c.countInLogs("state restored from the changelog"))
	}
	if len(c.cleanStops) > 0 {
		st := slices.Clone(c.cleanStops)
		slices.Sort(st)
		fmt.Printf("clean stops (SIGTERM to exit), %d: median %s, max %s\n", len(st), st[len(st)/2].Round(time.Millisecond), st[len(st)-1].Round(time.Millisecond))
	}
	if o.nodes > 1 {
		c.printCluster(os.Stdout)
	}
	if c.prevBin != "" {
		c.printUpgrades(os.Stdout)
	}
	fmt.Println()
	printTable(os.Stdout, vs, faults)
	failed := false
	for _, v := range vs {
		if v.failed() || o.verbose {
			for _, e := range v.examples {
				fmt.Printf("  %s: %s\n", v.spec.name, e)
			}
		}
		failed = failed || v.failed()
	}
	for _, u := range c.unplanned {
		fmt.Println("  server exited by itself:", u)
		failed = true
	}
	if failed {
		fmt.Printf("\n%s: FAILED (lost, wrong, unexpected or late panes, duplicated ones under exactly-once, a stream not running, or an unplanned exit)\n", c.o.name)
		return 1, nil
	}
	fmt.Printf("\n%s: ok\n", c.o.name)
	return 0, nil
}

// declare creates the source and the audited streams.
func (c *chaos) declare(ctx context.Context, m *member, source bool, streams []streamSpec) error {
	conn, err := m.cur.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var stmts []string
	if source {
		stmts = append(stmts, fmt.Sprintf(sourceSQL, delayMs, c.prefix, c.o.parts, idleTimeout))
	}
	for _, s := range streams {
		stmts = append(stmts, s.sql())
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// awaitStreams waits until node m's SHOW STREAMS lists every stream
// running: DDL another node ran reached it through the catalog topic.
func (c *chaos) awaitStreams(ctx context.Context, m *member, streams []streamSpec) error {
	deadline := time.Now().Add(time.Minute)
	for {
		running, err := c.runningOn(ctx, m)
		missing := 0
		for _, s := range streams {
			if !running[s.name] {
				missing++
			}
		}
		if err == nil && missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still does not run %d of the %d streams declared on another node a minute later (last error: %v)", m.name(), missing, len(streams), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runningOn is the streams node m's SHOW STREAMS lists as running.
func (c *chaos) runningOn(ctx context.Context, m *member) (map[string]bool, error) {
	conn, err := m.cur.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW STREAMS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	running := map[string]bool{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		name, _ := vals[0].(string)
		status, _ := vals[4].(string)
		running[name] = status == "running"
	}
	return running, rows.Err()
}

// faults spreads the server faults and broker restarts at random moments
// of the production time and carries them out, restarting the server
// after each at once or after a short gap (far below idle_timeout).
func (c *chaos) faults(ctx context.Context, prodErr chan error) (finished bool, err error) {
	type event struct {
		at           time.Duration
		broker, disk bool
		upgrade      *member // a node to upgrade (upgrade.go)
	}
	total := time.Duration(c.o.seconds * float64(time.Second))
	var evs []event
	for i := 0; i < c.o.faults+c.o.brokerFaults+c.o.diskFulls; i++ {
		at := time.Duration((0.05 + 0.9*c.rng.Float64()) * float64(total))
		evs = append(evs, event{at: at, broker: i >= c.o.faults && i < c.o.faults+c.o.brokerFaults, disk: i >= c.o.faults+c.o.brokerFaults})
	}
	if c.prevBin != "" {
		order := c.rng.Perm(len(c.nodes))
		for i, at := range upgradeTimes(c.rng, total, len(c.nodes)) {
			evs = append(evs, event{at: at, upgrade: c.nodes[order[i]]})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	evs = append(evs, event{at: total}) // the end of production
	for i, ev := range evs {
		// At least a moment of uptime after a restart, so a fault hits a
		// server that is processing (sometimes still catching up).
		minUp := time.Now().Add(time.Duration(200+c.rng.IntN(1300)) * time.Millisecond)
		for time.Since(c.start) < ev.at || time.Now().Before(minUp) {
			select {
			case err := <-prodErr:
				if err != nil || c.o.events == 0 {
					return false, cmp.Or(err, errors.New("producer stopped"))
				}
				finished, prodErr = true, nil // wrote its rows; the faults go on
			case <-time.After(100 * time.Millisecond):
			}
			if err := c.ensureUp(ctx); err != nil {
				return false, err
			}
		}
		if i == len(evs)-1 {
			return finished, nil
		}
		if ev.upgrade != nil {
			if err := c.upgrade(ctx, ev.upgrade, finished); err != nil {
				return false, err
			}
			continue
		}
		if ev.broker {
			if err := c.restartBroker(); err != nil {
				return false, err
			}
			continue
		}
		if ev.disk {
			if err := c.fillDisk(ctx); err != nil {
				return false, err
			}
			continue
		}
		sig := syscall.SIGKILL
		if c.rng.Float64() < c.o.termShare {
			sig = syscall.SIGTERM
		}
		m := c.nodes[c.rng.IntN(len(c.nodes))]
		if err := c.fault(ctx, m, sig, len(c.nodes) > 1); err != nil {
			return false, err
		}
		if sig == syscall.SIGKILL {
			c.killed++
		} else {
			c.termed++
		}
	}
	return finished, nil
}

// fault stops node m with sig and restarts it on its data dir, after a
// gap of up to 3 s. In a cluster (cluster true) the other nodes go on
// meanwhile: FLUSH runs on one of them while m stops, half of the SIGKILLs
// keep m down until its tasks have moved to the others (the failover,
// measured), and a share of restarts (-wipe) find the data dir emptied, so
// m's tasks come back from the changelog alone.
func (c *chaos) fault(ctx context.Context, m *member, sig syscall.Signal, cluster bool) error {
	c.mu.Lock()
	s, run := m.cur, m.run
	m.cur = nil
	c.mu.Unlock()
	if cluster && c.o.midFlush {
		c.flushElsewhere(ctx, m)
	}
	t0 := time.Now()
	c.stop(m, s, run, sig)
	how := ""
	if cluster && sig == syscall.SIGKILL && c.rng.IntN(2) == 0 {
		fo, err := c.awaitFailover(ctx, m, t0)
		if err != nil {
			return err
		}
		if fo.tasks > 0 {
			c.failovers = append(c.failovers, fo)
		}
		how = fmt.Sprintf(", its tasks moved in %s (processing again in %s)", fo.owned.Round(time.Millisecond), fo.processing.Round(time.Millisecond))
	} else {
		time.Sleep(time.Duration(c.rng.IntN(3000)) * time.Millisecond)
	}
	if cluster && c.rng.Float64() < c.o.wipe {
		if err := os.RemoveAll(m.cfg.dataDir); err != nil {
			return err
		}
		c.wiped++
		how += ", restarted on an emptied data dir"
	}
	if err := c.restart(ctx, m); err != nil {
		return err
	}
	c.logf("%s %s run %d at input event time %s, down %s%s, run %d up%s", sigName(sig), m.name(), run, c.eventTime(),
		time.Since(t0).Round(time.Millisecond), how, m.run, c.release(m))
	return nil
}

// stop stops run run of node m (its server s) with sig. A clean stop that
// fails is an unplanned exit, unless the server crashed itself between a
// transaction's commit and the state's write (injected: a planned fault).
func (c *chaos) stop(m *member, s *server, run int, sig syscall.Signal) {
	t0 := time.Now()
	err := s.stop(sig, 60*time.Second)
	if sig == syscall.SIGTERM {
		c.cleanStops = append(c.cleanStops, time.Since(t0))
	}
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.injectedCrash() {
		c.windowCrashes++
	} else {
		c.unplanned = append(c.unplanned, fmt.Sprintf("%s run %d: %v", m.name(), run, err))
	}
}

// eventTime is the event time the producer has reached, to tie a fault
// to the windows it may have disturbed.
func (c *chaos) eventTime() string {
	if c.prod == nil {
		return "-"
	}
	_, ticks := c.prod.produced()
	return time.UnixMilli(base + ticks*tickMs).UTC().Format("15:04:05")
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// stopServers stops every node's current run, if any, cleanly.
func (c *chaos) stopServers() {
	c.mu.Lock()
	var runs []*server
	for _, m := range c.nodes {
		if m.cur != nil {
			runs = append(runs, m.cur)
		}
		m.cur = nil
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range runs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.stop(syscall.SIGTERM, 60*time.Second) }()
	}
	wg.Wait()
	c.bg.Wait() // FLUSHes on other nodes
}

// restart starts node m's next server run.
func (c *chaos) restart(ctx context.Context, m *member) error {
	c.mu.Lock()
	c.run++
	run := c.run
	c.mu.Unlock()
	s, err := startServer(ctx, m.cfg, run)
	for tries := 0; err != nil && isInjectedCrash(err) && tries < 100; tries++ {
		// It crashed itself while starting (a due window's close, say):
		// a planned fault too.
		c.mu.Lock()
		c.windowCrashes++
		c.run++
		run = c.run
		c.mu.Unlock()
		s, err = startServer(ctx, m.cfg, run)
	}
	if err != nil {
		return engineFailure{fmt.Errorf("%s run %d: %w", m.name(), run, err)}
	}
	c.mu.Lock()
	m.cur, m.run = s, run
	c.mu.Unlock()
	return nil
}

// ensureUp restarts a node that exited without being asked to, and
// records it: that is an engine failure.
func (c *chaos) ensureUp(ctx context.Context) error {
	for _, m := range c.nodes {
		if err := c.ensureNodeUp(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (c *chaos) ensureNodeUp(ctx context.Context, m *member) error {
	c.mu.Lock()
	s, run := m.cur, m.run
	c.mu.Unlock()
	if s == nil || s.alive() {
		return nil // being restarted by a fault, or running
	}
	if s.injectedCrash() {
		c.mu.Lock()
		c.windowCrashes++
		c.mu.Unlock()
		if c.o.verbose {
			c.logf("%s run %d crashed between a transaction's commit and its state write (injected); restarting", m.name(), run)
		}
		return c.restart(ctx, m)
	}
	c.mu.Lock()
	c.unplanned = append(c.unplanned, fmt.Sprintf("%s run %d: %v (see %s)", m.name(), run, s.err, filepath.Base(m.cfg.logPath)))
	c.mu.Unlock()
	c.logf("%s run %d exited by itself: %v; restarting", m.name(), run, s.err)
	return c.restart(ctx, m)
}

// restartBroker stops the broker cleanly (it persists its log) and starts
// it again on the same port and data dir while the server keeps running.
func (c *chaos) restartBroker() error {
	t0 := time.Now()
	c.stopBrk()
	c.stopBrk = nil
	time.Sleep(time.Second)
	addr, stop, err := harness.StartBrokerAt(c.brokers, filepath.Join(c.work, "broker"))
	if err != nil {
		return fmt.Errorf("broker restart: %w", err)
	}
	if addr != c.brokers {
		stop()
		return fmt.Errorf("broker came back on %s, not %s", addr, c.brokers)
	}
	c.stopBrk = stop
	c.brokerRestarts++
	c.logf("broker restarted at input event time %s (down %s)", c.eventTime(), time.Since(t0).Round(time.Millisecond))
	return nil
}

// flush runs FLUSH on node m.
func (c *chaos) flush(ctx context.Context, m *member) error {
	for {
		c.mu.Lock()
		s := m.cur
		c.mu.Unlock()
		err := c.flushOnce(ctx, s)
		if err == nil {
			return nil
		}
		crashed := c.crashedOthers(m)
		if !s.waitInjectedCrash() && len(crashed) == 0 {
			return err
		}
		// The server crashed itself during the FLUSH, or another node did
		// and the FLUSH waited for its partitions (they move once its
		// session times out, and FLUSH waits a minute at most): a planned
		// fault. The next runs inject no more, so the audit can finish.
		if len(crashed) > 0 {
			c.logf("FLUSH on %s failed while %s had crashed itself (injected): restarting, FLUSH again (%v)", m.name(), strings.Join(crashed, ", "), err)
		}
		c.mu.Lock()
		for _, n := range c.nodes {
			n.cfg.crashAfterTxn = 0
		}
		c.mu.Unlock()
		if err := c.ensureUp(ctx); err != nil {
			return err
		}
	}
}

// crashedOthers names the nodes other than m whose current run exited by
// a crash it injected itself.
func (c *chaos) crashedOthers(m *member) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		if n != m && n.cur != nil && !n.cur.alive() && n.cur.injectedCrash() {
			out = append(out, n.name())
		}
	}
	return out
}

func (c *chaos) flushOnce(ctx context.Context, s *server) error {
	t0 := time.Now()
	fctx, cancel := context.WithTimeout(ctx, c.o.flushTimeout)
	defer cancel()
	conn, err := s.connect(fctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(fctx, "FLUSH"); err != nil {
		return engineFailure{fmt.Errorf("FLUSH: %w", err)}
	}
	if len(c.nodes) == 1 {
		c.logf("FLUSH took %s", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// poll reads SHOW STREAMS every second, keeping each server run's last
// late_rows per stream (it survives restarts: the largest seen counts),
// and the /metrics counters, which start from zero at every start (their
// total is the sum over runs; a SIGKILL loses at most the last second's
// increase; the late-data topics keep every late row).
func (c *chaos) poll(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		_ = c.pollOnce(ctx)
	}
}

func (c *chaos) pollOnce(ctx context.Context) error {
	var errs []error
	for _, m := range c.nodes {
		c.mu.Lock()
		s, run := m.cur, m.run
		c.mu.Unlock()
		if s != nil {
			errs = append(errs, c.pollNode(ctx, m, s, run))
		}
	}
	return errors.Join(errs...)
}

// pollNode reads one server run's SHOW STREAMS and late counters. Every
// node counts what its own tasks dropped, so the sums over runs cover the
// cluster.
func (c *chaos) pollNode(ctx context.Context, m *member, s *server, run int) error {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	conn, err := s.connect(qctx)
	if err != nil {
		return err
	}
	defer conn.Close(qctx)
	rows, err := conn.Query(qctx, "SHOW STREAMS")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		name, _ := vals[0].(string)
		status, _ := vals[4].(string)
		late, _ := vals[7].(int64)
		if e, _ := vals[11].(string); e != "" {
			status += ": " + e
		}
		c.mu.Lock()
		l := c.seen(run, name)
		l.show = max(l.show, late)
		c.late[run][name] = l
		c.status[statusKey(m, name)] = status
		c.mu.Unlock()
	}
	if err := rows.Err(); err != nil {
		return err
	}
	late, redelivered, err := countersFromMetrics(qctx, s.metricsURL)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, n := range late {
		l := c.seen(run, name)
		l.metric = max(l.metric, n)
		c.late[run][name] = l
	}
	for name, n := range redelivered {
		l := c.seen(run, name)
		l.redelivered = max(l.redelivered, n)
		c.late[run][name] = l
	}
	return nil
}

// seen is run's late counts of a stream; c.mu held.
func (c *chaos) seen(run int, name string) lateSeen {
	if c.late[run] == nil {
		c.late[run] = map[string]lateSeen{}
	}
	return c.late[run][name]
}

// auditStream reads a stream's output and late-data topics and audits it.
func (c *chaos) auditStream(ctx context.Context, s streamSpec, rows []row, wm int64) (verdict, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	recs, err := readTopic(rctx, c.brokers, s.topic())
	if err != nil {
		return verdict{}, err
	}
	got := make([]pane, 0, len(recs))
	for _, r := range recs {
		p, err := parsePane(s, r.Value)
		// In a rolling upgrade, a pane without any header is one the
		// previous release wrote (it did not carry its identity yet);
		// every pane with headers must carry the right ones.
		if err == nil && !(c.prevBin != "" && len(r.Headers) == 0) {
			err = checkIdentity(s, p, r)
		}
		if err != nil {
			return verdict{}, fmt.Errorf("stream %s: %w", s.name, err)
		}
		got = append(got, p)
	}
	v := audit(s, got, expected(s, rows, wm))
	if lt := s.lateTopic(); lt != "" {
		late, err := readTopic(rctx, c.brokers, lt)
		if err != nil {
			return verdict{}, err
		}
		v.lateTopic = int64(len(late))
	}
	c.mu.Lock()
	for _, perRun := range c.late {
		// SHOW STREAMS's count survives restarts (committed with the
		// state): the largest any run saw, not a sum over runs.
		v.late = max(v.late, perRun[s.name].show)
		v.lateMetric += perRun[s.name].metric
		v.redelivered += perRun[s.name].redelivered
	}
	v.status = ""
	for _, m := range c.nodes {
		// The last status each node saw: a stream not running on one of
		// them shows.
		if st, ok := c.status[statusKey(m, s.name)]; ok && (v.status == "" || v.status == "running") {
			v.status = st
		}
	}
	c.mu.Unlock()
	return v, nil
}

// countInLog counts the lines of the server's log holding what.
func countInLog(path, what string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	return strings.Count(string(b), what)
}
