package server

import (
	"context"
	"fmt"

	"github.com/turbinesql/turbinesql/window"
)

// flushReq asks a runner or hop to report once it has processed up to
// targets (offsets per input partition).
type flushReq struct {
	targets map[int32]int64
	done    chan error
}

// requestFlush hands a flush to the loop reading ch and waits for its
// answer; stopped is the loop's done channel (stoppedErr is returned if it
// has ended).
func requestFlush(ctx context.Context, ch chan<- *flushReq, stopped <-chan struct{}, stoppedErr error, targets map[int32]int64) error {
	req := &flushReq{targets: targets, done: make(chan error, 1)}
	select {
	case ch <- req:
	case <-stopped:
		return stoppedErr
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answerHopFlushes answers the flushes of a hop whose targets it has read
// up to: those partitions are marked read to their end by a FLUSH (idle),
// then handOver tells the hop's readers (markers, and what it holds). The
// requests not ready yet are returned. A failed hop answers them all with
// its error.
func answerHopFlushes(pending []*flushReq, wms *window.Watermarks, failed error, name string, handOver func(map[int32]bool) error) []*flushReq {
	if failed != nil {
		for _, req := range pending {
			req.done <- fmt.Errorf("%s: %w", name, failed)
		}
		return nil
	}
	var keep []*flushReq
	for _, req := range pending {
		ready := true
		for p, t := range req.targets {
			if ps := wms.Part(p); ps != nil && ps.Next < t {
				ready = false
			}
		}
		if !ready {
			keep = append(keep, req)
			continue
		}
		flushed := map[int32]bool{}
		for p, t := range req.targets {
			wms.FlushedTo(p, t)
			flushed[p] = true
		}
		req.done <- handOver(flushed)
	}
	return keep
}

func errHopStopped(topic string) error { return fmt.Errorf("the hop writing %s stopped", topic) }
