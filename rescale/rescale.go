// Package rescale is `turbinesql rescale`: the offline migration of a
// stopped app's keyed state from one partition count N to a larger M
// (seed: kafka-and-partitioning, "Rescaling a topic"). Each keyed
// stateful stream keeps its state per input partition, partition p of N
// owning the key groups g with g mod N = p. Under M the owner of g is
// g mod M, so every group whose owner changes is moved, whole, in the
// stream's changelog: its records are written again into partition
// g mod M (keys rewritten to that partition's scope), then deleted where
// they were with tombstones. On an N that does not divide 960 a partition
// holds keys of every group (each where murmur2 placed it under N), so
// keys move one by one instead, each to its group mod M: the partition
// murmur2 gives it under M. Each partition's position and placement
// state are written for M. Local data dirs are not edited: the
// partitions' state there is dropped, so each node rebuilds it from the
// changelog when it next opens a partition (see dropLocal for why).
//
// It talks to Kafka only through package kafkaio, and reads the app's
// catalog topic for the streams, their inputs and their guarantees.
package rescale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/turbinesql/turbinesql/internal/dirlock"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
)

// Kafka is what a rescale asks of the cluster (a *kafkaio.Client).
type Kafka interface {
	Partitions(ctx context.Context, topic string) (int, error)
	ReadPartition(ctx context.Context, topic string, p int32, from int64, fn func(*kafkaio.Record) error) (int64, error)
	EnsureCompacted(ctx context.Context, topic string, n int) error
	CreatePartitions(ctx context.Context, topic string, total int) error
	GroupAssignment(ctx context.Context, group, topic string) (kafkaio.Assignment, error)
	ProduceSync(ctx context.Context, recs []*kafkaio.Record) error
	TopicNames(ctx context.Context) ([]string, error)
}

// Options say what to rescale.
type Options struct {
	AppID string
	To    int // the target partition count M
	// DataDirs are the nodes' data dirs (serve --data-dir), each of which
	// gets its copy of the rescaled partitions dropped.
	DataDirs []string
	// Streams limits the rescale to these streams (empty: every keyed
	// stateful stream of the app).
	Streams []string
	Out     io.Writer
	// Interrupt, when set, is asked after each phase of each stream
	// (copied, tombstoned, ...) and stops the run with ErrInterrupted
	// when it says so: how tests kill it midway at a known point.
	Interrupt func(stream, phase string) bool
}

// ErrInterrupted is what a run stopped by Options.Interrupt returns.
var ErrInterrupted = errors.New("rescale interrupted")

// RefusedError is a rescale that would lose or corrupt state: nothing has
// been written when it is returned.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "rescale refused: " + e.Reason }

func refuse(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// Summary is what a run did.
type Summary struct {
	Streams []StreamSummary
	Elapsed time.Duration
}

// StreamSummary is what a run did to one stream.
type StreamSummary struct {
	Name     string
	From, To int
	Skipped  string // why nothing was done (empty: rescaled)
	// Groups moved, records written (copies, tombstones, positions) and
	// their bytes (keys and values). On a count that does not divide 960
	// keys move one by one: Keys is how many moved, Groups how many key
	// groups they are of.
	Groups, Records int
	Keys            int
	Bytes           int64
}

// markerName is the task value, in partition 0's scope, that says a
// rescale of the stream is under way: "N M phase". A run that finds it
// resumes that rescale (same N and M) where it stood.
const markerName = "rescale"

const (
	phaseCopying = "copying" // copies may be partly written
	phaseCopied  = "copied"  // every copy is written: tombstones next
)

// stream is one stream of the catalog.
type stream struct {
	name, input, inputTopic string
	eos                     bool
	// hop: the stream reads its input through a repartition or combine
	// hop (its plan says so, or its GROUP BY lacks the source's partition
	// key), so its last stage's state is keyed by the hop's topic, which
	// keeps its count when the source grows.
	hop bool
}

// changelogTopic and groupName are the server's names of a stream's
// final stage (streamplan.TopicName).
func changelogTopic(app, stream string) string {
	return streamplan.ChangelogTopic(groupName(app, stream))
}
func groupName(app, stream string) string { return streamplan.StageGroup(app, stream) }

// Run rescales the app's keyed stateful streams to opts.To partitions.
func Run(ctx context.Context, k Kafka, opts Options) (Summary, error) {
	start := time.Now()
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	var sum Summary
	m := opts.To
	if !state.Divides(m) {
		below, above := state.NearestValid(m)
		return sum, refuse("--to %d does not divide 960: key groups have no single owner on that count (closest valid counts: %d and %d)", m, below, above)
	}
	// Hold every data dir as a server would, so none starts meanwhile.
	for _, dir := range opts.DataDirs {
		l, err := dirlock.Acquire(dir)
		if err != nil {
			var held *dirlock.HeldError
			if errors.As(err, &held) {
				return sum, refuse("%v", err)
			}
			return sum, err
		}
		defer l.Release()
	}
	streams, err := readCatalog(ctx, k, opts.AppID)
	if err != nil {
		return sum, err
	}
	if len(opts.Streams) > 0 {
		var chosen []stream
		for _, name := range opts.Streams {
			i := slices.IndexFunc(streams, func(s stream) bool { return s.name == name })
			if i < 0 {
				return sum, refuse("app %s has no stream %q", opts.AppID, name)
			}
			chosen = append(chosen, streams[i])
		}
		streams = chosen
	}
	// The app must be stopped: a live member would write the state being
	// moved. Every stream's group is asked, not only those rescaled.
	for _, s := range streams {
		a, err := k.GroupAssignment(ctx, groupName(opts.AppID, s.name), s.inputTopic)
		if err != nil {
			return sum, err
		}
		if len(a.Members) > 0 {
			return sum, refuse("stream %s is running: consumer group %s has live members %s; run ALTER STREAM %s STOP (or stop every server of app %s) first",
				s.name, groupName(opts.AppID, s.name), strings.Join(a.Members, ", "), s.name, opts.AppID)
		}
	}
	// Every check of every stream first: a refusal writes nothing.
	var plans []*plan
	for _, s := range streams {
		p, err := prepare(ctx, k, opts.AppID, s, m)
		if err != nil {
			return sum, err
		}
		if p.skip != "" {
			fmt.Fprintf(out, "stream %s: %s\n", s.name, p.skip)
			sum.Streams = append(sum.Streams, StreamSummary{Name: s.name, From: p.n, To: m, Skipped: p.skip})
			continue
		}
		plans = append(plans, p)
	}
	for _, p := range plans {
		ss, err := p.run(ctx, k, opts, out)
		sum.Streams = append(sum.Streams, ss)
		if err != nil {
			return sum, fmt.Errorf("stream %s: %w", p.s.name, err)
		}
	}
	sum.Elapsed = time.Since(start)
	for _, ss := range sum.Streams {
		switch {
		case ss.Skipped != "":
		case !state.Divides(ss.From):
			fmt.Fprintf(out, "rescaled %s from %d to %d partitions: %d keys of %d key groups moved one by one (%d does not divide 960), %d records (%s) written\n",
				ss.Name, ss.From, ss.To, ss.Keys, ss.Groups, ss.From, ss.Records, byteCount(ss.Bytes))
		default:
			fmt.Fprintf(out, "rescaled %s from %d to %d partitions: %d key groups moved, %d records (%s) written\n",
				ss.Name, ss.From, ss.To, ss.Groups, ss.Records, byteCount(ss.Bytes))
		}
	}
	fmt.Fprintf(out, "done in %.1fs\n", sum.Elapsed.Seconds())
	return sum, nil
}

// readCatalog lists the app's streams from its catalog topic (the last
// record of each key is the object's state).
// knownApps names the app ids whose catalog topics the cluster has, for
// the refusal of an app id it does not have.
func knownApps(ctx context.Context, k Kafka) string {
	topics, err := k.TopicNames(ctx)
	if err != nil {
		return ""
	}
	var apps []string
	for _, t := range topics {
		if app, ok := streamplan.CatalogApp(t); ok {
			apps = append(apps, app)
		}
	}
	if len(apps) == 0 {
		return " (this cluster has no TurbineSQL app yet)"
	}
	return " (apps on this cluster: " + strings.Join(apps, ", ") + ")"
}

func readCatalog(ctx context.Context, k Kafka, app string) ([]stream, error) {
	topic := streamplan.CatalogTopic(app)
	n, err := k.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, refuse("app %s has no catalog topic %s: is the app id right?%s", app, topic, knownApps(ctx, k))
	}
	type entry struct {
		sql, reads, planned string
		off                 int64
	}
	live := map[string]entry{}
	if _, err := k.ReadPartition(ctx, topic, 0, 0, func(r *kafkaio.Record) error {
		if r.Value == nil {
			delete(live, string(r.Key))
			return nil
		}
		e := entry{sql: string(r.Value), off: r.Offset}
		for _, h := range r.Headers {
			switch h.Key {
			case "turbine.reads":
				e.reads = string(h.Value)
			case "turbine.planned":
				e.planned = string(h.Value)
			}
		}
		live[string(r.Key)] = e
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read catalog %s: %w", topic, err)
	}
	var out []stream
	for key, e := range live {
		name, ok := strings.CutPrefix(key, "stream/")
		if !ok {
			continue
		}
		stmt, err := sql.Parse(e.sql)
		if err != nil {
			return nil, fmt.Errorf("catalog entry of stream %s: %w", name, err)
		}
		cs, ok := stmt.(*sql.CreateStream)
		if !ok {
			return nil, fmt.Errorf("catalog entry of stream %s is not a CREATE STREAM", name)
		}
		s := stream{name: name, input: e.reads, eos: strings.EqualFold(cs.Options.String("processing_guarantee", ""), "exactly_once")}
		s.inputTopic = e.reads
		strategy := strings.ToLower(cs.Options.String("strategy", e.planned))
		s.hop = strategy == "repartition" || strategy == "combine"
		if src, ok := live["source/"+e.reads]; ok {
			if stmt, err := sql.Parse(src.sql); err == nil {
				if ss, ok := stmt.(*sql.CreateSource); ok {
					s.inputTopic = ss.Options.String("topic", ss.Name)
					if pk := ss.Options.String("partition_key", ""); pk == "" || !groupsBy(cs, pk) {
						s.hop = true
					}
				}
			}
		} else if up, ok := live["stream/"+e.reads]; ok {
			// A stream reading a stream reads its output topic.
			if stmt, err := sql.Parse(up.sql); err == nil {
				if cs, ok := stmt.(*sql.CreateStream); ok {
					s.inputTopic = cs.Options.String("topic", cs.Name)
				}
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b stream) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// plan is one stream's rescale, checked.
type plan struct {
	s         stream
	changelog string
	n, m      int
	parts     int // the changelog's partition count now
	// state[p] is partition p's state as its changelog holds it (key ->
	// changelog value).
	state  []map[string][]byte
	marker string // the phase of an interrupted run ("" none)
	skip   string
	// perKey: N does not divide 960, so each partition holds keys of
	// every key group and keys move one by one, each to its group mod M
	// (the partition murmur2 gives it under M, M dividing 960), instead
	// of whole groups.
	perKey bool
}

// prepare reads a stream's changelog and checks it can be rescaled to m.
func prepare(ctx context.Context, k Kafka, app string, s stream, m int) (*plan, error) {
	p := &plan{s: s, changelog: changelogTopic(app, s.name), m: m}
	parts, err := k.Partitions(ctx, p.changelog)
	if err != nil {
		return nil, err
	}
	if parts == 0 {
		p.skip = "no changelog (never ran): nothing to move"
		return p, nil
	}
	p.parts = parts
	p.state = make([]map[string][]byte, parts)
	keyed, placed := false, false
	var counts []int
	// unkeyed lists the partitions with keyed state not known to be keyed
	// by key groups of 960 (state.KeyGroupsKey).
	var unkeyed []int32
	for part := range int32(parts) {
		st := map[string][]byte{}
		p.state[part] = st
		if _, err := k.ReadPartition(ctx, p.changelog, part, 0, func(r *kafkaio.Record) error {
			if r.Value == nil {
				delete(st, string(r.Key))
			} else {
				st[string(r.Key)] = r.Value
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read changelog %s/%d: %w", p.changelog, part, err)
		}
		// has960: the partition's state is keyed by key groups of 960;
		// nonDivisor: it ran on a count that does not divide 960.
		has960, hasKeyed, nonDivisor := false, false, false
		for key, v := range st {
			sk, err := state.ParseStateKey(s.name, []byte(key))
			if err != nil {
				return nil, fmt.Errorf("changelog %s/%d: %w", p.changelog, part, err)
			}
			if sk.Partition != part {
				return nil, fmt.Errorf("changelog %s/%d holds a key of partition %d", p.changelog, part, sk.Partition)
			}
			switch {
			case sk.Kind == state.KindAcc || sk.Kind == state.KindGroup:
				keyed, hasKeyed = true, hasKeyed || isGroupKey(sk)
			case sk.Kind == state.KindTask && sk.Name == state.KeyGroupsKey:
				has960 = true
			case sk.Kind == state.KindTask && sk.Name == markerName:
				val, err := state.DecodeChange(v)
				if err != nil {
					return nil, err
				}
				f := strings.Fields(string(val))
				if len(f) != 3 {
					return nil, fmt.Errorf("changelog %s: unreadable rescale marker %q", p.changelog, val)
				}
				from, _ := strconv.Atoi(f[0])
				to, _ := strconv.Atoi(f[1])
				if to != m {
					return nil, refuse("stream %s: an interrupted rescale from %d to %d partitions is under way; run it again with --to %d", s.name, from, to, to)
				}
				p.n, p.marker = from, f[2]
			case sk.Kind == state.KindTask && sk.Name == placementKey:
				placed = true
				ps, err := decodePlacement(v)
				if err != nil {
					return nil, fmt.Errorf("changelog %s/%d: %w", p.changelog, part, err)
				}
				if ps.Verdict == placement.Misplaced {
					return nil, refuse("stream %s: partition %d's placement verdict is -1 (records seen where murmur2 would not have put them): its keys are not where their key groups say, so no group can be moved; fix the producer and rebuild the state (DROP and CREATE the stream)", s.name, part)
				}
				counts = append(counts, ps.Current())
				nonDivisor = slices.ContainsFunc(ps.Counts, func(n int) bool { return !state.Divides(n) })
			}
		}
		if hasKeyed && !has960 && nonDivisor {
			unkeyed = append(unkeyed, part)
		}
	}
	if !keyed && !placed {
		p.skip = "no keyed state: nothing to move"
		return p, nil
	}
	if !placed && s.hop {
		p.skip = "its state is keyed by its hop's internal topic (repartition or combine), whose partition count does not change with the source's: nothing to move"
		return p, nil
	}
	if !placed {
		return nil, refuse("stream %s has no partition key its state is split by (a hop, or no partition_key in its GROUP BY): its state is one indivisible block per partition, which cannot be split between partitions", s.name)
	}
	if s.eos {
		return nil, refuse("stream %s is exactly-once: its committed output is chained to its current partition layout, which cannot be carried to another; start it under a new app id at the target count (a new processing history)", s.name)
	}
	if p.marker == "" {
		slices.Sort(counts)
		counts = slices.Compact(counts)
		if len(counts) != 1 {
			return nil, refuse("stream %s: its partitions ran under different counts %v (it already ran on the new count without a rescale?): the keys that moved started empty there, and moving their old state would overwrite it", s.name, counts)
		}
		p.n = counts[0]
	}
	if p.n == m && p.marker == "" {
		p.skip = fmt.Sprintf("already on %d partitions: nothing to move", m)
		return p, nil
	}
	if len(unkeyed) > 0 {
		return nil, refuse("stream %s: the state of partitions %v ran on a partition count that does not divide 960 under an earlier release, which grouped it by hash mod that count: start the app once with this release (each partition re-keys its state by key groups of 960 when it opens), stop it, and run the rescale again", s.name, unkeyed)
	}
	if p.perKey = !state.Divides(p.n); p.perKey {
		if p.marker == "" {
			if err := p.checkOneCopy(); err != nil {
				return nil, err
			}
		}
	}
	if m < p.n {
		return nil, refuse("stream %s runs on %d partitions: Kafka cannot shrink topic %s to %d", s.name, p.n, s.inputTopic, m)
	}
	in, err := k.Partitions(ctx, s.inputTopic)
	if err != nil {
		return nil, err
	}
	if in > m {
		return nil, refuse("input topic %s of stream %s has %d partitions, more than --to %d: rescale to %d", s.inputTopic, s.name, in, m, in)
	}
	return p, nil
}

// groupsBy reports whether the stream's GROUP BY names column (the
// source's partition key) as a plain column.
func groupsBy(cs *sql.CreateStream, column string) bool {
	if cs.Query == nil || cs.Query.GroupBy == nil {
		return false
	}
	for _, item := range cs.Query.GroupBy.Items {
		if c, ok := item.Expr.(*ast.ColumnNameExpr); ok && strings.EqualFold(c.Name.Name.O, column) {
			return true
		}
	}
	return false
}

// placementKey is dataflow.PlacementKey (not imported: dataflow is the
// runtime, this a tool beside it).
const placementKey = "placement"

func decodePlacement(v []byte) (placement.State, error) {
	val, err := state.DecodeChange(v)
	if err != nil {
		return placement.State{}, err
	}
	return placement.Decode(val)
}

// byteCount renders n bytes.
func byteCount(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// stateDir is where a data dir keeps the state store (server.Start).
func stateDir(dataDir string) string { return filepath.Join(dataDir, "state") }
