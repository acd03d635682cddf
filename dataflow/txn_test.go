package dataflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestProgressRoundTrip: the watermark a commit gave its operators, and
// the process that committed, come back from the offset's metadata.
func TestProgressRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_796_000_000_123)
	wm := Watermark{WM: 42_000, Has: true, Idle: true, Now: now}
	got, holder, err := parseProgress(encodeProgress(wm, 7))
	if err != nil || got != wm || holder != 7 {
		t.Fatalf("parse(encode(%+v, 7)) = %+v, %d, %v", wm, got, holder, err)
	}
	if _, err := decodeProgress("something a tool wrote"); err == nil || errors.Is(err, errProgressVersion) {
		t.Fatalf("metadata that is not a progress: %v, want refused as not a progress", err)
	}
	// A newer release's progress is refused as such, even when its
	// fields look like this one's.
	newer := strings.Replace(encodeProgress(wm, 7), progressVersion, "turbine2", 1)
	if _, _, err := parseProgress(newer); !errors.Is(err, errProgressVersion) {
		t.Fatalf("progress %q: %v, want errProgressVersion", newer, err)
	}
}

// TestStartReportsTheFailureThatStoppedIt: a task of a stage's first
// assignment is fenced (the group moved its partition meanwhile) while the
// assignment still opens the others, whose opening then fails on the
// stage's cancelled context. The start reports the fencing, a failure a
// restart cures, not the cancellation: a restart that reported "context
// canceled" left its stream failed for good (a rescaled app under load
// kept a process's only stream failed, and FLUSH did not wait for it).
func TestStartReportsTheFailureThatStoppedIt(t *testing.T) {
	s := &Stage{cfg: StageConfig{Name: "w"}, deps: Deps{Log: slog.New(slog.DiscardHandler)}, current: make(chan struct{})}
	s.runCtx, s.cancel = context.WithCancel(context.Background())
	fenced := &TaskMigrated{Partition: 0, Err: kafkaio.ErrFenced}
	s.fail(fenced) // task 0's first commit, fenced
	<-s.runCtx.Done()
	s.openFailed(fmt.Errorf("start w partition 1: %w", s.runCtx.Err())) // the next task's opening
	s.noteJoined()
	err := s.AwaitAssigned(context.Background())
	var migrated *TaskMigrated
	if !errors.As(err, &migrated) {
		t.Fatalf("start: %v, want the fencing that stopped it (TaskMigrated)", err)
	}
}
