package server

import (
	"context"
	"sort"
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/kafkaio"
)

// catalogLog keeps the catalog in a compacted Kafka topic: one record per
// object keyed "kind/name" holding the statement that created it, a
// tombstone when it is dropped. Every node of an app replays the same log.
type catalogLog struct {
	k     *kafkaio.Client
	topic string
}

type catalogEntry struct {
	kind, name, sql string
	offset          int64
}

// ensure creates the catalog topic (compacted) if it does not exist.
func (l *catalogLog) ensure(ctx context.Context) error { return l.k.EnsureCompacted(ctx, l.topic, 1) }

func (l *catalogLog) Put(kind catalog.Kind, name, sql string) error {
	return l.k.ProduceSync(context.Background(), []*kafkaio.Record{{Topic: l.topic, Key: []byte(string(kind) + "/" + name), Value: []byte(sql)}})
}

func (l *catalogLog) Delete(kind catalog.Kind, name string) error {
	return l.k.ProduceSync(context.Background(), []*kafkaio.Record{{Topic: l.topic, Key: []byte(string(kind) + "/" + name), Value: nil}})
}

// load returns the live entries: users and sources first (a source's
// record moves to the end of the log when ALTER SOURCE rewrites it, and no
// source depends on another), then streams in the order they were created,
// so a stream comes after the relations it reads.
func (l *catalogLog) load(ctx context.Context) ([]catalogEntry, error) {
	live := map[string]catalogEntry{}
	err := l.k.ReadAll(ctx, l.topic, func(r *kafkaio.Record) error {
		key := string(r.Key)
		if r.Value == nil {
			delete(live, key)
			return nil
		}
		kind, name, _ := strings.Cut(key, "/")
		live[key] = catalogEntry{kind: kind, name: name, sql: string(r.Value), offset: r.Offset}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]catalogEntry, 0, len(live))
	for _, e := range live {
		out = append(out, e)
	}
	rank := func(e catalogEntry) int {
		if catalog.Kind(e.kind) == catalog.KindStream {
			return 1
		}
		return 0
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := rank(out[i]), rank(out[j]); ri != rj {
			return ri < rj
		}
		return out[i].offset < out[j].offset
	})
	return out, nil
}
