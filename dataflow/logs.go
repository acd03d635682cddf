package dataflow

import (
	"sync"
	"time"
)

// Resumed is how many of the stage's partitions resumed from state (an
// input offset committed before), for the log line of a start.
func (s *Stage) Resumed() int {
	n := 0
	for _, t := range s.ownTasks() {
		if t.env.Restored.Offset > 0 {
			n++
		}
	}
	return n
}

// idleLogger logs a partition going idle on its timeout (its watermark
// then follows the others') and coming back with data, one line each.
func idleLogger(log Logger, topic string, p int32) func(bool) {
	return func(idle bool) {
		if idle {
			log.Info("partition idle: its watermark follows the others'", "topic", topic, "partition", p)
			return
		}
		log.Info("partition active again", "topic", topic, "partition", p)
	}
}

// lateBurstEvery bounds the late-row log to one line per stream per this
// long: a burst of late rows is one line with its count, not a line a row.
const lateBurstEvery = 10 * time.Second

// lateLog rate-limits the log of late rows, per stream.
type lateLog struct {
	mu      sync.Mutex
	last    map[string]time.Time
	pending map[string]int64
}

func newLateLog() *lateLog {
	return &lateLog{last: map[string]time.Time{}, pending: map[string]int64{}}
}

// note counts n late rows of env's stream, and logs what has piled up
// when the last line is older than lateBurstEvery.
func (l *lateLog) note(env *Env, n int, action string) {
	if n <= 0 {
		return
	}
	now := env.Now()
	l.mu.Lock()
	l.pending[env.Name] += int64(n)
	if now.Sub(l.last[env.Name]) < lateBurstEvery {
		l.mu.Unlock()
		return
	}
	count := l.pending[env.Name]
	l.pending[env.Name] = 0
	l.last[env.Name] = now
	l.mu.Unlock()
	// One line per burst: rows counts every late row of the stream since
	// its last such line (at most one each lateBurstEvery).
	env.Log.Info("late rows", "stream", env.Name, "partition", env.Partition, "rows", count, "action", action)
}
