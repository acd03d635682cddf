package server

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/cluster"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/purge"
	"github.com/turbinesql/turbinesql/streamplan"
)

// Consumed records of the hop topics are purged (package purge) to the
// committed offsets of their readers:
//
//   - a combine topic has one reader, the stream's merge stage (the
//     stream's consumer group);
//   - a repartition topic is shared by the streams of one (topic, column),
//     and a stream created later reads it from offset 0 to get the
//     source's history. So the hop has generations (streamplan.HopGeneration):
//     before its first deletion on a generation the purger writes a seal
//     record for it to the catalog log, and purges only once its own
//     follower has applied that seal. Every node judges the log in the
//     same order (catalog.Ledger): a CREATE STREAM whose record names the
//     generation stands only before the seal, and a later one names the
//     next generation, whose own hop reads the source from its start. The
//     readers of a sealed generation are thus the live streams whose
//     records name it, a set that can only shrink, and the purger has
//     all of them in its ledger when it computes the purge point.
//
// A seal is written only while every member of the app advertises that
// it knows seals (cluster.Member.HopSeals): a node of the previous release
// would run a new stream behind the first generation whatever the log
// says.

// DefaultPurgeInterval is how often consumed hop records are purged.
const DefaultPurgeInterval = 30 * time.Second

// DefaultSealAfterRecords is how many consumed records a repartition
// topic generation holds before it is sealed for purging. Sealing has a
// cost: a stream created after it cannot share the running hop and gets a
// new generation, whose hop reads the whole source again. Waiting for a
// backlog worth deleting (the hop's watermark markers alone make records
// every commit) keeps streams created close together on one hop, and
// bounds the topic all the same.
const DefaultSealAfterRecords = 1_000_000

func (s *Server) sealAfter() int64 {
	if s.cfg.PurgeSealRecords > 0 {
		return s.cfg.PurgeSealRecords
	}
	return DefaultSealAfterRecords
}

// purgeState is what the purger remembers between rounds.
type purgeState struct {
	mu      sync.Mutex
	sealed  map[string]bool // seals this process has written
	retired map[string]bool // generations whose topics this process deleted
}

func (s *Server) purgeInterval() time.Duration {
	if s.cfg.PurgeInterval == 0 {
		return DefaultPurgeInterval
	}
	return s.cfg.PurgeInterval
}

// newPurger is this server's purger of hop topics.
func (s *Server) newPurger() *purge.Purger {
	return &purge.Purger{Kafka: s.kafka, Targets: s.purgeTargets, Purged: s.purgedRecords, Log: s.log}
}

// startPurging runs the purger every --purge-interval until Close
// (a negative interval: never).
func (s *Server) startPurging() {
	every := s.purgeInterval()
	if every < 0 {
		return
	}
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		p := s.newPurger()
		for {
			select {
			case <-s.bg.Done():
				return
			case <-t.C:
			}
			p.Round(s.bg)
			s.retireGenerations(s.bg)
		}
	}()
}

// hopView is who reads which hop topic, as this node knows it.
type hopView struct {
	combine []purge.Target
	// gens are the readers (consumer groups) of each repartition topic
	// generation with a live stream.
	gens map[string][]string
	// sealed holds every sealed generation, read in the same look at the
	// ledger as the streams: a generation sealed then has every stream
	// created before its seal among them.
	sealed map[string]bool
	// running: the hop topics whose hop runs on this node.
	running map[string]bool
	// unknown: a stream of the catalog this node has not planned (it
	// failed to start here), recorded before hops had generations, so
	// which repartition topic it reads is not known here.
	unknown bool
}

func (s *Server) hopView() hopView {
	// What runs here: each stream's plan (nil: it failed before it was
	// planned).
	type local struct {
		plan *planner.Plan
		hop  string
	}
	v := hopView{gens: map[string][]string{}, sealed: map[string]bool{}, running: map[string]bool{}}
	s.mu.Lock()
	runningStreams := map[string]local{}
	for name, r := range s.streams {
		l := local{plan: r.plan}
		if r.plan != nil && r.plan.Strategy == streamplan.StrategyRepartition {
			l.hop = s.hopTopic(r.def, r.plan)
		}
		runningStreams[name] = l
	}
	for t := range s.hops {
		v.running[t] = true
	}
	s.mu.Unlock()

	s.catMu.Lock()
	var streams []catalog.Entry
	if l := s.cf.ledger; l != nil {
		streams = l.Streams()
		for _, t := range l.SealedTopics() {
			v.sealed[t] = true
		}
	}
	s.catMu.Unlock()

	for _, e := range streams {
		l, ok := runningStreams[e.Name]
		switch {
		case e.Hop != "":
			v.gens[e.Hop] = append(v.gens[e.Hop], s.groupName(e.Name))
		case !ok || l.plan == nil:
			v.unknown = true
		case l.plan.Strategy == streamplan.StrategyCombine:
			v.combine = append(v.combine, purge.Target{Topic: combineTopic(s.cfg.AppID, l.plan.Input.Topic, e.Name), Readers: []string{s.groupName(e.Name)}})
		case l.hop != "":
			// Recorded before hops had generations: it reads the first.
			v.gens[l.hop] = append(v.gens[l.hop], s.groupName(e.Name))
		}
	}
	return v
}

// purgeTargets lists the hop topics to purge, with their readers.
func (s *Server) purgeTargets() []purge.Target {
	v := s.hopView()
	out := v.combine
	if v.unknown {
		// Its group would be missing from the minimum: purge no
		// repartition topic until every stream is known here.
		s.log.Debug("not purging repartition topics this round: a stream of the catalog is not planned on this node")
		return out
	}
	topics := make([]string, 0, len(v.gens))
	for t := range v.gens {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		tg := purge.Target{Topic: t, Readers: v.gens[t]}
		if !v.sealed[t] {
			// Not sealed when the readers were listed: seal it, and purge
			// in a round that lists them after the seal.
			tg.Ready = func(ctx context.Context, purgeable int64) (bool, error) {
				if purgeable < s.sealAfter() {
					return false, nil
				}
				return false, s.sealHop(ctx, t)
			}
		}
		out = append(out, tg)
	}
	return out
}

// retireGenerations deletes the topic, consumer group and changelog of
// each sealed repartition generation that no stream reads any more: none
// can read it again (a CREATE naming it loses), so nothing of it is
// needed. A generation whose hop still runs somewhere (here, or its
// group still has members) is left for a later round.
func (s *Server) retireGenerations(ctx context.Context) {
	v := s.hopView()
	if v.unknown {
		return
	}
	for t := range v.sealed {
		if len(v.gens[t]) > 0 || v.running[t] {
			continue
		}
		s.purging.mu.Lock()
		done := s.purging.retired[t]
		s.purging.mu.Unlock()
		if done {
			continue
		}
		if err := s.kafka.DeleteGroups(ctx, t); err != nil {
			if !kafkaio.IsGroupNotEmpty(err) {
				s.log.Warn("cannot delete the consumer group of a retired repartition generation; retrying next round", "topic", t, "err", err)
			}
			continue
		}
		if err := s.kafka.DeleteTopics(ctx, t, changelogTopic(t)); err != nil {
			s.log.Warn("cannot delete the topics of a retired repartition generation; retrying next round", "topic", t, "err", err)
			continue
		}
		s.purging.mu.Lock()
		if s.purging.retired == nil {
			s.purging.retired = map[string]bool{}
		}
		s.purging.retired[t] = true
		s.purging.mu.Unlock()
		s.log.Info("repartition generation retired: sealed, and no stream reads it; its topic, consumer group and changelog are deleted", "topic", t)
	}
}

// sealHop writes the seal of a repartition topic generation to the
// catalog log, once per process, and only while every member knows seals.
func (s *Server) sealHop(ctx context.Context, topic string) error {
	m := s.members.Load()
	if m == nil {
		return nil
	}
	// The control topic has one partition: once this process's own
	// heartbeat has come back, every heartbeat written before it has been
	// read, so a live member of an older release is in the list.
	members := m.Members()
	if !slices.ContainsFunc(members, func(mem cluster.Member) bool { return mem.Node == s.nodeID }) {
		return nil
	}
	for _, mem := range members {
		if !mem.HopSeals {
			s.log.Debug("not sealing a repartition topic for purging: a member runs a binary that does not know seals", "topic", topic, "member", mem.Node)
			return nil
		}
	}
	s.purging.mu.Lock()
	defer s.purging.mu.Unlock()
	if s.purging.sealed[topic] {
		return nil // written; the follower has not applied it yet
	}
	off, err := s.clog.write(ctx, catalog.Change{Kind: catalog.KindHop, Name: topic, SQL: topic, Op: catalog.OpSeal}, newStmtID(), "")
	if err != nil {
		return err
	}
	if s.purging.sealed == nil {
		s.purging.sealed = map[string]bool{}
	}
	s.purging.sealed[topic] = true
	s.log.Info("repartition topic sealed for purging: streams created from now on read the hop's next generation", "topic", topic, "catalog_offset", off)
	return nil
}
