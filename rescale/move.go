package rescale

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/state"
)

// The order of writes makes a run safe to interrupt and run again, with
// no group lost or duplicated:
//
//  1. the marker "N M copying" (partition 0), so a later run knows that
//     copies of groups it does not own under N may sit in partitions
//     (they are this rescale's, not a producer's misplacement);
//  2. every moved group's copy in its new partition (a group's deltas
//     renumbered the same way on every run, so a copy written twice is
//     the same records), and tombstones for anything else a new owner
//     held of a group it receives (state left behind by an earlier count
//     change, stale);
//  3. the marker "N M copied": every copy is in place;
//  4. tombstones for the moved groups where they were;
//  5. each partition's position and placement state for M;
//  6. the marker deleted.
//
// Each step is flushed before the next starts. An interruption before 3
// leaves every group complete where it was (a re-run writes the copies
// again); after 3, complete where it goes (a re-run deletes what is left
// where it was). Positions (5) are computed from the old ones, the same
// on a re-run.

// run rescales one checked stream.
func (p *plan) run(ctx context.Context, k Kafka, opts Options, out io.Writer) (StreamSummary, error) {
	ss := StreamSummary{Name: p.s.name, From: p.n, To: p.m}
	name, n, m := p.s.name, p.n, p.m
	if p.marker != "" {
		fmt.Fprintf(out, "stream %s: resuming an interrupted rescale from %d to %d partitions (its last mark: %s)\n", name, n, m, p.marker)
	} else {
		fmt.Fprintf(out, "stream %s: rescaling from %d to %d partitions\n", name, n, m)
	}
	if err := p.dropLocal(opts.DataDirs, out); err != nil {
		return ss, err
	}
	w := &writer{ctx: ctx, k: k, topic: p.changelog, out: out, stream: name, last: time.Now()}
	stop := func(phase string) error {
		if err := w.flush(ctx); err != nil {
			return err
		}
		ss.Records, ss.Bytes = w.records, w.bytes
		if opts.Interrupt != nil && opts.Interrupt(name, phase) {
			return ErrInterrupted
		}
		return nil
	}
	marker := func(phase string) {
		w.put(0, state.TaskKey(name, 0, markerName), state.EncodeChange(fmt.Appendf(nil, "%d %d %s", n, m, phase)))
	}
	if p.marker == "" {
		marker(phaseCopying)
		if err := stop("marked"); err != nil {
			return ss, err
		}
	}
	// The input topic and the changelog grow to M (the changelog follows
	// its input's count; the server would grow it too).
	if in, err := k.Partitions(ctx, p.s.inputTopic); err != nil {
		return ss, err
	} else if in < m {
		if err := k.CreatePartitions(ctx, p.s.inputTopic, m); err != nil {
			return ss, err
		}
		fmt.Fprintf(out, "stream %s: input topic %s grown from %d to %d partitions\n", name, p.s.inputTopic, in, m)
	}
	if err := k.EnsureCompacted(ctx, p.changelog, m); err != nil {
		return ss, err
	}
	for len(p.state) < m {
		p.state = append(p.state, map[string][]byte{})
	}
	moved := p.movedGroups()
	ss.Groups = len(moved)
	if p.marker != phaseCopied {
		before := w.records
		copies, err := p.copies()
		if err != nil {
			return ss, err
		}
		for q := range int32(m) {
			keys := slices.Sorted(maps.Keys(copies[q]))
			for _, key := range keys {
				w.put(q, []byte(key), copies[q][key])
			}
			// What the new owner held of a group it receives, outside the
			// copy: left there by an earlier count, stale.
			for _, key := range p.sortedKeys(q) {
				sk, _ := state.ParseStateKey(name, []byte(key))
				if _, arriving := moved[sk.KG]; arriving && isGroupKey(sk) && int32(int(sk.KG)%m) == q {
					if _, ok := copies[q][key]; !ok {
						w.put(q, []byte(key), nil)
					}
				}
			}
			w.progress(fmt.Sprintf("copies into partition %d", q))
			if err := stop(fmt.Sprintf("copied into %d", q)); err != nil {
				return ss, err
			}
		}
		fmt.Fprintf(out, "stream %s: %d key groups copied to their new partitions (%d records)\n", name, len(moved), w.records-before)
		marker(phaseCopied)
		if err := stop("copied"); err != nil {
			return ss, err
		}
	}
	before := w.records
	for part := range int32(n) {
		for _, key := range p.sortedKeys(part) {
			sk, _ := state.ParseStateKey(name, []byte(key))
			if isGroupKey(sk) && p.moves(sk.KG, part) {
				w.put(part, []byte(key), nil)
			}
		}
		w.progress(fmt.Sprintf("tombstones in partition %d", part))
	}
	if err := stop("tombstoned"); err != nil {
		return ss, err
	}
	fmt.Fprintf(out, "stream %s: %d tombstones where the groups left\n", name, w.records-before)
	if err := p.positions(w); err != nil {
		return ss, err
	}
	if err := stop("positioned"); err != nil {
		return ss, err
	}
	w.put(0, state.TaskKey(name, 0, markerName), nil)
	if err := stop("done"); err != nil {
		return ss, err
	}
	return ss, nil
}

func isGroupKey(sk state.StateKey) bool {
	return (sk.Kind == state.KindAcc || sk.Kind == state.KindGroup) && sk.KG != state.NullGroup
}

// moves reports whether key group g, held by partition part, is one this
// rescale moves from there: part owns it under N and does not under M.
// (A group part does not own under N is left where it is: state left
// behind by an earlier count change, which the start-up cleanup handles.)
func (p *plan) moves(g uint16, part int32) bool {
	return int(g) < state.KeyGroups && int32(int(g)%p.n) == part && int32(int(g)%p.m) != part
}

// movedGroups are the key groups whose owner changes from N to M.
func (p *plan) movedGroups() map[uint16]struct{} {
	out := map[uint16]struct{}{}
	for g := range uint16(state.KeyGroups) {
		if int(g)%p.n != int(g)%p.m {
			out[g] = struct{}{}
		}
	}
	return out
}

func (p *plan) sortedKeys(part int32) []string { return slices.Sorted(maps.Keys(p.state[part])) }

// copies are the records each partition receives: the moved groups' keys
// in its scope, a group's deltas numbered MovedDeltaGen/0, 1, ... in key
// order (deterministic, so a re-run writes the same keys).
func (p *plan) copies() ([]map[string][]byte, error) {
	name := p.s.name
	out := make([]map[string][]byte, p.m)
	for q := range out {
		out[q] = map[string][]byte{}
	}
	for part := range int32(p.n) {
		// A group's deltas are numbered 0, 1, ... in key order: its
		// classic deltas are adjacent in that order, its deltas in runs
		// (one per run, state's runs.go) are not, hence a count per group.
		seqs := map[string]uint64{}
		for _, key := range p.sortedKeys(part) {
			sk, err := state.ParseStateKey(name, []byte(key))
			if err != nil {
				return nil, err
			}
			if !isGroupKey(sk) || !p.moves(sk.KG, part) {
				continue
			}
			q := int32(int(sk.KG) % p.m)
			from := []byte(key)
			if sk.Run { // moved as a classic delta: the run stays behind
				from = state.RunEntryAsDelta(name, from)
			}
			nk := state.MovedKey(name, from, q)
			if sk.Delta {
				g := string(state.DeltaGroup(from))
				nk = state.WithDeltaID(nk, state.DeltaID{Gen: state.MovedDeltaGen, Seq: seqs[g]})
				seqs[g]++
			}
			out[q][string(nk)] = p.state[part][key]
		}
	}
	return out, nil
}

// positions writes each partition's position and placement state under
// M. Partition q of M reads its own input: a partition that existed keeps
// its offset, a new one starts at 0. Its event-time progress (max time,
// windows closed) is the least among the partitions its groups come from
// (itself included when it keeps some): a window closes no earlier than
// it would have for any of its keys. Its placement state records M in
// the count history: an old partition opens a transition window (its
// producers may still place by N for a while), a new one starts on M.
func (p *plan) positions(w *writer) error {
	name := p.s.name
	metas := make([]state.PartitionMeta, p.m)
	have := make([]bool, p.m)
	for part := range int32(p.m) {
		if v, ok := p.state[part][string(state.PartitionKey(name, part))]; ok {
			val, err := state.DecodeChange(v)
			if err != nil {
				return err
			}
			if metas[part], err = state.DecodeMeta(val); err != nil {
				return fmt.Errorf("position of %s/%d: %w", name, part, err)
			}
			have[part] = true
		}
	}
	for q := range int32(p.m) {
		var from []int32
		for g := range state.KeyGroups {
			if int32(g%p.m) == q {
				from = append(from, int32(g%p.n))
			}
		}
		slices.Sort(from)
		from = slices.Compact(from)
		nm := state.PartitionMeta{}
		if int(q) < p.n {
			nm.Offset, nm.Applied = metas[q].Offset, metas[q].Applied
		}
		first := true
		for _, src := range from {
			if !have[src] {
				continue
			}
			sm := metas[src]
			if first {
				nm.MaxTime, nm.HasTime, nm.Closed, nm.HasClosed = sm.MaxTime, sm.HasTime, sm.Closed, sm.HasClosed
				first = false
				continue
			}
			nm.HasTime = nm.HasTime && sm.HasTime
			nm.MaxTime = min(nm.MaxTime, sm.MaxTime)
			nm.HasClosed = nm.HasClosed && sm.HasClosed
			nm.Closed = min(nm.Closed, sm.Closed)
		}
		if !nm.HasTime {
			nm.MaxTime = 0
		}
		if !nm.HasClosed {
			nm.Closed = 0
		}
		if !first || int(q) < p.n {
			w.put(q, state.PartitionKey(name, q), state.EncodeChange(state.EncodeMeta(nm)))
		}
		var ps placement.State
		if v, ok := p.state[q][string(state.TaskKey(name, q, placementKey))]; ok {
			var err error
			if ps, err = decodePlacement(v); err != nil {
				return err
			}
		}
		if ps.Current() != p.m {
			c := &placement.Checker{State: ps, Partition: q, Window: placement.DefaultWindow, Now: time.Now}
			if _, err := c.Start(p.m, nm.Offset); err != nil {
				return err
			}
			ps = c.State
		}
		w.put(q, state.TaskKey(name, q, placementKey), state.EncodeChange(ps.Encode()))
	}
	return nil
}

// dropLocal deletes, in every data dir, the stream's state of every
// partition (and the changelog position it had applied), so each node
// rebuilds its partitions from the rescaled changelog when it opens them.
// Moving the groups within Pebble as well would save that restore, but a
// disk is not always current with the changelog (a node that lost its
// partitions to another keeps an older copy), and a disk edited to match
// a changelog it had not applied would be wrong in ways no check sees;
// the changelog is the one copy that is always whole. Dropping first is
// safe whatever happens next: the changelog holds all of it.
func (p *plan) dropLocal(dirs []string, out io.Writer) error {
	for _, dir := range dirs {
		st, err := state.Open(stateDir(dir), slog.New(slog.DiscardHandler))
		if err != nil {
			return fmt.Errorf("data dir %s: %w", dir, err)
		}
		dropped := 0
		for part := range int32(max(p.parts, p.m)) {
			has, err := st.HasScope(p.s.name, part)
			if err != nil {
				st.Close()
				return err
			}
			if _, known, err := st.ChangelogPosition(p.s.name, part); err != nil {
				st.Close()
				return err
			} else if !has && !known {
				continue
			}
			if err := st.DropScope(p.s.name, part); err != nil {
				st.Close()
				return err
			}
			dropped++
		}
		if err := st.Close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "stream %s: data dir %s: local state of %d partitions dropped (rebuilt from the changelog at start)\n", p.s.name, dir, dropped)
	}
	return nil
}

// writer produces changelog records, in order, and counts them.
type writer struct {
	ctx    context.Context
	k      Kafka
	topic  string
	out    io.Writer
	stream string
	buf    []*kafkaio.Record
	err    error

	records int
	bytes   int64
	last    time.Time
}

// writeChunk is how many records are sent at once.
const writeChunk = 10_000

func (w *writer) put(part int32, key, val []byte) {
	w.buf = append(w.buf, &kafkaio.Record{Topic: w.topic, Partition: part, Key: key, Value: val})
	w.records++
	w.bytes += int64(len(key) + len(val))
	if len(w.buf) >= writeChunk && w.err == nil {
		w.err = w.send(w.ctx)
	}
}

// send writes what is buffered and waits for it (ProduceSync retries a
// record for a partition its metadata does not know yet: the changelog
// has just grown).
func (w *writer) send(ctx context.Context) error {
	recs := w.buf
	w.buf = nil
	if err := w.k.ProduceSync(ctx, recs); err != nil {
		return fmt.Errorf("write changelog %s: %w", w.topic, err)
	}
	return nil
}

// flush writes everything put so far, durably, or returns the first
// failure.
func (w *writer) flush(ctx context.Context) error {
	if w.err != nil {
		return w.err
	}
	return w.send(ctx)
}

// progress prints where the run is, at most every 2 s.
func (w *writer) progress(what string) {
	if time.Since(w.last) < 2*time.Second {
		return
	}
	w.last = time.Now()
	fmt.Fprintf(w.out, "stream %s: %s: %d records (%s) written so far\n", w.stream, what, w.records, byteCount(w.bytes))
}
