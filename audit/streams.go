package audit

import (
	"fmt"
	"strings"
)

// kind is a stream's window kind.
type kind string

const (
	tumble  kind = "TUMBLE"
	hop     kind = "HOP"
	session kind = "SESSION"
	emit    kind = "EMIT EVERY" // TUMBLE with early fires; only the final pane is audited
	upsert  kind = "upsert"     // GROUP BY without a window: the last value per key is audited
)

// plan is how rows reach their group.
type plan string

const (
	local       plan = "local"       // GROUP BY tenant, the partition key
	repartition plan = "repartition" // GROUP BY user_id through the repartition hop
	combine     plan = "combine"     // GROUP BY user_id, partial aggregates shipped and merged
)

// streamSpec is one audited stream.
type streamSpec struct {
	name string
	kind kind
	plan plan
	// prefix starts every topic name of the run (empty on the audit's own
	// broker; a run-unique one on a cluster given to it).
	prefix string
	// guarantee is the stream's processing_guarantee.
	guarantee string
}

// keyCol is the GROUP BY column: the partition key for a local plan.
func (s streamSpec) keyCol() string {
	if s.plan == local {
		return "tenant"
	}
	return "user_id"
}

func (s streamSpec) topic() string { return s.prefix + "out_" + s.name }

// lateTopic is where the stream writes late rows ("" when it cannot:
// combine refuses late_data_topic; upsert streams have no late rows). The
// topic keeps them across restarts, where SHOW STREAMS's count does not.
func (s streamSpec) lateTopic() string {
	if s.plan == combine || s.kind == upsert {
		return ""
	}
	return s.prefix + "late_" + s.name
}

// specs lists every (window kind × plan) the engine allows: combine takes
// TUMBLE and HOP windows, with or without EMIT EVERY, and no SESSION or
// upsert.
func specs(prefix, guarantee string) []streamSpec {
	var out []streamSpec
	for _, p := range []plan{local, repartition, combine} {
		for _, k := range []kind{tumble, hop, session, emit, upsert} {
			if p == combine && (k == session || k == upsert) {
				continue
			}
			name := strings.ToLower(strings.Fields(string(k))[0]) + "_" + string(p)
			out = append(out, streamSpec{name: name, kind: k, plan: p, prefix: prefix, guarantee: guarantee})
		}
	}
	return out
}

const sourceSQL = `CREATE SOURCE ev (tenant TEXT, user_id TEXT, v BIGINT, ts TIMESTAMP,
  WATERMARK FOR ts AS ts - INTERVAL '%d' MILLISECOND)
  WITH (topic = '%sev', partitions = %d, partition_key = 'tenant', idle_timeout = INTERVAL '%s' SECOND)`

func (s streamSpec) sql() string {
	k := s.keyCol()
	with := fmt.Sprintf("topic = '%s', message_key = '%s', strategy = '%s', processing_guarantee = '%s'", s.topic(), k, s.plan, s.guarantee)
	if lt := s.lateTopic(); lt != "" {
		with += fmt.Sprintf(", late_data_topic = '%s'", lt)
	}
	ms := func(n int) string { return fmt.Sprintf("INTERVAL '%d' MILLISECOND", n) }
	var sel, group, tail string
	switch s.kind {
	case tumble, emit:
		sel = fmt.Sprintf("TUMBLE_START(ts, %s) AS ws,", ms(tumbleMs))
		group = fmt.Sprintf(", TUMBLE(ts, %s)", ms(tumbleMs))
		if s.kind == emit {
			tail = " EMIT EVERY INTERVAL '" + emitEvery + "' SECOND"
		}
	case hop:
		sel = fmt.Sprintf("HOP_START(ts, %s, %s) AS ws,", ms(hopSlide), ms(hopSize))
		group = fmt.Sprintf(", HOP(ts, %s, %s)", ms(hopSlide), ms(hopSize))
	case session:
		sel = fmt.Sprintf("SESSION_START(ts, %s) AS ws, SESSION_END(ts, %s) AS we,", ms(sessionMs), ms(sessionMs))
		group = fmt.Sprintf(", SESSION(ts, %s)", ms(sessionMs))
	}
	// Every message is keyed by the group key, so all panes of one key sit
	// on one output partition in the order they were written: "the last
	// pane" is well defined, as for a compacted topic or an upsert table.
	return fmt.Sprintf("CREATE STREAM %s WITH (%s) AS SELECT %s, %s COUNT(*) AS n, SUM(v) AS total FROM ev GROUP BY %s%s%s",
		s.name, with, k, sel, k, group, tail)
}
