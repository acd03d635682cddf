// Package server composes the engine: the Kafka connection (an embedded
// broker by default), the catalog, the state store, one runner per stream,
// the pgwire front door and the HTTP endpoint for metrics.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/turbinesql/turbinesql/internal/dirlock"
	"github.com/turbinesql/turbinesql/streamplan"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/turbinesql/turbinesql/barrier"
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/cluster"
	"github.com/turbinesql/turbinesql/console"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/purge"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/state"
)

// Config is how `turbinesql serve` is started.
type Config struct {
	DataDir   string
	PGAddr    string
	HTTPAddr  string
	Brokers   []string // empty: run the embedded broker
	KafkaAddr string   // embedded broker listen address
	// Kafka is how to reach Brokers: SASL and TLS (its Brokers field is
	// set from Brokers). Every Kafka client of the engine uses it.
	Kafka  kafkaio.Conn
	AppID  string
	Logger *slog.Logger
	// AfterTxn is the runtime's fault-injection point between an
	// exactly-once commit's transaction and its state write (nil: none).
	AfterTxn func()
	// AfterIngest is the state store's fault-injection point between a
	// commit's runs' ingest and its batch (state.Options.AfterIngest).
	AfterIngest func()
	// Auth is how pgwire clients log in: AuthTrust (the default, any user
	// without a password) or AuthSCRAM (SCRAM-SHA-256 against the users
	// kept in the catalog).
	Auth string
	// InitialPassword is the password of InitialUser, an admin, set at
	// every start ("" leaves that user as the catalog has it).
	InitialPassword string
	// TLSCert and TLSKey are PEM files: with them pgwire answers
	// SSLRequest with TLS. TLSRequired refuses plain-text clients.
	TLSCert, TLSKey string
	TLSRequired     bool
	// AllowNonDivisor starts keyed streams on partition counts that do not
	// divide 960 (TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1).
	AllowNonDivisor bool
	// CommitInterval is how often a stream closes due windows, produces
	// their panes and commits state with its input positions. Committing
	// after every fetch rewrote each busy group's accumulator per fetch;
	// batching them bounds that cost, at the price of this much latency on
	// a window's close. Zero means DefaultCommitInterval.
	CommitInterval time.Duration
	// StateCacheMB is the memory, shared by every stream, for the groups
	// of TUMBLE, HOP and unwindowed aggregations (0: DefaultStateCacheMB;
	// negative: unlimited): beyond it groups live only in Pebble.
	StateCacheMB int
	// StateMinRunPartials is the fewest partials a commit writes as a run
	// of their own (state.Options.MinRunPartials; 0: the store's default,
	// 4,096). Crash audits lower it so that their small commits take the
	// run path too.
	StateMinRunPartials int
	// StateMaxWindowRuns lowers the runs at which a window's partials are
	// folded into one run (state.Options.MaxWindowRuns; 0: the store's
	// bound, 512). Crash audits lower it so that folds happen under faults.
	StateMaxWindowRuns int
	// StateMaxHotGroups lowers the groups at which a window of a windowed
	// aggregation that writes blind goes cold, its rows then written as
	// runs of partials however large the cache (exec's
	// SetHotWindowGroups; 0: its bound, 131,072). Crash audits lower it so
	// that windows go cold so at their scale.
	StateMaxHotGroups int
	// MaxPollRecords bounds the records a stream or hop takes from one poll
	// (its batch); 0 is DefaultMaxPollRecords. Tests vary it to check that
	// results do not depend on batching.
	MaxPollRecords int
	// NodeID names this process among the processes of its app, stable
	// across its restarts (empty: one made up at the first start and kept
	// in the data dir).
	NodeID string
	// SessionTimeout is how long the stages' consumer groups keep a silent
	// process's partitions before moving them (0: DefaultSessionTimeout).
	SessionTimeout time.Duration
	// StandbyReplicas is how many other processes keep a warm copy of each
	// task's state (dataflow/standby.go), so a failover restores only the
	// last few changelog records. 0: none.
	StandbyReplicas int
	// MetadataInterval is how often a stream looks for partitions added to
	// its input, and for its topics deleted (0: every 5 s).
	MetadataInterval time.Duration
	// PurgeInterval is how often consumed records of hop topics are
	// deleted (0: DefaultPurgeInterval; negative: never).
	PurgeInterval time.Duration
	// PurgeSealRecords is how many consumed records a repartition topic
	// generation holds before it is sealed and purged (0:
	// DefaultSealAfterRecords).
	PurgeSealRecords int64
	// stateFS, when set, is the file system of the state store (tests fill
	// the disk on cue).
	stateFS vfs.FS
	// beforeOpen, when set, runs before each task opens
	// (dataflow.Deps.BeforeOpen): tests fail a stage's start on cue.
	beforeOpen func(group string, partition int32) error
	// consoleSampleEvery is how often the console samples the streams'
	// history (0: console.DefaultHistoryEvery; tests sample faster).
	consoleSampleEvery time.Duration
	// StatementTimeout cancels any statement that runs longer (57014),
	// unless a session SETs its own statement_timeout; 0 is no limit.
	StatementTimeout time.Duration
	// MessageTimeout drops a client that sends part of a protocol message
	// and stalls this long (0: pgwire.DefaultMessageTimeout).
	MessageTimeout time.Duration
	// TransitionWindow is how long producers get to pick up a new
	// partition count of a keyed stream's input before a record placed
	// under the old count counts as misplaced (0: 10 minutes).
	TransitionWindow time.Duration
	// Clock is the wall clock of idleness timeouts; nil is time.Now.
	// Tests inject their own.
	Clock func() time.Time
}

// DefaultMaxPollRecords is the batch bound when Config sets none.
const DefaultMaxPollRecords = 50_000

func (s *Server) pollRecords() int {
	if s.cfg.MaxPollRecords > 0 {
		return s.cfg.MaxPollRecords
	}
	return DefaultMaxPollRecords
}

// DefaultStateCacheMB is the group cache when Config sets none.
const DefaultStateCacheMB = 256

// DefaultCommitInterval is the commit cadence when Config sets none.
const DefaultCommitInterval = time.Second

// DefaultSessionTimeout is how long a silent process keeps its partitions:
// what failover waits for after a crash. Kafka's brokers refuse less than
// 6 s by default (group.min.session.timeout.ms).
const DefaultSessionTimeout = 10 * time.Second

func (s *Server) commitEvery() time.Duration {
	if s.cfg.CommitInterval > 0 {
		return s.cfg.CommitInterval
	}
	return DefaultCommitInterval
}

// Server is a running TurbineSQL instance.
type Server struct {
	cfg Config
	// progressReady: the exactly-once progress topic exists.
	progressReady atomic.Bool
	// recovering paces the restarts of exactly-once streams whose
	// transactions Kafka did not take (recover.go).
	recovering recoveries
	// instance names this server run in exactly-once commits (random).
	instance uint64
	// nodeID names this process among the app's (node.go): its member id
	// in every stage's consumer group.
	nodeID string
	// FLUSH across the app's processes (flush.go): flushSeq numbers the
	// FLUSHes this process coordinates, flushAcks routes their
	// acknowledgements, flushFollowing is closed once the flush topic is
	// followed.
	flushSeq       atomic.Int64
	flushAcks      barrier.Board
	flushFollowing chan struct{}
	// wmRead is the next offset of the watermarks topic to read.
	wmRead atomic.Int64
	// watermarks shares the tasks' own watermarks with the app's other
	// processes (watermarks.go).
	watermarks *watermarkBoard
	dirLock    *dirlock.Lock // this server's hold on cfg.DataDir
	log        *slog.Logger
	broker     *kafkaio.Embedded
	kafka      *kafkaio.Client
	store      *state.Store
	cat        *catalog.Catalog
	reg        *prometheus.Registry
	metrics    *dataflow.Metrics
	pg         *pgwire.Server
	pgLn       net.Listener
	http       *http.Server
	httpLn     net.Listener

	cache *dataflow.CacheBudget // the groups' memory (nil: unlimited)

	mu      sync.Mutex // guards streams, hops and DDL
	streams map[string]*stream
	hops    map[string]*sharedHop // running repartition hops by internal topic

	clock func() time.Time

	statsMu     sync.Mutex
	sourceStats map[string]*sourceStats // by source name
	dlqMu       sync.Mutex
	dlqParts    map[string]int
	letters     *dataflow.DeadLetters // each dead letter written once

	clog     *catalogLog
	replayed atomic.Bool // the catalog has been replayed (for /readyz)
	// joins collects the stages the catalog's replay started while
	// deferJoins is set: boot waits for their first assignments at once
	// (startStage).
	joinMu     sync.Mutex
	deferJoins bool
	joins      []*dataflow.Stage
	joined     []func() // run once they are joined (afterJoin)
	// ddlMu runs this node's catalog statements one at a time
	// (serialDDL); catMu guards cf, the catalog follower's position.
	ddlMu sync.Mutex
	catMu sync.Mutex
	cf    catalogFollow
	bg    context.Context // the server's background work, until Close
	bgWG  sync.WaitGroup  // background work that uses the state store
	// members is the app's membership (members.go), heartbeating until
	// membersStop; membersDone closes when it has stopped.
	members     atomic.Pointer[cluster.Membership] // set once Start has begun heartbeats; HTTP may ask before
	membersStop context.CancelFunc
	membersDone chan struct{}
	leaving     atomic.Bool // Close has begun

	brokerMu    sync.Mutex
	brokerUp    bool // Kafka answered at the last check
	brokerKnown bool
	brokerErr   error
	brokerGauge prometheus.Gauge
	// subscriptions counts open SUBSCRIBEs (COPY, bare, cursors).
	subscriptions prometheus.Gauge
	// flushRounds counts the rounds of the FLUSHes this process ran.
	flushRounds prometheus.Counter
	bgCancel    context.CancelFunc // the server's background work
	failedMu    sync.Mutex
	failed      map[string]failedObject // catalog records replay could not apply, by key
	// purging is the hop purger's memory; purgedRecords its series.
	purging       purgeState
	purgedRecords *prometheus.CounterVec
}

// DefaultAppID is the app id of a server on its embedded broker. That
// broker is the server's own, so no other deployment can share the id.
const DefaultAppID = "turbinesql"

// ErrAppIDRequired refuses a start against outside brokers without an app
// id. The id names everything an app shares through Kafka: its catalog
// topic, hop, changelog and control topics, consumer groups and
// transactional ids. Were it defaulted there, two unrelated deployments on
// one cluster would silently become one app: each would run the other's
// streams from the shared catalog, read and purge its hops, and fence its
// exactly-once transactions. A server that ran before the id was required
// had the default: the message says how to keep it.
var ErrAppIDRequired = errors.New("an app id is required with --brokers: set --app-id (or TURBINE_APP_ID, or app-id in the --config file) " +
	"to a name for this deployment, the same on each of its servers and different from any other deployment on the cluster " +
	"(two deployments with one app id share their catalog, hop and changelog topics and fence each other's exactly-once transactions); " +
	"a deployment that ran without one used the id " + DefaultAppID + ": start it with --app-id " + DefaultAppID + " to keep its streams and state")

// AppIDOf is the app id a server started with cfg runs under: cfg.AppID,
// else DefaultAppID on the embedded broker. Against outside brokers
// (cfg.Brokers) an empty one is ErrAppIDRequired. An id that cannot be
// part of a Kafka topic name is refused, naming the character.
func AppIDOf(cfg Config) (string, error) {
	id := cfg.AppID
	if id == "" {
		if len(cfg.Brokers) > 0 {
			return "", ErrAppIDRequired
		}
		id = DefaultAppID
	}
	if err := shuffle.ValidateTopicName(catalogTopic(id)); err != nil {
		return "", fmt.Errorf("app id %q cannot name the app's Kafka topics (%s, ...): %w", id, catalogTopic(id), err)
	}
	return id, nil
}

// catalogTopic is the compacted topic holding app id's catalog.
func catalogTopic(appID string) string { return streamplan.CatalogTopic(appID) }

// Start brings up every component and resumes every stream of the catalog.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	appID, err := AppIDOf(cfg)
	if err != nil {
		return nil, err
	}
	cfg.AppID = appID
	if cfg.Auth == "" {
		cfg.Auth = AuthTrust
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Server{cfg: cfg, flushFollowing: make(chan struct{}), log: cfg.Logger, reg: reg, metrics: dataflow.NewMetrics(reg), streams: map[string]*stream{}, dlqParts: map[string]int{}, clock: cfg.Clock,
		hops: map[string]*sharedHop{}, sourceStats: map[string]*sourceStats{}, failed: map[string]failedObject{},
		letters: dataflow.NewDeadLetters(), instance: rand.Uint64()>>1 + 1}
	switch mb := cfg.StateCacheMB; {
	case mb == 0:
		s.cache = dataflow.NewCacheBudget(DefaultStateCacheMB)
	case mb > 0:
		s.cache = dataflow.NewCacheBudget(mb)
	}
	if s.cache != nil {
		s.cache.HotWindowGroups = cfg.StateMaxHotGroups
	}
	pgOpts, err := s.pgwireSecurity()
	if err != nil {
		return nil, err
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if s.dirLock, err = dirlock.Acquire(cfg.DataDir); err != nil {
		return nil, err
	}
	conn := cfg.Kafka
	conn.Brokers = cfg.Brokers
	if len(conn.Brokers) == 0 {
		if conn.Secured() {
			return nil, fmt.Errorf("kafka SASL/TLS settings need --brokers: the embedded broker speaks plain text on loopback")
		}
		b, err := kafkaio.StartEmbedded(cfg.KafkaAddr, filepath.Join(cfg.DataDir, "kafka"))
		if err != nil {
			return nil, err
		}
		s.broker = b
		conn.Brokers = b.ListenAddrs()
	}
	if err := conn.Validate(); err != nil {
		return nil, err
	}
	k, err := kafkaio.New(&conn)
	if err != nil {
		return nil, err
	}
	s.kafka = k
	st, err := state.Open(filepath.Join(cfg.DataDir, "state"), s.log, state.Options{FS: cfg.stateFS, MinRunPartials: cfg.StateMinRunPartials, MaxWindowRuns: cfg.StateMaxWindowRuns, AfterIngest: cfg.AfterIngest})
	if errors.Is(err, syscall.EAGAIN) {
		// Pebble's own lock: a process that did not take ours holds it.
		return nil, fmt.Errorf("%w (%w)", &dirlock.HeldError{Dir: cfg.DataDir}, err)
	}
	if err != nil {
		return nil, err
	}
	s.store = st
	s.watermarks = &watermarkBoard{topic: s.watermarkTopic(), out: k.NewPending()}
	if s.nodeID, err = nodeID(cfg); err != nil {
		st.Close()
		return nil, err
	}
	s.clog = &catalogLog{k: k, topic: catalogTopic(cfg.AppID), node: s.nodeID}
	s.cat = catalog.New(s.clog)
	s.brokerGauge = newBrokerGauge(reg)
	s.subscriptions = newSubscriptionsGauge(reg)
	s.flushRounds = newFlushRounds(reg)
	s.purgedRecords = purge.NewPurgedCounter(reg)
	bg, cancel := context.WithCancel(context.Background())
	s.bg, s.bgCancel = bg, cancel
	// HTTP first: /healthz answers and /readyz says "restoring" while the
	// catalog is replayed and streams restore their state.
	if cfg.HTTPAddr != "" {
		if s.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("http listen on %s: %w (pass --http-addr)", cfg.HTTPAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", s.healthz)
		mux.HandleFunc("/readyz", s.readyz)
		mux.Handle("/", console.Handler(startConsole(bg, s)))
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = s.http.Serve(s.httpLn) }()
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	pingErr := k.Ping(pctx)
	pcancel()
	if pingErr != nil && k.Dial(ctx) == nil {
		// Reached, and refused (credentials, TLS): a configuration to fix,
		// not an outage to wait out.
		return nil, pingErr
	}
	s.setBrokerUp(pingErr == nil, pingErr)
	if pingErr == nil {
		if err := s.boot(ctx); err != nil {
			return nil, err
		}
	} else {
		// Start anyway: the catalog is read once Kafka answers.
		go s.bootWhenReachable(bg)
	}
	go s.watchBroker(bg)
	go s.followWatermarks(bg)
	go s.followFlushes(bg)

	s.pg = pgwire.NewServer(&backend{srv: s}, append(pgOpts, pgwire.WithLogger(s.log), pgwire.WithMessageTimeout(cfg.MessageTimeout))...)
	if s.pgLn, err = net.Listen("tcp", cfg.PGAddr); err != nil {
		return nil, fmt.Errorf("pgwire listen on %s: %w (pass --pg-addr)", cfg.PGAddr, err)
	}
	s.warnIfExposed(s.pgLn)
	// Heartbeats name the pgwire address, and SHOW CLUSTER reads them.
	if err := s.startMembership(); err != nil {
		return nil, err
	}
	go func() { _ = s.pg.Serve(s.pgLn) }()
	owner := []string{"pgwire", s.pgLn.Addr().String()}
	if s.httpLn != nil {
		owner = append(owner, "http", s.httpLn.Addr().String())
	}
	owner = append(owner, "kafka", strings.Join(conn.Brokers, ","))
	if err := s.dirLock.Describe(owner...); err != nil {
		s.log.Warn("cannot write the data dir's owner file", "err", err)
	}
	ok = true
	return s, nil
}

// boot reads the catalog from Kafka and starts every stream of it.
func (s *Server) boot(ctx context.Context) error {
	if err := s.clog.ensure(ctx); err != nil {
		return err
	}
	if err := s.kafka.EnsureCompacted(ctx, s.watermarkTopic(), 1); err != nil {
		return err
	}
	if _, err := s.kafka.EnsureTopic(ctx, s.flushTopic(), 1, flushTopicConfig); err != nil {
		return err
	}
	s.joinMu.Lock()
	s.deferJoins = true
	s.joinMu.Unlock()
	_, ends, err := s.replayCatalog(ctx, s.clog)
	s.awaitJoins(ctx)
	if err != nil {
		return err
	}
	// Followed from where the replay ended: DDL of the other nodes
	// applies here from now on. bootstrapUser's record comes back
	// through it, as this node's own, already applied.
	s.startFollowingCatalog(s.bg, ends)
	if err := s.bootstrapUser(); err != nil {
		return err
	}
	s.replayed.Store(true)
	s.startPurging()
	return nil
}

// PGAddr is the address pgwire listens on.
func (s *Server) PGAddr() string { return s.pgLn.Addr().String() }

// HTTPAddr is the address of /metrics ("" when disabled).
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// KafkaAddrs are the brokers in use.
func (s *Server) KafkaAddrs() []string { return s.kafka.Brokers() }

// Embedded reports whether the in-process broker runs.
func (s *Server) Embedded() bool { return s.broker != nil }

// Close stops accepting clients, lets every stream finish its batch and
// persist, then closes state and Kafka.
func (s *Server) Close() {
	s.leaveCluster()
	if s.bgCancel != nil {
		s.bgCancel()
	}
	// The catalog follower may be applying a record: let it finish
	// before the streams and the store close under it.
	s.bgWG.Wait()
	if s.pg != nil {
		_ = s.pg.Close()
	}
	if s.http != nil {
		_ = s.http.Close()
	}
	s.mu.Lock()
	s.stopAll()
	s.mu.Unlock()
	if s.store != nil {
		if err := s.store.Close(); err != nil {
			s.log.Error("close state store", "err", err)
		}
	}
	if s.kafka != nil {
		s.kafka.Close()
	}
	if s.broker != nil {
		s.broker.Close()
	}
	s.dirLock.Release()
}

// seedDeadLetters records which records of src its dead-letter topic
// already holds, so no stage writes them again after a restart.
func (s *Server) seedDeadLetters(ctx context.Context, src *catalog.Source) {
	if src.OnError != streamplan.OnErrorDLQ {
		return
	}
	err := s.kafka.ReadTail(ctx, src.DLQTopic, nil, dataflow.DeadLettersKept, func(r *kafkaio.Record) error {
		var name, topic, part, off string
		for _, h := range r.Headers {
			switch h.Key {
			case "turbine.source":
				name = string(h.Value)
			case "turbine.source.topic":
				topic = string(h.Value)
			case "turbine.source.partition":
				part = string(h.Value)
			case "turbine.source.offset":
				off = string(h.Value)
			}
		}
		p, err1 := strconv.ParseInt(part, 10, 32)
		o, err2 := strconv.ParseInt(off, 10, 64)
		// A dead letter written with a hop topic's position (as a
		// repartition stream did before it named the source's) names no
		// record of the source: claiming its position would refuse one.
		if name == src.Name && topic == src.Topic && err1 == nil && err2 == nil {
			s.letters.Seen(dataflow.Letters{Source: src.Name, Topic: src.DLQTopic}, int32(p), o)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("cannot read the dead-letter topic: records dead-lettered before may be written again", "topic", src.DLQTopic, "err", err)
	}
}

// dlqPartitions caches the partition count of a dead-letter topic.
func (s *Server) dlqPartitions(ctx context.Context, topic string) int {
	s.dlqMu.Lock()
	defer s.dlqMu.Unlock()
	if n, ok := s.dlqParts[topic]; ok {
		return n
	}
	n, err := s.kafka.EnsureTopic(ctx, topic, 1, nil)
	if err != nil || n == 0 {
		return 1
	}
	s.dlqParts[topic] = n
	return n
}
