package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The disk-full fault: the server's data dir is a small tmpfs of its own,
// and a ballast file fills it to its last few hundred KB while input keeps
// arriving. The streams must stall (SHOW STREAMS: "stalled: disk full"),
// the server stay up, and everything resume, exactly, once the ballast is
// gone. Needs root (mount); CI runs as root.

// diskMB is the size of the data dir's tmpfs.
const diskMB = 256

// mountDisk mounts a tmpfs at dir.
func mountDisk(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", diskMB), "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount a tmpfs for the disk-full fault (needs root; -disk-full 0 skips it): %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func unmountDisk(dir string) {
	_ = exec.Command("umount", "-l", dir).Run()
}

// fillDisk fills the data dir's file system, waits for a stream to report
// the stall, holds the disk full a while, then frees it.
func (c *chaos) fillDisk(ctx context.Context) error {
	t0 := time.Now()
	ballast := filepath.Join(c.cfg.dataDir, "ballast")
	f, err := os.Create(ballast)
	if err != nil {
		return err
	}
	chunk := make([]byte, 256<<10)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(c.cfg.dataDir, &st); err != nil {
			f.Close()
			return err
		}
		if st.Bavail*uint64(st.Bsize) < 512<<10 {
			break
		}
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			f.Close()
			return err
		}
	}
	f.Close()
	// Input keeps arriving: some stream must come to a commit and stall.
	stalled := false
	deadline := time.Now().Add(10 * time.Second)
	for !stalled && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		if err := c.pollOnce(ctx); err != nil {
			continue
		}
		c.mu.Lock()
		for _, st := range c.status {
			stalled = stalled || strings.HasPrefix(st, "stalled: disk full")
		}
		c.mu.Unlock()
	}
	time.Sleep(2 * time.Second)
	if err := os.Remove(ballast); err != nil {
		return err
	}
	if !stalled {
		return engineFailure{errors.New("the disk was full for 10 s and no stream reported 'stalled: disk full'")}
	}
	c.diskFulls++
	c.logf("disk full at input event time %s: streams stalled, freed after %s", c.eventTime(), time.Since(t0).Round(time.Millisecond))
	return nil
}
