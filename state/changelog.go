package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// A task's state is also kept in a changelog topic, one partition per
// input partition, so that it can follow its partition to another process
// (or to a new disk). The changelog carries every write of a task's
// commits as a record keyed by the store key (scope, window, key group,
// key; or the partition's position): a write is the value, a deletion a
// tombstone, so a compacted changelog holds exactly the task's state.
// Range deletions (a window's groups going at its close) are written as a
// tombstone per key they remove: compaction forgets a key only by its
// tombstone.
//
// What is local to one disk (how far this disk has applied the changelog)
// is kept under prefixLocal and never logged.

// prefixLocal holds per-disk bookkeeping of a task: the changelog offset
// its state has applied.
const prefixLocal = 'c'

// ChangeVersion is the first byte of a changelog record's value: values
// are the store's value behind it, so a later layout can be told apart.
const ChangeVersion byte = 1

// EncodeChange is the changelog value of a store value (nil: a deletion,
// the tombstone).
func EncodeChange(val []byte) []byte {
	if val == nil {
		return nil
	}
	return AppendChange(make([]byte, 0, ChangeLen(val)), val)
}

// AppendChange appends the changelog value of store value val (not nil)
// to dst.
func AppendChange(dst, val []byte) []byte { return append(append(dst, ChangeVersion), val...) }

// ChangeLen is the length of the changelog value of store value val.
func ChangeLen(val []byte) int { return len(val) + 1 }

// ErrChangeVersion refuses a changelog record this version cannot read
// (written by a newer one).
var ErrChangeVersion = errors.New("changelog record of an unknown version")

// DecodeChange is the store value of a changelog value (nil: a deletion).
func DecodeChange(v []byte) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if len(v) == 0 || v[0] != ChangeVersion {
		return nil, fmt.Errorf("%w (first byte %v)", ErrChangeVersion, v[:min(len(v), 1)])
	}
	return v[1:], nil
}

// EachChange calls fn for every write of the batch in order: a key and
// its value, or a deletion (val nil). A range deletion becomes a deletion
// of each key it removes: the keys stored now, and the keys this batch
// set before it. key and val are valid during the call.
func (b *Batch) EachChange(fn func(key, val []byte) error) error {
	// A commit's runs (runs.go) hold only new keys, which nothing in the
	// batch deletes: they come first, as they are written first.
	if err := b.eachRunChange(fn); err != nil {
		return err
	}
	return b.eachChange(fn)
}

// eachChange is EachChange without the runs' tables. A deleted run chunk
// (runchunk.go) is logged as the deletion of each of its partials.
func (b *Batch) eachChange(fn func(key, val []byte) error) error {
	s, pb := b.s, b.b
	type op struct {
		kind       pebble.InternalKeyKind
		key, value []byte
	}
	var ops []op
	var ranges []int // indexes of range deletions in ops
	r := pb.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return fmt.Errorf("read state batch: %w", err)
		}
		if !ok {
			break
		}
		switch kind {
		case pebble.InternalKeyKindSet, pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete:
		case pebble.InternalKeyKindRangeDelete:
			ranges = append(ranges, len(ops))
		case pebble.InternalKeyKindLogData:
			continue
		default:
			return fmt.Errorf("state batch: write of kind %v cannot be logged", kind)
		}
		ops = append(ops, op{kind, k, v})
	}
	// A key set before a range deletion that covers it is deleted by it:
	// find, for each such key, the first later range deletion covering it.
	covered := map[int][][]byte{} // range deletion's index -> keys it deletes
	if len(ranges) > 0 {
		byStart := slices.Clone(ranges)
		slices.SortFunc(byStart, func(i, j int) int { return bytes.Compare(ops[i].key, ops[j].key) })
		// maxEnd[i]: the largest end among byStart[:i+1], so the walk back
		// stops once no earlier range can reach the key.
		maxEnd := make([][]byte, len(byStart))
		for i, ri := range byStart {
			maxEnd[i] = ops[ri].value
			if i > 0 && bytes.Compare(maxEnd[i-1], maxEnd[i]) > 0 {
				maxEnd[i] = maxEnd[i-1]
			}
		}
		for i, o := range ops {
			if o.kind != pebble.InternalKeyKindSet {
				continue
			}
			// The last range starting at or before the key.
			j := sort.Search(len(byStart), func(x int) bool { return bytes.Compare(ops[byStart[x]].key, o.key) > 0 }) - 1
			first := -1
			for ; j >= 0 && bytes.Compare(maxEnd[j], o.key) > 0; j-- {
				ri := byStart[j]
				if ri > i && bytes.Compare(o.key, ops[ri].value) < 0 && (first < 0 || ri < first) {
					first = ri
				}
			}
			if first >= 0 {
				covered[first] = append(covered[first], o.key)
			}
		}
	}
	tombstone := func(k, _ []byte) error { return fn(k, nil) }
	for i, o := range ops {
		switch o.kind {
		case pebble.InternalKeyKindSet:
			v := o.value
			if v == nil {
				v = []byte{} // an empty value, not a deletion
			}
			if err := fn(o.key, v); err != nil {
				return err
			}
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete:
			if _, ok := b.chunkDels[string(o.key)]; ok {
				v, err := b.deletedChunk(o.key)
				if err != nil {
					return err
				}
				if err := expandChunk(o.key, v, tombstone); err != nil {
					return err
				}
				continue
			}
			if err := fn(o.key, nil); err != nil {
				return err
			}
		case pebble.InternalKeyKindRangeDelete:
			if err := s.eachKeyIn(o.key, o.value, func(k []byte, v func() []byte) error {
				if pl := runEntryIn(k, b.scope); pl >= 0 && chunkAt(k, pl) {
					return expandChunk(k, v(), tombstone)
				}
				return fn(k, nil)
			}); err != nil {
				return err
			}
			for _, k := range covered[i] {
				if err := fn(k, nil); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// eachKeyIn calls fn for every stored key in [lo, hi); v reads its value
// (only a run chunk's is needed: it is not read otherwise).
func (s *Store) eachKeyIn(lo, hi []byte, fn func(k []byte, v func() []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

// scopePrefixes are the key ranges holding partition p's state of stream:
// its accumulators and groups (its scope), its position and its task
// values. Its local bookkeeping is not among them.
func scopePrefixes(stream string, p int32) [][]byte {
	scope := Scope(stream, p)
	pk := partKey(stream, p)
	tk := binary.BigEndian.AppendUint32(streamPrefix(prefixTask, stream), uint32(p))
	return [][]byte{streamPrefix(prefixAcc, scope), streamPrefix(prefixGroup, scope), pk, tk}
}

// rangeOf is [pre, next key after every key starting with pre).
func rangeOf(pre []byte) (lo, hi []byte) {
	hi = bytes.Clone(pre)
	for i := len(hi) - 1; i >= 0; i-- {
		if hi[i] < 0xff {
			hi[i]++
			return pre, hi[:i+1]
		}
	}
	return pre, nil
}

// EachScopeKey calls fn for every stored key of partition p's state of
// stream (what its changelog holds when it is current): a run chunk's
// partials each under its own key.
func (s *Store) EachScopeKey(stream string, p int32, fn func(key, val []byte) error) error {
	scope := Scope(stream, p)
	for _, pre := range scopePrefixes(stream, p) {
		lo, hi := rangeOf(pre)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			k := it.Key()
			if pl := runEntryIn(k, scope); pl >= 0 && chunkAt(k, pl) {
				// a run chunk: the changelog holds its partials
				if err := expandChunk(k, it.Value(), fn); err != nil {
					it.Close()
					return err
				}
				continue
			}
			if err := fn(k, it.Value()); err != nil {
				it.Close()
				return err
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}

// HasScope reports whether partition p of stream has any state on this
// disk.
func (s *Store) HasScope(stream string, p int32) (bool, error) {
	errFound := errors.New("found")
	err := s.EachScopeKey(stream, p, func(_, _ []byte) error { return errFound })
	if errors.Is(err, errFound) {
		return true, nil
	}
	return false, err
}

// DropScope deletes partition p's state of stream from this disk, and
// its changelog position: it is rebuilt from the changelog.
func (s *Store) DropScope(stream string, p int32) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, pre := range append(scopePrefixes(stream, p), localKey(stream, p)) {
		lo, hi := rangeOf(pre)
		if err := b.DeleteRange(lo, hi, nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("drop state of %s/%d: %w", stream, p, err)
	}
	return nil
}

func localKey(stream string, p int32) []byte {
	return binary.BigEndian.AppendUint32(streamPrefix(prefixLocal, stream), uint32(p))
}

// ChangelogPosition is the changelog offset partition p's state on this
// disk has applied (ok false: this disk has never applied or written its
// changelog).
func (s *Store) ChangelogPosition(stream string, p int32) (next int64, ok bool, err error) {
	v, closer, err := s.db.Get(localKey(stream, p))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read changelog position of %s/%d: %w", stream, p, err)
	}
	defer closer.Close()
	n, k := binary.Varint(v)
	if k <= 0 {
		return 0, false, errCorruptKey
	}
	return n, true, nil
}

// PutChangelogPosition records, with the batch, the changelog offset the
// state has applied once the batch is written. It is not itself a change.
func (b *Batch) PutChangelogPosition(p int32, next int64) error {
	return b.b.Set(localKey(b.stream, p), binary.AppendVarint(nil, next), nil)
}

// Restore applies changelog records to partition p's state of stream.
type Restore struct {
	s        *Store
	stream   string
	p        int32
	prefixes [][]byte // scopePrefixes, checked on every record
	b        *pebble.Batch
}

// NewRestore starts applying partition p's changelog of stream.
func (s *Store) NewRestore(stream string, p int32) *Restore {
	return &Restore{s: s, stream: stream, p: p, prefixes: scopePrefixes(stream, p), b: s.db.NewBatch()}
}

// Apply applies one changelog record (val as the topic holds it).
func (r *Restore) Apply(key, val []byte) error {
	v, err := DecodeChange(val)
	if err != nil {
		return err
	}
	if !r.owns(key) {
		return fmt.Errorf("changelog of %s/%d holds key %q of another partition or stream", r.stream, r.p, key)
	}
	if v == nil {
		return r.b.Delete(key, nil)
	}
	return r.b.Set(key, v, nil)
}

// owns reports whether key lies in the partition's state.
func (r *Restore) owns(key []byte) bool {
	return hasAnyPrefix(key, r.prefixes)
}

func hasAnyPrefix(key []byte, prefixes [][]byte) bool {
	for _, pre := range prefixes {
		if bytes.HasPrefix(key, pre) {
			return true
		}
	}
	return false
}

// Pending is how much is applied but not yet written.
func (r *Restore) Pending() int { return r.b.Len() }

// Write writes what was applied, with next as the changelog position.
func (r *Restore) Write(next int64) error {
	if err := r.b.Set(localKey(r.stream, r.p), binary.AppendVarint(nil, next), nil); err != nil {
		return err
	}
	if err := r.b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("restore state of %s/%d: %w", r.stream, r.p, err)
	}
	_ = r.b.Close()
	r.b = r.s.db.NewBatch()
	return nil
}

// Close discards what was applied and not written.
func (r *Restore) Close() { _ = r.b.Close() }

// Watch collects the changes batches other than a task's commit make to
// partition p's state (an operator's open migrating, cleaning up or
// recording its placement history), so the task can log them in its next
// commit. stop ends the watch and returns them.
func (s *Store) Watch(stream string, p int32) (stop func() []Change) {
	w := &watch{prefixes: scopePrefixes(stream, p)}
	s.watchMu.Lock()
	s.watches = append(s.watches, w)
	s.watchMu.Unlock()
	return func() []Change {
		s.watchMu.Lock()
		defer s.watchMu.Unlock()
		s.watches = slices.DeleteFunc(s.watches, func(o *watch) bool { return o == w })
		return w.changes
	}
}

// Change is one write to a task's state: a value, or a deletion (Value
// nil).
type Change struct{ Key, Value []byte }

type watch struct {
	prefixes [][]byte
	changes  []Change
}

// watchState is the Store's part of Watch.
type watchState struct {
	watchMu sync.Mutex
	watches []*watch
}

// noteWatched hands the changes of a batch about to be written to the
// watches they concern.
func (s *Store) noteWatched(b *Batch) error {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if len(s.watches) == 0 {
		return nil
	}
	return b.eachChange(func(k, v []byte) error {
		for _, w := range s.watches {
			if hasAnyPrefix(k, w.prefixes) {
				// Clone keeps an empty value non-nil: not a deletion.
				w.changes = append(w.changes, Change{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			}
		}
		return nil
	})
}
