package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
)

// The topics of a stream: what CREATE STREAM makes (and takes back when
// the stream cannot start), where the stream's output begins in its topic,
// and what DROP STREAM ... DELETE TOPIC deletes.

// topicTaken refuses a stream whose output topic is the topic of a source
// or of another stream: its readers would see the other's records as its
// own, and a DROP ... DELETE TOPIC of one would delete the other's.
func (s *Server) topicTaken(def *catalog.Stream) error {
	for _, src := range s.cat.Sources() {
		if src.Topic == def.Topic {
			return sql.Errorf(sql.CodeObjectInUse, "topic %q is the topic of source %s: stream %s cannot write to it", def.Topic, src.Name, def.Name).
				WithHint("set topic = '...' to another topic")
		}
	}
	for _, other := range s.cat.Streams() {
		if other.Topic == def.Topic && other.Name != def.Name {
			return sql.Errorf(sql.CodeObjectInUse, "topic %q is the output topic of stream %s: stream %s cannot write to it too", def.Topic, other.Name, def.Name).
				WithHint("set topic = '...' to another topic")
		}
	}
	return nil
}

// makeStreamTopics creates the topics a checked stream writes that do not
// exist: its output topic, its late-data topic, a combine's internal topic,
// and a repartition hop's when no stream runs it yet (its stage's
// changelog comes with the stage). It returns the topics it created, also
// on error, so that a statement that fails takes them back (deleteMade).
func (s *Server) makeStreamTopics(ctx context.Context, def *catalog.Stream, p *planner.Plan, spec streamSpec) (made []string, err error) {
	ensure := func(topic string, n int, configs map[string]*string) error {
		had, err := s.kafka.Partitions(ctx, topic)
		if err != nil {
			return err
		}
		if had > 0 {
			return nil
		}
		if _, err := s.kafka.EnsureTopic(ctx, topic, n, configs); err != nil {
			return err
		}
		made = append(made, topic)
		return nil
	}
	if err := ensure(def.Topic, spec.outN, nil); err != nil {
		return made, err
	}
	if late := def.Options.LateDataTopic; late != "" {
		if err := ensure(late, 1, s.sizedLike(ctx, p.Input.Topic)); err != nil {
			return made, err
		}
	}
	switch p.Strategy {
	case streamplan.StrategyCombine:
		if err := ensure(combineTopic(s.cfg.AppID, p.Input.Topic, def.Name), spec.nCmb, nil); err != nil {
			return made, err
		}
	case streamplan.StrategyRepartition:
		if topic := s.hopTopic(def, p); s.hops[topic] == nil {
			if err := ensure(topic, spec.nRep, s.sizedLike(ctx, p.Input.Topic)); err != nil {
				return made, err
			}
		}
	}
	return made, nil
}

// deleteMade deletes the topics a statement that failed created (with a
// repartition hop's consumer group and changelog: its stage may have
// started). Best effort: a topic left behind is logged with the reason.
func (s *Server) deleteMade(made []string) {
	if len(made) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics := append([]string(nil), made...)
	for _, t := range made {
		if s.isHopTopic(t) {
			if err := s.kafka.DeleteGroups(ctx, t); err != nil {
				s.log.Warn("cannot delete the consumer group of a repartition hop a failed statement started", "hop", t, "err", err)
			}
			topics = append(topics, changelogTopic(t))
		}
	}
	if err := s.kafka.DeleteTopics(ctx, topics...); err != nil {
		s.log.Warn("cannot delete the topics a failed CREATE STREAM created", "topics", topics, "err", err)
	}
}

// isHopTopic reports whether topic names a repartition hop of this app.
func (s *Server) isHopTopic(topic string) bool {
	return streamplan.IsRepartitionTopic(s.cfg.AppID, "", topic)
}

// outputStart is where a new stream's output begins in its topic (the
// catalog record keeps it: catalog.Stream.Start): nil for a topic this
// statement created (made), else the topic's log end offsets now, with a
// NOTICE naming the topic when records are there already.
//
// The log end (high watermark) and not the last stable offset, which a
// read_committed reader stops at: records of a transaction still open now
// (an earlier writer's, which a restart of it would abort, or a commit
// could still make visible) lie below the log end and are not this
// stream's, whatever becomes of them; this stream's first record lands at
// or after it. A transaction marker written later, past it, is no record.
// The caller has made sure no stream of ours writes the topic meanwhile
// (its earlier stream's groups are gone, and no other stream may write
// to it: topicTaken).
func (s *Server) outputStart(ctx context.Context, def *catalog.Stream, made []string) (catalog.Offsets, *pgwire.Notice, error) {
	for _, t := range made {
		if t == def.Topic {
			return nil, nil, nil
		}
	}
	ends, err := s.kafka.LogEnds(ctx, def.Topic)
	if err != nil {
		return nil, nil, fmt.Errorf("output start of stream %s: %w", def.Name, err)
	}
	starts, err := s.kafka.StartOffsets(ctx, def.Topic)
	if err != nil {
		return nil, nil, fmt.Errorf("output start of stream %s: %w", def.Name, err)
	}
	start := catalog.Offsets(ends)
	if start.Zero() {
		return nil, nil, nil
	}
	var held int64
	for p, end := range ends {
		held += max(end-starts[p], 0)
	}
	if held == 0 {
		// Offsets past records deleted since (retention): nothing to
		// hide, but the start still stands.
		return start, nil, nil
	}
	return start, &pgwire.Notice{
		Message: fmt.Sprintf("topic %q already holds %d records: stream %s reads back only what it writes from now on", def.Topic, held, def.Name),
		Detail:  fmt.Sprintf("SELECT, SUBSCRIBE and streams reading %s start at offsets %s (partition:offset) of %q; the records before stay in the topic for its other consumers", def.Name, start, def.Topic),
		Hint:    "DROP STREAM ... DELETE TOPIC deletes a stream's topic with it",
	}, nil
}

// recordedStream is the catalog log's record of stream name; ok is false
// when the server has no catalog log (then nothing is recorded).
func (s *Server) recordedStream(name string) (e catalog.Entry, ok bool) {
	s.catMu.Lock()
	defer s.catMu.Unlock()
	if s.cf.ledger == nil {
		return catalog.Entry{}, false
	}
	e, _ = s.cf.ledger.Get(catalog.KindStream, name)
	return e, true
}

// recordedStart is the output start the catalog log records for stream
// name (a stream another node created, or one replayed at start).
func (s *Server) recordedStart(name string) catalog.Offsets {
	e, _ := s.recordedStream(name)
	return e.Start
}

// recordedKeyedPanes reports whether the catalog record of stream name
// says its panes are keyed by their group key (catalog.Stream.KeyedPanes).
// Without a ledger (no catalog log) every stream is this release's.
func (s *Server) recordedKeyedPanes(name string) bool {
	e, ok := s.recordedStream(name)
	return !ok || e.KeyedPanes
}

// dropTopicsRefusal says why DROP STREAM ... DELETE TOPIC of def cannot
// delete its output topic: a source or another stream has the same topic
// (possible in a catalog written before topicTaken refused it).
func (s *Server) dropTopicsRefusal(def *catalog.Stream) error {
	var others []string
	for _, src := range s.cat.Sources() {
		if src.Topic == def.Topic {
			others = append(others, "source "+src.Name)
		}
	}
	for _, st := range s.cat.Streams() {
		if st.Topic == def.Topic && st.Name != def.Name {
			others = append(others, "stream "+st.Name)
		}
	}
	if len(others) == 0 {
		return nil
	}
	sort.Strings(others)
	return sql.Errorf(sql.CodeObjectInUse, "cannot delete topic %q of stream %s: it is also the topic of %s", def.Topic, def.Name, strings.Join(others, ", ")).
		WithHint("DROP STREAM %s without DELETE TOPIC keeps the topic", def.Name)
}

// streamTopics are the topics DROP STREAM ... DELETE TOPIC deletes besides
// the changelogs dropStreamGroups deletes: the output topic, a combine's
// internal topic, and a repartition hop's when no other stream reads that
// generation (with its consumer group and changelog, in hopGroups). p may
// be nil (a stream that could not be planned): the combine topic is then
// named from its input relation, and a hop is kept.
func (s *Server) streamTopics(def *catalog.Stream, p *planner.Plan) (topics, hopGroups []string) {
	topics = []string{def.Topic}
	inputTopic := ""
	if p != nil && p.Input != nil {
		inputTopic = p.Input.Topic
	} else if rel, ok := s.cat.Relation(def.Input); ok {
		inputTopic = rel.Topic
	}
	if inputTopic != "" && (p == nil || p.Strategy == streamplan.StrategyCombine) {
		// Deleting one that does not exist is no error.
		topics = append(topics, combineTopic(s.cfg.AppID, inputTopic, def.Name))
	}
	if p != nil && p.Strategy == streamplan.StrategyRepartition {
		hop := s.hopTopic(def, p)
		if len(s.hopReaders(hop, def.Name)) == 0 {
			topics = append(topics, hop, changelogTopic(hop))
			hopGroups = append(hopGroups, hop)
		}
	}
	return topics, hopGroups
}

// hopReaders are the streams other than name that read repartition topic
// hop, or might (a stream that could not be planned, over the same input:
// its plan is not known).
func (s *Server) hopReaders(hop, name string) []string {
	var out []string
	for other, r := range s.streams {
		if other == name {
			continue
		}
		switch {
		case r.plan == nil:
			if rel, ok := s.cat.Relation(r.def.Input); ok && streamplan.IsRepartitionTopic(s.cfg.AppID, rel.Topic, hop) {
				out = append(out, other)
			}
		case r.plan.Strategy == streamplan.StrategyRepartition && s.hopTopic(r.def, r.plan) == hop:
			out = append(out, other)
		}
	}
	sort.Strings(out)
	return out
}

// deleteStreamTopics deletes the topics of a dropped stream (DROP STREAM
// ... DELETE TOPIC) once no process runs it: the DROP's record stops it on
// every node, and a topic deleted under a stage still writing to it would
// fail that stage. It waits for the stream's consumer groups to empty
// (whenGroupsEmpty) and deletes them, the changelogs, then the topics.
// What it could not delete is returned as a WARNING.
func (s *Server) deleteStreamTopics(ctx context.Context, def *catalog.Stream, p *planner.Plan) []pgwire.Notice {
	topics, hopGroups := s.streamTopics(def, p)
	warn := func(err error) []pgwire.Notice {
		s.log.Warn("DROP STREAM ... DELETE TOPIC: topics not deleted", "stream", def.Name, "topics", topics, "err", err)
		return []pgwire.Notice{{Severity: "WARNING", Message: fmt.Sprintf("stream %s dropped, but its topics were not deleted: %v", def.Name, err),
			Detail: "topics: " + strings.Join(topics, ", "), Hint: "delete them with your Kafka tools (kafka-topics --delete) once no server of the app runs the stream"}}
	}
	if err := s.whenGroupsEmpty(ctx, func() error { return s.dropStreamGroups(ctx, def.Name, p) }); err != nil {
		return warn(err)
	}
	if len(hopGroups) > 0 {
		if err := s.whenGroupsEmpty(ctx, func() error { return s.kafka.DeleteGroups(ctx, hopGroups...) }); err != nil {
			return warn(err)
		}
	}
	if err := s.kafka.DeleteTopics(ctx, topics...); err != nil {
		return warn(err)
	}
	s.log.Info("stream's topics deleted", "stream", def.Name, "topics", topics)
	return []pgwire.Notice{{Message: fmt.Sprintf("deleted topics %s", strings.Join(topics, ", "))}}
}

// whenGroupsEmpty runs del (a deletion of consumer groups) until no group
// it deletes has members, for at most oldGroupsWait: other nodes leave a
// dropped stream's groups as they follow the DROP, within milliseconds.
func (s *Server) whenGroupsEmpty(ctx context.Context, del func() error) error {
	deadline := time.Now().Add(oldGroupsWait)
	for {
		err := del()
		if err == nil || !kafkaio.IsGroupNotEmpty(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
