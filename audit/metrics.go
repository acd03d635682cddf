package audit

import (
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// lateSeries counts rows dropped (or routed aside) as late: the input
// makes none possible. redeliveredSeries counts partials that reached a
// combine's merge stage after their window closed: under at-least-once a
// pre-aggregation that crashed after shipping ships again (the seed: such
// a partial is dropped and counted, never merged twice), so only
// exactly-once must show none.
const (
	lateSeries        = "turbine_late_rows_total"
	redeliveredSeries = "turbine_combine_late_partials_total"
)

// countersFromMetrics reads the server's /metrics and sums the late and
// the redelivered counters per stream. It sees what SHOW STREAMS does not
// (a combine stream's redelivered partials).
func countersFromMetrics(ctx context.Context, url string) (late, redelivered map[string]int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", url, err)
	}
	return perStream(fams[lateSeries]), perStream(fams[redeliveredSeries]), nil
}

// perStream sums a counter family by its stream label.
func perStream(f *dto.MetricFamily) map[string]int64 {
	out := map[string]int64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "stream" {
				out[l.GetValue()] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out
}
