package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/sql"
)

// CodeConnectionFailure is PostgreSQL's connection_failure: what a
// statement that needs Kafka gets while the broker cannot be reached.
const CodeConnectionFailure = "08006"

// newBrokerGauge is turbine_broker_up. Kafka's state is checked every
// second (watchBroker), logged once per change; streams keep running
// through an outage (their clients retry, their commits wait) and resume by
// themselves, while statements that need Kafka fail fast.
func newBrokerGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "turbine_broker_up", Help: "1 while Kafka answers metadata requests, 0 while it cannot be reached."})
	reg.MustRegister(g)
	return g
}

// setBrokerUp records the broker's state, logging when it changes.
func (s *Server) setBrokerUp(up bool, err error) {
	s.brokerMu.Lock()
	changed := up != s.brokerUp || !s.brokerKnown
	s.brokerUp, s.brokerKnown, s.brokerErr = up, true, err
	s.brokerMu.Unlock()
	if up {
		s.brokerGauge.Set(1)
	} else {
		s.brokerGauge.Set(0)
	}
	if !changed {
		return
	}
	if up {
		s.log.Info("Kafka is reachable", "brokers", strings.Join(s.kafka.Brokers(), ","))
	} else {
		s.log.Error("Kafka is unreachable: streams wait for it, statements that need it fail with 08006 until it answers", "brokers", strings.Join(s.kafka.Brokers(), ","), "err", err)
	}
}

// kafkaUp reports whether the broker answered at the last check.
func (s *Server) kafkaUp() bool {
	s.brokerMu.Lock()
	defer s.brokerMu.Unlock()
	return s.brokerUp
}

// needKafka fails a statement that needs Kafka while it cannot be reached
// (or before the catalog could be read from it), naming the brokers.
func (s *Server) needKafka() error {
	s.brokerMu.Lock()
	up, err := s.brokerUp, s.brokerErr
	s.brokerMu.Unlock()
	if up && s.replayed.Load() {
		return nil
	}
	msg := fmt.Sprintf("cannot reach Kafka at %s", strings.Join(s.kafka.Brokers(), ","))
	if err != nil {
		msg += ": " + err.Error()
	} else if up {
		msg = "the catalog is still being read from Kafka at " + strings.Join(s.kafka.Brokers(), ",")
	}
	return sql.Errorf(CodeConnectionFailure, "%s", msg).
		WithHint("the server retries by itself; statements that need Kafka work again once it answers (turbine_broker_up, /readyz)")
}

// watchBroker checks the broker every second until ctx ends.
func (s *Server) watchBroker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := s.kafka.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.setBrokerUp(err == nil, err)
	}
}

// bootWhenReachable reads the catalog once Kafka answers, when the server
// had to start without it, retrying with backoff.
func (s *Server) bootWhenReachable(ctx context.Context) {
	wait := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if s.kafkaUp() {
			bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := s.boot(bctx)
			cancel()
			if err == nil {
				return
			}
			s.log.Error("cannot read the catalog yet; retrying", "err", err, "in", wait)
		}
		wait = min(2*wait, 30*time.Second)
	}
}
