package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// notReady is one reason /readyz gives for answering 503.
type notReady struct {
	What   string `json:"what"`   // "catalog", "kafka", "stream <name>", "source <name>"
	Reason string `json:"reason"` // restoring, broker unreachable: ..., failed: ...
}

// healthz answers 200 while the process serves HTTP at all.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// readyz answers 200 once the catalog is replayed, the broker answers and
// every stream runs; otherwise 503 with what is not ready.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	problems := s.readiness(ctx)
	w.Header().Set("Content-Type", "application/json")
	body := struct {
		Status   string     `json:"status"`
		NotReady []notReady `json:"not_ready,omitempty"`
	}{Status: "ready", NotReady: problems}
	if len(problems) > 0 {
		body.Status = "not ready"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

func (s *Server) readiness(ctx context.Context) []notReady {
	if !s.replayed.Load() {
		return []notReady{{What: "catalog", Reason: "restoring: the catalog is being replayed"}}
	}
	var out []notReady
	if err := s.kafka.Ping(ctx); err != nil {
		out = append(out, notReady{What: "kafka", Reason: "broker unreachable: " + err.Error()})
	}
	s.mu.Lock()
	for _, def := range s.cat.Streams() {
		r, ok := s.streams[def.Name]
		if !ok {
			out = append(out, notReady{What: "stream " + def.Name, Reason: "not running"})
			continue
		}
		if status, err := r.status(); status == "failed" {
			out = append(out, notReady{What: "stream " + def.Name, Reason: "failed: " + errText(err)})
		}
	}
	s.mu.Unlock()
	for _, f := range s.failedObjects() {
		out = append(out, notReady{What: f.kind + " " + f.name, Reason: "failed at catalog replay: " + f.err})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].What < out[j].What })
	return out
}

func errText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}
