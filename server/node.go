package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// nodeIDFile keeps, in the data dir, the node id a server made up at its
// first start.
const nodeIDFile = "node-id"

// nodeID is the process's name among the app's processes: the configured
// one, else the one its data dir keeps (made up at the first start). It is
// each stage's static member id (so a restart takes its partitions back at
// once, before the group would move them) and must differ between the
// processes of one app: one data dir per process gives that.
func nodeID(cfg Config) (string, error) {
	if cfg.NodeID != "" {
		return cfg.NodeID, nil
	}
	path := filepath.Join(cfg.DataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read node id: %w", err)
	}
	raw := make([]byte, 6)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	id := "node-" + hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("keep node id in %s: %w", path, err)
	}
	return id, nil
}
