// Package state is the Pebble store of keyed stream state. Accumulators are
// keyed by (stream, key group, key, window); beside them each stream keeps,
// per input partition, the offset its state has applied and the partition's
// event-time progress, always written in the same Pebble batch as the state
// they describe, so state and position never disagree after a crash.
package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Store is one Pebble database holding the state of every stream.
type Store struct {
	db  *pebble.DB
	fs  vfs.FS
	dir string
	// minFree is the free space a commit leaves untouched: Pebble cannot
	// survive running out of disk in its WAL (a failed log write is fatal
	// to the process), so commits stop short of it instead (CheckSpace).
	minFree uint64

	// runOpts write and read the tables of partials ingested as runs
	// (runs.go).
	runOpts    sstable.WriterOptions
	runReadOpt sstable.ReaderOptions
	minRun     int // Options.MinRunPartials
	maxRuns    int // Options.MaxWindowRuns (0: none)
	// afterIngest is Options.AfterIngest.
	afterIngest func()

	spaceMu  sync.Mutex
	spaceAt  time.Time
	spaceErr error

	watchState
}

// ErrDiskFull is what CheckSpace's error matches (errors.Is).
var ErrDiskFull = errors.New("disk full")

// DiskFullError says how much room is left where the state lives.
type DiskFullError struct {
	Dir         string
	Free, Needs uint64
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("disk full: %d MB free at %s, state commits need %d MB; free space there (processing resumes by itself)",
		e.Free>>20, e.Dir, e.Needs>>20)
}

// Is makes errors.Is(err, ErrDiskFull) hold.
func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// SQLState is PostgreSQL's disk_full.
func (e *DiskFullError) SQLState() string { return "53100" }

// Options are how the store is opened; the zero value is the real disk.
type Options struct {
	// FS is the file system (nil: the OS's); tests wrap it to fill the
	// disk on cue.
	FS vfs.FS
	// MinRunPartials is the fewest partials a commit ingests as runs
	// (runs.go); 0: minRunPartials. Tests lower it.
	MinRunPartials int
	// MaxWindowRuns lowers the bound on a window's runs, at which its
	// partials are folded (runfold.go); 0: MaxWindowRuns. Tests and
	// crash audits lower it, to fold often.
	MaxWindowRuns int
	// AfterIngest, when set, runs between a commit's runs' ingest and its
	// batch: crash audits exit there, the window a run is left without
	// its marker.
	AfterIngest func()
}

// pebbleLogger routes Pebble's messages to slog at debug level, so its WAL
// chatter does not reach stderr.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...)) // Pebble's contract: Fatalf does not return
}

// blockCacheSize bounds Pebble's block cache (see Open).
const blockCacheSize = 32 << 20

// Open opens (creating if needed) the store in dir.
func Open(dir string, log *slog.Logger, opts ...Options) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	fs := vfs.Default
	minRun, maxRuns := minRunPartials, 0
	var afterIngest func()
	for _, o := range opts {
		if o.FS != nil {
			fs = o.FS
		}
		if o.MinRunPartials > 0 {
			minRun = o.MinRunPartials
		}
		if o.MaxWindowRuns > 0 {
			maxRuns = o.MaxWindowRuns
		}
		if o.AfterIngest != nil {
			afterIngest = o.AfterIngest
		}
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open state store %s: %w", dir, err)
	}
	// On a small file system the memtable (and so each flush and the WAL
	// behind it) shrinks, and so does the room kept free.
	memtable, minFree := uint64(64<<20), uint64(256<<20)
	if du, err := fs.GetDiskUsage(dir); err == nil && du.TotalBytes > 0 {
		memtable = min(memtable, max(du.TotalBytes/16, 1<<20))
		minFree = min(minFree, max(du.TotalBytes/10, 2*memtable))
	}
	blockCache := pebble.NewCache(blockCacheSize)
	defer blockCache.Unref() // the DB holds its own reference
	popts := &pebble.Options{
		FS:                 fs,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{l: log},
		// The block cache holds the index and filter blocks of every table
		// and the data blocks of recently read groups. Groups not in a
		// task's memory are read on a miss and when a cold window closes;
		// 32 MB (4x the default) keeps the index and filter blocks of
		// ~10^8 stored groups resident, so a miss costs at most one data
		// block read. It is a fixed bound, whatever the state's size.
		Cache: blockCache,
		// One compaction at a time: the machine the engine is sized for has
		// 2 cores, and a task's own work (decoding, folding) needs one.
		// Pebble may still raise it when read amplification climbs.
		CompactionConcurrencyRange: func() (int, int) { return 1, 2 },
		// Accumulators are rewritten at every commit while their window is
		// open and deleted when it closes. A memtable that holds a few
		// windows' worth lets most of that churn cancel out in memory
		// instead of being flushed and compacted; 4 MB (the default) made
		// compaction a fifth of a stream's CPU. Memory stays bounded: at
		// most two memtables exist at once.
		MemTableSize:                memtable,
		MemTableStopWritesThreshold: 2,
		// L0 is compacted once 16 of its tables overlap (default 4), and
		// writes stop at 32 (default 12, which must stay above it). A
		// cached aggregation writing blind (partials of groups it did not
		// read) stores keys that are all new: nothing cancels out in the
		// memtable, and every flush is a fresh L0 table over the whole key
		// range. Compacting them into the base level four at a time
		// rewrote that level once per four flushes; sixteen at a time
		// rewrites it a quarter as often. What it costs is reads: a point
		// read checks up to 16 L0 tables more, each behind its bloom
		// filter (a miss of a group never stored skips them all), and a
		// window's close merges up to 16 more sorted runs.
		L0CompactionThreshold: 16,
		L0StopWritesThreshold: 32,
	}
	// Bloom filters on every level (10 bits a key, ~1% false positives).
	// The group key is the whole key (Split is the default, the key
	// itself), so a miss's SeekPrefixGE skips every table whose filter
	// says the group was never stored: a new group costs no block read.
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		return nil, fmt.Errorf("open state store %s: %w", dir, err)
	}
	// Tables of runs a crash left unwritten or uningested.
	if names, err := fs.List(dir); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, runFilePrefix) && strings.HasSuffix(n, runFileSuffix) {
				_ = fs.Remove(fs.PathJoin(dir, n))
			}
		}
	}
	ropts := popts.Clone()
	ropts.EnsureDefaults()
	// Runs are written with row blocks (table format v4), not the columnar
	// blocks of the newest format: a run is written once and read once in
	// order, and at 10^7 keys writing columnar blocks cost 15% more CPU per
	// event.
	runOpts := ropts.MakeWriterOptions(len(ropts.Levels)-1, min(sstable.TableFormatPebblev4, db.TableFormat()))
	// Nor compressed: a run's chunks (runchunk.go) are already coded
	// against themselves (keys by shared prefix, ids by difference). At
	// 10^7 keys snappy took a tenth of the ingest's CPU (and half a second
	// of the close's) to make the runs 260 MB instead of 370 MB, what
	// chunks that stored ids whole took compressed.
	runOpts.Compression = sstable.NoCompression
	// A run is never read by a point lookup (its keys are no group's), only
	// merged in order at its window's close: no filter to build.
	runOpts.FilterPolicy = nil
	// 32 KB blocks (default 4 KB): the close reads a window's runs side by
	// side, one iterator each, and per block loaded it pays a read, a
	// block-cache entry and a decompression; at 10^7 keys 4 KB blocks made
	// the close's CPU half again as much (and the runs' bytes 10% more).
	runOpts.BlockSize = 32 << 10
	return &Store{db: db, fs: fs, dir: dir, minFree: minFree, runOpts: runOpts, runReadOpt: ropts.MakeReaderOptions(), minRun: minRun, maxRuns: maxRuns, afterIngest: afterIngest}, nil
}

// CheckSpace returns a *DiskFullError while the state's file system has
// less free space than a commit must leave; nil otherwise. It looks at the
// disk at most every 250 ms.
func (s *Store) CheckSpace() error {
	s.spaceMu.Lock()
	defer s.spaceMu.Unlock()
	if time.Since(s.spaceAt) < 250*time.Millisecond {
		return s.spaceErr
	}
	s.spaceAt, s.spaceErr = time.Now(), nil
	du, err := s.fs.GetDiskUsage(s.dir)
	if err != nil {
		return nil // unknown: let Pebble try
	}
	if du.AvailBytes < s.minFree {
		s.spaceErr = &DiskFullError{Dir: s.dir, Free: du.AvailBytes, Needs: s.minFree}
	}
	return s.spaceErr
}

// Close flushes and closes the store.
func (s *Store) Close() error { return s.db.Close() }

const (
	// prefixAcc holds accumulators by (scope, key group, key, window);
	// legacyAcc is the same without a partition scope (see scope.go).
	prefixAcc  = 'b'
	legacyAcc  = 'a'
	prefixPart = 'p'
	prefixPlan = 'l'
	prefixTask = 't'
)

func streamPrefix(kind byte, stream string) []byte {
	b := make([]byte, 0, len(stream)+2)
	b = append(b, kind)
	b = append(b, stream...)
	return append(b, 0)
}

// AccKey encodes (stream, key group, key, window start) so that one
// stream's state is one contiguous range, ordered by key group.
func AccKey(stream string, kg uint16, key []byte, window int64) []byte {
	b := streamPrefix(prefixAcc, stream)
	b = binary.BigEndian.AppendUint16(b, kg)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return binary.BigEndian.AppendUint64(b, uint64(window)^(1<<63))
}

func decodeAccKey(stream string, k []byte) (kg uint16, key []byte, window int64, err error) {
	rest := k[len(stream)+2:]
	if len(rest) < 2 {
		return 0, nil, 0, errCorruptKey
	}
	kg = binary.BigEndian.Uint16(rest)
	rest = rest[2:]
	l, n := binary.Uvarint(rest)
	if n <= 0 || uint64(len(rest)-n) < l+8 {
		return 0, nil, 0, errCorruptKey
	}
	key = rest[n : n+int(l)]
	window = int64(binary.BigEndian.Uint64(rest[n+int(l):]) ^ (1 << 63))
	return kg, key, window, nil
}

var errCorruptKey = errors.New("state: corrupt key")

// PartitionMeta is what a task has applied from its input partition.
type PartitionMeta struct {
	Offset  int64 // next offset to read
	MaxTime int64 // max event time seen (millis); the partition watermark derives from it
	HasTime bool
	// Closed is the watermark the task's windows were closed up to (every
	// window due by it has been emitted); HasClosed false: none yet.
	Closed    int64
	HasClosed bool
	// Applied is how far the task had read when Offset restarts it further
	// back (a combine's pre-aggregation re-reads its unshipped windows):
	// rows below it are a replay, not new input. 0: Offset.
	Applied int64
}

func partKey(stream string, p int32) []byte {
	return binary.BigEndian.AppendUint32(streamPrefix(prefixPart, stream), uint32(p))
}

// Batch collects one commit of a stream's state.
type Batch struct {
	s      *Store
	b      *pebble.Batch
	stream string
	// task: a task's commit, which logs its own changes (EachChange);
	// other batches are shown to the watches (Watch).
	task bool
	// scope names the accumulators and groups the batch writes: the
	// stream's name, or one partition's scope of it (NewScopedBatch).
	scope  string
	closed bool
	// runs are the commit's partials written as tables, ingested just
	// before the batch is written (runs.go); nil: none.
	runs *runWriter
	// chunkDels are the run chunks the batch deletes (deleteRun), by
	// key: the changelog logs the deletion of each of their partials.
	chunkDels map[string][]byte
	hkey      []byte // AbsorbSorted's key of a held partial
}

// NewBatch starts a batch for stream (accumulators and groups under that
// very name).
func (s *Store) NewBatch(stream string) *Batch {
	return &Batch{s: s, b: s.db.NewBatch(), stream: stream, scope: stream}
}

// NewScopedBatch starts a batch of partition p's task of stream: its
// accumulators and groups go to the partition's scope (Scope), its
// positions and task values under the stream.
func (s *Store) NewScopedBatch(stream string, p int32) *Batch {
	return &Batch{s: s, b: s.db.NewBatch(), stream: stream, scope: Scope(stream, p), task: true}
}

// PutAcc stores the accumulators of one (key, window).
func (b *Batch) PutAcc(kg uint16, key []byte, window int64, val []byte) error {
	return b.b.Set(AccKey(b.scope, kg, key, window), val, nil)
}

// DeleteAcc removes the accumulators of a closed (key, window).
func (b *Batch) DeleteAcc(kg uint16, key []byte, window int64) error {
	return b.b.Delete(AccKey(b.scope, kg, key, window), nil)
}

// PutPartition records what the state has applied from partition p.
func (b *Batch) PutPartition(p int32, m PartitionMeta) error {
	return b.b.Set(partKey(b.stream, p), encodeMeta(m), nil)
}

// encodeMeta is the stored form of m: offset, max time, flags, then the
// closed watermark (flag 2) and the applied offset (flag 4).
func encodeMeta(m PartitionMeta) []byte {
	v := binary.AppendVarint(nil, m.Offset)
	v = binary.AppendVarint(v, m.MaxTime)
	flags := byte(0)
	if m.HasTime {
		flags |= 1
	}
	if m.HasClosed {
		flags |= 2
	}
	if m.Applied > m.Offset {
		flags |= 4
	}
	v = append(v, flags)
	if m.HasClosed {
		v = binary.AppendVarint(v, m.Closed)
	}
	if m.Applied > m.Offset {
		v = binary.AppendVarint(v, m.Applied)
	}
	return v
}

// PutTaskValue records a value an operator of partition p's task keeps
// with its state (say how far it has applied each source partition).
func (b *Batch) PutTaskValue(p int32, name string, val []byte) error {
	return b.b.Set(taskKey(b.stream, p, name), val, nil)
}

func taskKey(stream string, p int32, name string) []byte {
	k := binary.BigEndian.AppendUint32(streamPrefix(prefixTask, stream), uint32(p))
	return append(k, name...)
}

// TaskValue reads what PutTaskValue recorded (nil when nothing).
func (s *Store) TaskValue(stream string, p int32, name string) ([]byte, error) {
	v, closer, err := s.db.Get(taskKey(stream, p, name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state of %s/%d: %w", stream, p, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// Commit writes the batch durably (fsync) and releases it.
func (b *Batch) Commit() error {
	defer b.Close()
	if !b.task {
		if err := b.s.noteWatched(b); err != nil {
			return err
		}
	}
	// The runs first, the batch (their markers, the input offsets) after:
	// a crash between the two leaves runs without markers, which the
	// task's next open deletes (DropUnmarkedRuns, OpenRuns).
	ingested := b.Runs() > 0
	if err := b.ingestRuns(); err != nil {
		return err
	}
	if ingested && b.s.afterIngest != nil {
		b.s.afterIngest()
	}
	if err := b.b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit state of %s: %w", b.stream, err)
	}
	return nil
}

// Close discards an uncommitted batch; after Commit it does nothing. Pebble
// pools its batches: closing one twice would hand it to two users at once.
func (b *Batch) Close() {
	if b.closed {
		return
	}
	b.closed = true
	if b.runs != nil {
		b.runs.discard() // nothing left after an ingest
	}
	_ = b.b.Close()
}

// Partitions loads a stream's per-partition metadata.
func (s *Store) Partitions(stream string) (map[int32]PartitionMeta, error) {
	out := map[int32]PartitionMeta{}
	pre := streamPrefix(prefixPart, stream)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != len(pre)+4 {
			return nil, errCorruptKey
		}
		p := int32(binary.BigEndian.Uint32(k[len(pre):]))
		meta, err := decodeMeta(v)
		if err != nil {
			return nil, fmt.Errorf("state: partition metadata of %s/%d: %w", stream, p, err)
		}
		out[p] = meta
	}
	return out, it.Error()
}

// decodeMeta reads PutPartition's encoding: offset, max time, flags, and
// the closed watermark when flag 2 is set.
func decodeMeta(v []byte) (PartitionMeta, error) {
	off, n := binary.Varint(v)
	if n <= 0 {
		return PartitionMeta{}, errCorruptKey
	}
	mt, m := binary.Varint(v[n:])
	if m <= 0 || len(v) < n+m+1 {
		return PartitionMeta{}, errCorruptKey
	}
	flags := v[n+m]
	meta := PartitionMeta{Offset: off, MaxTime: mt, HasTime: flags&1 != 0}
	rest := v[n+m+1:]
	if flags&2 != 0 {
		c, k := binary.Varint(rest)
		if k <= 0 {
			return PartitionMeta{}, errCorruptKey
		}
		meta.Closed, meta.HasClosed = c, true
		rest = rest[k:]
	}
	if flags&4 != 0 {
		a, k := binary.Varint(rest)
		if k <= 0 {
			return PartitionMeta{}, errCorruptKey
		}
		meta.Applied = a
		rest = rest[k:]
	}
	if len(rest) != 0 {
		return PartitionMeta{}, errCorruptKey
	}
	return meta, nil
}

// AccsOfGroups calls fn for every stored (key group, key, window) of
// stream whose key group is in groups (ascending), in key order, seeking
// to each group instead of reading the whole stream; nil groups: all.
func (s *Store) AccsOfGroups(stream string, groups []uint16, fn func(kg uint16, key []byte, window int64, val []byte) error) error {
	if groups == nil {
		return s.Accs(stream, fn)
	}
	pre := streamPrefix(prefixAcc, stream)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return err
	}
	defer it.Close()
	for _, g := range groups {
		start := binary.BigEndian.AppendUint16(append([]byte(nil), pre...), g)
		for it.SeekGE(start); it.Valid(); it.Next() {
			kg, key, w, err := decodeAccKey(stream, it.Key())
			if err != nil {
				return err
			}
			if kg != g {
				break
			}
			if err := fn(kg, key, w, it.Value()); err != nil {
				return err
			}
		}
	}
	return it.Error()
}

// Accs calls fn for every stored (key group, key, window) of stream, in key
// order. key and val are only valid during the call.
func (s *Store) Accs(stream string, fn func(kg uint16, key []byte, window int64, val []byte) error) error {
	pre := streamPrefix(prefixAcc, stream)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		kg, key, w, err := decodeAccKey(stream, it.Key())
		if err != nil {
			return err
		}
		if err := fn(kg, key, w, it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// PutPlan records a decision made when the stream was created that must
// hold for its whole life (the strategy its cost rule chose: state is laid
// out for it), durably.
func (s *Store) PutPlan(stream, name, value string) error {
	k := append(streamPrefix(prefixPlan, stream), name...)
	if err := s.db.Set(k, []byte(value), pebble.Sync); err != nil {
		return fmt.Errorf("record plan of %s: %w", stream, err)
	}
	return nil
}

// Plan reads a decision recorded by PutPlan ("" when none).
func (s *Store) Plan(stream, name string) (string, error) {
	k := append(streamPrefix(prefixPlan, stream), name...)
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read plan of %s: %w", stream, err)
	}
	defer closer.Close()
	return string(v), nil
}

// DropStream deletes every key of stream (its state and positions).
func (s *Store) DropStream(stream string) error {
	// Every partition's scope of the stream starts with its prefix too.
	for _, k := range []byte{prefixAcc, legacyAcc, prefixGroup, legacyGroup, prefixPart, prefixPlan, prefixTask, prefixLocal} {
		pre := streamPrefix(k, stream)
		if err := s.db.DeleteRange(pre, upper(pre), pebble.Sync); err != nil {
			return fmt.Errorf("drop state of %s: %w", stream, err)
		}
	}
	return nil
}

// upper is the smallest key greater than every key with prefix pre. pre
// ends in 0x00, so bumping that byte is enough.
func upper(pre []byte) []byte {
	u := append([]byte(nil), pre...)
	u[len(u)-1]++
	return u
}

// Acc reads the stored accumulators of one (key group, key, window) of
// stream (nil when there are none): a point lookup.
func (s *Store) Acc(stream string, kg uint16, key []byte, window int64) ([]byte, error) {
	return s.get(stream, AccKey(stream, kg, key, window))
}

// get reads one key of stream's state (nil when absent), copied.
func (s *Store) get(stream string, k []byte) ([]byte, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state of %s: %w", stream, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}
