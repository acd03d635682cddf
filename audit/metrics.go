package audit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// lateSeries are the counters of rows or partials dropped (or routed
// aside) as late: the input makes none possible.
var lateSeries = []string{"turbine_late_rows_total", "turbine_combine_late_partials_total"}

// lateFromMetrics reads the server's /metrics and sums the late counters
// per stream. It sees what SHOW STREAMS may not (a combine stream's late
// partials).
func lateFromMetrics(ctx context.Context, url string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	out := map[string]int64{}
	for _, name := range lateSeries {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" {
					out[l.GetValue()] += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out, nil
}
