package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/window"
)

// hopLoop is what the repartition hop and the combine hop's
// pre-aggregation share: a consumer of every partition of a source, the
// source partitions' positions, event time and idleness, the loop that
// feeds fetches, idleness changes and FLUSH requests to a hopStage, and
// the failure state a FLUSH reports.
type hopLoop struct {
	srv   *Server
	topic string // the internal topic written
	log   *slog.Logger
	wms   *window.Watermarks
	idle  map[int32]bool // idleness last announced per source partition

	cl      *kgo.Client
	cancel  context.CancelFunc
	done    chan struct{}
	flushCh chan *flushReq
	pending []*flushReq
	mu      sync.Mutex
	err     error
}

// hopStage is what differs between the hops.
type hopStage interface {
	// process handles one fetch of the source.
	process(ctx context.Context, fs kgo.Fetches) error
	// handOver tells the internal topic's readers about the given source
	// partitions (markers; the combine hop first ships what they hold when
	// all is set, as on idleness or FLUSH).
	handOver(ctx context.Context, which map[int32]bool, all bool) error
}

// newWatermarks tracks the partitions of an input with watermark wm (nil:
// delay 0) read from src (nil: a stream's output), whose idle_timeout
// applies.
func (s *Server) newWatermarks(wm *catalog.Watermark, src *catalog.Source) *window.Watermarks {
	delay := int64(0)
	if wm != nil {
		delay = wm.DelayMs
	}
	idle := int64(DefaultIdleTimeoutMs)
	if src != nil && src.IdleTimeoutMs > 0 {
		idle = src.IdleTimeoutMs
	}
	return window.NewWatermarks(delay, time.Duration(idle)*time.Millisecond, s.clock)
}

func newHopLoop(srv *Server, topic string, log *slog.Logger, wms *window.Watermarks) hopLoop {
	return hopLoop{srv: srv, topic: topic, log: log, wms: wms, idle: map[int32]bool{},
		done: make(chan struct{}), flushCh: make(chan *flushReq)}
}

func (l *hopLoop) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *hopLoop) fail(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	l.log.Error("hop failed", "err", err)
}

func (l *hopLoop) stop() {
	l.cancel()
	<-l.done
	l.cl.Close()
}

// start runs the loop over cl in the background.
func (l *hopLoop) start(cl *kgo.Client, st hopStage) {
	l.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(ctx, st)
}

func (l *hopLoop) run(ctx context.Context, st hopStage) {
	defer close(l.done)
	fetches := make(chan kgo.Fetches)
	go pollInto(ctx, l.cl, l.srv.pollRecords(), fetches)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	// Readers hear from every source partition at once, restored or new.
	all := map[int32]bool{}
	for p := range l.wms.Parts() {
		all[p] = true
	}
	l.try(ctx, func() error { return st.handOver(ctx, all, false) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// Source partitions that went idle (or came back) are announced;
			// one going idle hands over what it holds.
			changed := map[int32]bool{}
			for p, ps := range l.wms.Parts() {
				if idle := l.wms.Idle(ps); idle != l.idle[p] {
					changed[p] = true
				}
			}
			if len(changed) > 0 {
				l.try(ctx, func() error { return st.handOver(ctx, changed, true) })
			}
		case fs := <-fetches:
			l.try(ctx, func() error { return st.process(ctx, fs) })
		case req := <-l.flushCh:
			l.pending = append(l.pending, req)
		}
		if len(l.pending) > 0 {
			l.pending = answerHopFlushes(l.pending, l.wms, l.failed(), l.topic, func(flushed map[int32]bool) error {
				return st.handOver(ctx, flushed, true)
			})
		}
	}
}

// try runs f unless the hop has failed, and records its failure.
func (l *hopLoop) try(ctx context.Context, f func() error) {
	if l.failed() != nil {
		return
	}
	if err := f(); err != nil && ctx.Err() == nil {
		l.fail(err)
	}
}

// flush blocks until the hop has read its source up to targets and handed
// over everything for them (FLUSH: partitions at their end are idle).
func (l *hopLoop) flush(ctx context.Context, targets map[int32]int64) error {
	return requestFlush(ctx, l.flushCh, l.done, errHopStopped(l.topic), targets)
}
