package server

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/streamplan"
)

// The processes of an app share their tasks' own watermarks through a
// compacted topic, turbine-{app-id}-watermarks, keyed {group}/{partition}:
// an idle partition advances with processing time no further than the
// highest own watermark among its peers (the other partitions of its
// input), and with a stage's partitions spread over several processes its
// peers are mostly elsewhere. A value counts for an idle partition once it
// is known here before a fresh fetch of the partition's end offset
// (window.Partition): the peer's task read the rows behind it before
// publishing it, so rows written to the idle partition before those are
// below that end. A value late or lost only holds an idle partition (and
// the merge behind a hop) back a little longer; it never closes a window
// early.

// watermarkBoard publishes this process's task watermarks.
type watermarkBoard struct {
	topic string
	out   *kafkaio.Pending
}

func (s *Server) watermarkTopic() string {
	return streamplan.TopicName(streamplan.Topic{Kind: streamplan.TopicWatermarks, App: s.cfg.AppID})
}

// Publish sends one task's own watermark, without waiting.
func (b *watermarkBoard) Publish(group string, p int32, wm int64) {
	b.out.Produce(context.Background(), &kafkaio.Record{Topic: b.topic, Partition: 0,
		Key: []byte(group + "/" + strconv.Itoa(int(p))), Value: []byte(strconv.FormatInt(wm, 10))})
}

// followWatermarks reads the watermarks topic from its start and hands
// every value to the stage of its group, until ctx ends; Kafka out of
// reach, it tries again.
func (s *Server) followWatermarks(ctx context.Context) {
	for ctx.Err() == nil {
		if err := s.followWatermarksOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Debug("following the watermarks topic", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (s *Server) followWatermarksOnce(ctx context.Context) error {
	tail, _, err := s.kafka.NewTail(ctx, s.watermarkTopic(), kafkaio.TailFromStart, nil)
	if err != nil {
		return err
	}
	defer tail.Close()
	for {
		recs, next, err := tail.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			s.notePeer(string(r.Key), string(r.Value))
		}
		if n, ok := next[0]; ok {
			s.wmRead.Store(n)
		}
	}
}

// notePeer applies one record of the watermarks topic.
func (s *Server) notePeer(key, val string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return
	}
	p, err := strconv.Atoi(key[i+1:])
	if err != nil {
		return
	}
	wm, err := strconv.ParseInt(val, 10, 64)
	if err != nil {
		return
	}
	group := key[:i]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.streams {
		for _, st := range []*dataflow.Stage{r.pre, r.final} {
			if st != nil && st.Group() == group {
				st.NotePeer(int32(p), wm)
			}
		}
	}
	for _, h := range s.hops {
		if h.stage != nil && h.stage.Group() == group {
			h.stage.NotePeer(int32(p), wm)
		}
	}
}
