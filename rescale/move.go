package rescale

import (
	"context"
	"encoding/binary"
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
	if p.perKey {
		ss.Keys = p.movedKeys()
	}
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
			// copy: left there by an earlier count, stale. (Not on an N
			// that does not divide 960: there it holds keys of every
			// group, each live, and checkOneCopy saw no key twice.)
			for _, key := range p.sortedKeys(q) {
				if p.perKey {
					break
				}
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
		if p.perKey {
			fmt.Fprintf(out, "stream %s: %d keys of %d key groups copied one by one to their new partitions (%d records)\n", name, ss.Keys, len(moved), w.records-before)
		} else {
			fmt.Fprintf(out, "stream %s: %d key groups copied to their new partitions (%d records)\n", name, len(moved), w.records-before)
		}
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

// moves reports whether the state of a key of group g, held by partition
// part, is one this rescale moves from there. On an N that divides 960:
// part owns g under N and does not under M (a group part does not own
// under N is left where it is: state left behind by an earlier count
// change, which the start-up cleanup handles). On one that does not
// (perKey), part holds keys of every group, each where murmur2 placed it
// under N, and a key goes to its group mod M, where murmur2 places it
// under M (M divides 960).
func (p *plan) moves(g uint16, part int32) bool {
	if int(g) >= state.KeyGroups {
		return false
	}
	if p.perKey {
		return int32(int(g)%p.m) != part
	}
	return int32(int(g)%p.n) == part && int32(int(g)%p.m) != part
}

// movedGroups are the key groups whose owner changes from N to M; on an N
// that does not divide 960, the groups of the keys that move.
func (p *plan) movedGroups() map[uint16]struct{} {
	out := map[uint16]struct{}{}
	if p.perKey {
		for part := range int32(p.n) {
			for key := range p.state[part] {
				if sk, err := state.ParseStateKey(p.s.name, []byte(key)); err == nil && isGroupKey(sk) && p.moves(sk.KG, part) {
					out[sk.KG] = struct{}{}
				}
			}
		}
		return out
	}
	for g := range uint16(state.KeyGroups) {
		if int(g)%p.n != int(g)%p.m {
			out[g] = struct{}{}
		}
	}
	return out
}

// movedKeys is how many keys (their state, by keyIdent) move.
func (p *plan) movedKeys() int {
	keys := map[string]bool{}
	for part := range int32(p.n) {
		for key := range p.state[part] {
			if sk, err := state.ParseStateKey(p.s.name, []byte(key)); err == nil && isGroupKey(sk) && p.moves(sk.KG, part) {
				keys[keyIdent(p.s.name, []byte(key), sk)] = true
			}
		}
	}
	return len(keys)
}

// keyIdent names the state a key of stream's partition state belongs to,
// the same in every partition's scope: the key less its partition, a
// partial (classic or in a run) as its group's key.
func keyIdent(stream string, key []byte, sk state.StateKey) string {
	if sk.Run {
		key = state.RunEntryAsDelta(stream, key)
	}
	if sk.Delta || sk.Run {
		key = state.DeltaGroup(key)
	}
	id := append([]byte{key[0]}, key[len(stream)+2+4:]...)
	if sk.Kind == state.KindGroup {
		// (0, window, key group, key): a partial's key group as its group's
		binary.BigEndian.PutUint16(id[1+1+8:], sk.KG)
	}
	return string(id)
}

// checkOneCopy refuses, on an N that does not divide 960, state of one
// key held by two partitions: it ran on another count before N without
// the tool, and the copy the key left behind (the start-up cleanup never
// runs on such a count) cannot be told from the live one by its key group
// alone, nor can both go to the key's one partition under M.
func (p *plan) checkOneCopy() error {
	name := p.s.name
	held := map[string]int32{}
	for part := range int32(p.n) {
		for _, key := range p.sortedKeys(part) {
			sk, err := state.ParseStateKey(name, []byte(key))
			if err != nil {
				return err
			}
			if !isGroupKey(sk) {
				continue
			}
			id := keyIdent(name, []byte(key), sk)
			if q, ok := held[id]; ok && q != part {
				return refuse("stream %s: partitions %d and %d both hold state of one key (key group %d): it ran on another partition count before %d without the tool, and which copy is live cannot be told on a count that does not divide 960; rebuild the state (DROP and CREATE the stream), or let the windows it left behind close first",
					name, q, part, sk.KG, p.n)
			}
			held[id] = part
		}
	}
	return nil
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
	// The keys partition q of M receives come from the partitions p of N
	// with p = q mod gcd(N, M): murmur2(k) mod M = q and mod N = p hold
	// together for some k exactly then. (On an N that divides 960 these
	// are the owners under N of q's groups under M.)
	step := int32(gcd(p.n, p.m))
	for q := range int32(p.m) {
		var from []int32
		for src := q % step; src < int32(p.n); src += step {
			from = append(from, src)
		}
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

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
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
