package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// With TURBINE_TEST_BROKERS set (`make test-kafka`), the slt files run
// against one real Kafka cluster. The files use fixed topic names (`tx`,
// `people`, ...) as a user would, so they run one after another, each
// with its own app id, and the topics a file created are deleted when it
// ends: every file starts on a broker that has none of the others' topics,
// as it does on its own embedded broker.

// testBrokers is the shared cluster, "" for an embedded broker per server.
func testBrokers() string { return os.Getenv("TURBINE_TEST_BROKERS") }

// testKafkaConn is how to reach the shared cluster: ci/kafka/run.sh points
// the tests at a SASL_SSL listener with TURBINE_TEST_KAFKA_SASL_MECHANISM,
// _SASL_USERNAME, _SASL_PASSWORD and _TLS_CA.
func testKafkaConn() kafkaio.Conn {
	return kafkaio.Conn{
		Brokers:       strings.Split(testBrokers(), ","),
		SASLMechanism: os.Getenv("TURBINE_TEST_KAFKA_SASL_MECHANISM"),
		SASLUser:      os.Getenv("TURBINE_TEST_KAFKA_SASL_USERNAME"),
		SASLPassword:  os.Getenv("TURBINE_TEST_KAFKA_SASL_PASSWORD"),
		TLSCA:         os.Getenv("TURBINE_TEST_KAFKA_TLS_CA"),
	}
}

// sltRunID tells this test process's app ids from an earlier run's on a
// broker that outlives the run.
var sltRunID = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)

// sharedAppID is the app id of t's servers on the shared cluster: the same
// across a `restart` within one file, different between files and runs.
func sharedAppID(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, filepath.Base(t.Name()))
	return "slt-" + sltRunID + "-" + name
}

// isolateTopics records the cluster's topics now and, when t ends (after
// its servers are closed), deletes every topic that was not there before
// and waits until metadata no longer shows them.
func isolateTopics(t *testing.T) {
	t.Helper()
	// kgo answers a metadata request from its cache for MetadataMinAge
	// (5 s by default): the listing at cleanup would repeat this one and
	// find no topic created.
	conn := testKafkaConn()
	if err := conn.Validate(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(conn.Opts(kgo.MetadataMinAge(10 * time.Millisecond))...)
	if err != nil {
		t.Fatalf("kafka client for %s: %v", testBrokers(), err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := adm.ListTopics(ctx)
	if err != nil {
		cl.Close()
		t.Fatalf("list topics on %s: %v", testBrokers(), err)
	}
	t.Cleanup(func() {
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		now, err := adm.ListTopics(ctx)
		if err != nil {
			t.Errorf("list topics to clean up: %v", err)
			return
		}
		var created []string
		for name := range now {
			if _, ok := before[name]; !ok {
				created = append(created, name)
			}
		}
		if len(created) == 0 {
			return
		}
		sort.Strings(created)
		resp, err := adm.DeleteTopics(ctx, created...)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Errorf("delete topics %v: %v", created, err)
			return
		}
		for {
			now, err := adm.ListTopics(ctx, created...)
			left := 0
			if err == nil {
				for _, d := range now {
					if d.Err == nil {
						left++
					}
				}
			}
			if err == nil && left == 0 {
				return
			}
			select {
			case <-ctx.Done():
				t.Errorf("topics %v still listed after deleting them: %v", created, ctx.Err())
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}
