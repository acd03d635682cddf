package window

import (
	"maps"
	"sync"
	"time"
)

// Clock gives the wall-clock time; tests inject a fake one.
type Clock func() time.Time

// Partition is one input partition's event-time progress, as the task that
// reads it sees it. It belongs to that task's goroutine.
//
// Its own watermark is the largest event time read minus the delay. Its
// effective watermark, the one that closes windows and that hops send to
// their readers, adds idleness: a partition with nothing to read for
// IdleTimeout, confirmed on an end offset fetched after the timeout
// (ConfirmIdle, never on an end remembered from an earlier fetch), advances
// with processing time from the moment it went idle, but never past the
// highest own watermark among its peers (the other partitions of the same
// input). A partition that never had data, or one with no peers, therefore
// moves only with its own rows, or with a FLUSH: a FLUSH that read it to
// its end lifts it to the highest watermark its peers had then. The lift
// does not follow the peers afterwards: rows written after the FLUSH may
// reach a peer before they reach this partition's task, and a watermark
// that followed the peer would make this partition's own new rows late.
type Partition struct {
	ID          int32
	Delay       int64
	IdleTimeout time.Duration
	Now         Clock
	Peers       *Peers // nil: no peers
	// OnIdle, when set, hears the partition go idle on its timeout (true)
	// and come back with data (false); FLUSH's passing idleness is not
	// reported, it would be a pair of lines at every FLUSH.
	OnIdle func(idle bool)
	// FeedsMerge: the watermark is sent on to where partitions meet (a
	// hop's markers), so an idle partition without an event time takes
	// its peers' confirmed watermark (see the type's comment).
	FeedsMerge bool

	Next    int64 // next offset to read
	End     int64 // log end offset last seen
	MaxTime int64 // largest event time read
	HasTime bool

	lastData  time.Time // when records last arrived, or tracking began
	idle      bool      // confirmed idle on a fresh end offset
	idleSince time.Time
	// idlePeer: the peers' highest own watermark known before the last
	// fresh end offset that found nothing more to read (hasIdlePeer
	// false: none yet); an idle partition advances no further.
	idlePeer    int64
	hasIdlePeer bool
	flushIdle   bool // read to its end by a FLUSH, until new data arrives
	// flushPeer: the peers' highest own watermark when the FLUSH read the
	// partition to its end (hasFlushPeer false: no peer had one).
	flushPeer    int64
	hasFlushPeer bool
	eff          int64
	hasEff       bool
}

// NewPartition starts tracking partition id from a restored position.
func NewPartition(id int32, delay int64, idle time.Duration, now Clock, peers *Peers, next, maxTime int64, hasTime bool) *Partition {
	if now == nil {
		now = time.Now
	}
	p := &Partition{ID: id, Delay: delay, IdleTimeout: idle, Now: now, Peers: peers, Next: next, End: next,
		MaxTime: maxTime, HasTime: hasTime, lastData: now()}
	p.publish()
	return p
}

// Own is the partition's own watermark: its largest event time minus the
// delay (ok false before any event time).
func (p *Partition) Own() (int64, bool) { return p.MaxTime - p.Delay, p.HasTime }

func (p *Partition) publish() {
	if p.Peers != nil {
		if wm, ok := p.Own(); ok {
			p.Peers.set(p.ID, wm)
		}
	}
}

// SawEnd records a log end offset a fetch reported.
func (p *Partition) SawEnd(end int64) {
	if end > p.End {
		p.End = end
	}
}

// Read records that records up to next (exclusive) were applied, with
// maxTime the largest event time among them (hasTime false: none had one).
func (p *Partition) Read(next, maxTime int64, hasTime bool) {
	p.Next = next
	if next > p.End {
		p.End = next
	}
	if hasTime && (!p.HasTime || maxTime > p.MaxTime) {
		p.MaxTime, p.HasTime = maxTime, true
		p.publish()
	}
	p.lastData = p.Now()
	if p.idle && p.OnIdle != nil {
		p.OnIdle(false)
	}
	p.idle, p.flushIdle = false, false
}

// Skip moves the position to next past records that carry no data (a
// transaction's commit or abort marker): no data arrived, so neither the
// event time nor idleness changes.
func (p *Partition) Skip(next int64) {
	p.Next = next
	if next > p.End {
		p.End = next
	}
}

// Quiet reports whether the partition has had nothing new for its idle
// timeout as far as it knows: the caller should then fetch its end offset
// afresh and call ConfirmIdle.
func (p *Partition) Quiet() bool {
	return !p.idle && p.Next >= p.End && p.Now().Sub(p.lastData) >= p.IdleTimeout
}

// QuietSince is when the partition's idle timeout ran out (meaningful
// when Quiet): an end offset fetched after it is fresh enough to confirm.
func (p *Partition) QuietSince() time.Time { return p.lastData.Add(p.IdleTimeout) }

// Following reports whether the partition is idle and its peers have
// moved past the watermark it last confirmed: the caller should then
// fetch its end offset afresh (taking PeerMarks before the fetch) and
// call ConfirmIdle, so it follows them.
func (p *Partition) Following() bool {
	if !p.idle || p.Peers == nil {
		return false
	}
	peer, ok := p.Peers.maxExcept(p.ID)
	return ok && (!p.hasIdlePeer || peer > p.idlePeer)
}

// ConfirmIdle takes a freshly fetched end offset and the peers' own
// watermarks as the task knew them before that fetch was sent. If there
// is still nothing to read, the partition is idle from now on (its
// watermark advances with processing time), and it may advance as far as
// those peers' highest; otherwise it has data and holds its watermark.
func (p *Partition) ConfirmIdle(freshEnd int64, before PeerMarks) {
	p.SawEnd(freshEnd)
	if p.Next < p.End {
		return // rows to read: it holds where it is
	}
	if !p.idle {
		if p.Now().Sub(p.lastData) < p.IdleTimeout {
			return
		}
		p.idle, p.idleSince = true, p.lastData.Add(p.IdleTimeout)
		if p.OnIdle != nil {
			p.OnIdle(true)
		}
	}
	if peer, ok := before.maxExcept(p.ID); ok && (!p.hasIdlePeer || peer > p.idlePeer) {
		p.idlePeer, p.hasIdlePeer = peer, true
	}
}

// FlushedTo marks the partition read to target by a FLUSH: if it is there,
// it is idle at its end until new data arrives.
func (p *Partition) FlushedTo(target int64) {
	if p.Next < target {
		return
	}
	p.SawEnd(target)
	p.flushIdle = p.Next >= p.End
	p.hasFlushPeer = false
	if p.flushIdle && p.Peers != nil {
		p.flushPeer, p.hasFlushPeer = p.Peers.maxExcept(p.ID)
	}
}

// Idle reports whether the partition is idle (confirmed, or by a FLUSH).
func (p *Partition) Idle() bool { return p.idle || p.flushIdle }

// Effective is the watermark that closes the partition's windows (see the
// type's comment). It never moves back.
func (p *Partition) Effective() (int64, bool) {
	own, hasOwn := p.Own()
	wm, ok := own, hasOwn
	raise := func(to int64) {
		if !ok || to > wm {
			wm, ok = to, true
		}
	}
	if p.flushIdle && p.hasFlushPeer {
		// Where the last FLUSH lifted it, and no further (see the type's
		// comment).
		raise(p.flushPeer)
	}
	if p.idle && p.hasIdlePeer {
		switch {
		case hasOwn:
			// Idle: its own watermark advanced by the processing time
			// since it went idle, never past the peers it confirmed.
			// What it reached before stays (eff never moves back).
			raise(min(own+p.Now().Sub(p.idleSince).Milliseconds(), p.idlePeer))
		case p.FeedsMerge:
			// Nothing of its own to advance: where the peers it
			// confirmed are (see the type's comment).
			raise(p.idlePeer)
		}
	}
	if ok && (!p.hasEff || wm > p.eff) {
		p.eff, p.hasEff = wm, true
	}
	return p.eff, p.hasEff
}

// Restore sets the effective watermark windows were closed at before a
// restart (it never moves back from there).
func (p *Partition) Restore(wm int64) { p.eff, p.hasEff = wm, true }

// Peers is what the partitions of one input share: each one's own
// watermark, so an idle partition never advances past the others. Safe for
// concurrent use by the tasks of a stage.
type Peers struct {
	mu  sync.Mutex
	own map[int32]int64
}

// NewPeers is an empty set of peers.
func NewPeers() *Peers { return &Peers{own: map[int32]int64{}} }

// Set records partition p's own watermark as another process read it
// (its task runs there): it only ever raises what is known.
func (s *Peers) Set(p int32, wm int64) { s.set(p, wm) }

func (s *Peers) set(p int32, wm int64) {
	s.mu.Lock()
	if old, ok := s.own[p]; !ok || wm > old {
		s.own[p] = wm
	}
	s.mu.Unlock()
}

// maxExcept is the highest own watermark among partitions other than p.
func (s *Peers) maxExcept(p int32) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maxExcept(s.own, p)
}

// Marks copies the peers' own watermarks as they stand: taken before an
// end offset is fetched, they are what ConfirmIdle may advance to (nil
// Peers: none).
func (s *Peers) Marks() PeerMarks {
	if s == nil {
		return PeerMarks{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return PeerMarks{own: maps.Clone(s.own)}
}

// PeerMarks are the own watermarks of an input's partitions at one moment
// (Peers.Marks).
type PeerMarks struct{ own map[int32]int64 }

// MarksOf builds PeerMarks from partition watermarks (tests, and callers
// that know them some other way).
func MarksOf(own map[int32]int64) PeerMarks { return PeerMarks{own: maps.Clone(own)} }

func (m PeerMarks) maxExcept(p int32) (int64, bool) { return maxExcept(m.own, p) }

func maxExcept(own map[int32]int64, p int32) (int64, bool) {
	var m int64
	ok := false
	for q, wm := range own {
		if q != p && (!ok || wm > m) {
			m, ok = wm, true
		}
	}
	return m, ok
}
