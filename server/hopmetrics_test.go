package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
)

// gathered sums each series of the registry by metric name and labels
// (as "name{k=v,...}", labels in their exported order).
func gathered(t *testing.T, srv *Server) map[string]float64 {
	t.Helper()
	fams, err := srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// TestHopMetrics checks the seed's hop families against the records on
// the internal topics: turbine_repartition_records_out_total per internal
// partition equals what each partition holds (the output distribution the
// console draws), NULL keys are counted, and the hop's lag is exported;
// a combine counts the partials and markers it ships.
func TestHopMetrics(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	var rows []string
	for i := 0; i < 50; i++ {
		user := fmt.Sprintf("'u%d'", i%7)
		if i%10 == 0 {
			user = "NULL"
		}
		if i%3 == 0 && i%10 != 0 {
			user = "'hot'"
		}
		rows = append(rows, fmt.Sprintf("('t%d', %s, TIMESTAMP '2026-01-01 00:00:%02d')", i%4, user, i))
	}
	for _, q := range []string{
		`CREATE SOURCE hm (tenant TEXT, user_id TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'hm', partitions = 2, partition_key = 'tenant')`,
		`CREATE STREAM hm_rep WITH (strategy = 'repartition', repartition_partitions = 4) AS SELECT user_id, COUNT(*) AS n FROM hm GROUP BY user_id, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`CREATE STREAM hm_cmb WITH (strategy = 'combine', combine_partitions = 4) AS SELECT user_id, COUNT(*) AS n FROM hm GROUP BY user_id, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`INSERT INTO hm VALUES ` + strings.Join(rows, ", "),
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rep := streamplan.RepartitionTopic(srv.cfg.AppID, "hm", []string{"user_id"})
	perPart := map[int32]int{}
	partials := 0
	if err := srv.kafka.ReadAll(ctx, rep, func(r *kgo.Record) error {
		if !isMarker(r) {
			perPart[r.Partition]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.kafka.ReadAll(ctx, combineTopic(srv.cfg.AppID, "hm", "hm_cmb"), func(r *kgo.Record) error {
		if !isMarker(r) {
			partials++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m := gathered(t, srv)
	total := 0
	for q := 0; q < 4; q++ {
		got := m[fmt.Sprintf("turbine_repartition_records_out_total{hop=%s,partition=%d}", rep, q)]
		if int(got) != perPart[int32(q)] {
			t.Errorf("partition %d: turbine_repartition_records_out_total = %v, the topic holds %d", q, got, perPart[int32(q)])
		}
		total += int(got)
	}
	if total != 50 {
		t.Errorf("records out %d, want 50", total)
	}
	// "hot" is 14 of 50 rows: its partition's bar dominates.
	hot := state.PartitionFor([]byte("hot"), 4)
	if perPart[hot] < 14 {
		t.Errorf("hot key's partition %d holds %d records", hot, perPart[hot])
	}
	if got := m["turbine_repartition_null_keys_total{hop="+rep+"}"]; got != 5 {
		t.Errorf("turbine_repartition_null_keys_total = %v, want 5", got)
	}
	if got := m["turbine_repartition_bytes_out_total{hop="+rep+",partition=0}"]; got <= 0 {
		t.Errorf("turbine_repartition_bytes_out_total of partition 0 = %v", got)
	}
	if _, ok := m["turbine_repartition_lag_records{hop="+rep+"}"]; !ok {
		t.Errorf("no turbine_repartition_lag_records for %s", rep)
	}
	shipped := 0.0
	for q := 0; q < 4; q++ {
		shipped += m[fmt.Sprintf("turbine_combine_partials_out_total{partition=%d,stream=hm_cmb}", q)]
	}
	if int(shipped) != partials || partials == 0 {
		t.Errorf("turbine_combine_partials_out_total = %v, the topic holds %d partials", shipped, partials)
	}
	if got := m["turbine_combine_markers_out_total{stream=hm_cmb}"]; got <= 0 {
		t.Errorf("turbine_combine_markers_out_total = %v", got)
	}
}
