//go:build console

package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
)

// TestConsoleChromium loads every console page in headless Chromium
// (Debian's chromium) against a running server and checks what the pages
// render, as text in the DOM: stream names and statuses, a failed
// stream's error, each stream's page (its SQL, its plan, its graph with
// the hop's real internal topic name, per-partition bars with the hot
// key's the tallest, the null-keys counter, a keyless combine named by
// what it combines, and charts of its last minutes fed by real
// records), the Sources page (columns, partitions and what they hold,
// placement), the partitions and the cluster, one node id for this
// process on both. Every page is laid out at 1,280 and 1,920 px: nothing
// is wider than the window and errors wrap. It then changes the server's
// state and waits for a page to show it without a reload (the pages
// poll). Screenshots of each page at both widths go to
// $TURBINE_CONSOLE_SHOTS (default: the test's temp dir).
//
// Run it with `make test-console` (go test -tags console); it needs the
// chromium binary (apt-get install chromium).
func TestConsoleChromium(t *testing.T) {
	browser := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const sampleEvery = 300 * time.Millisecond
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.consoleSampleEvery = sampleEvery })
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	var rows []string
	for i := 0; i < 60; i++ {
		user := fmt.Sprintf("'u%d'", i%9)
		switch {
		case i%12 == 0:
			user = "NULL"
		case i%2 == 0:
			user = "'hot'"
		}
		rows = append(rows, fmt.Sprintf("('t%d', %s, %d, TIMESTAMP '2026-01-01 00:00:%02d')", i%4, user, i, i))
	}
	for _, q := range []string{
		`CREATE SOURCE clicks (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'clicks', partitions = 4, partition_key = 'tenant')`,
		`CREATE STREAM per_user WITH (strategy = 'repartition') AS SELECT user_id, COUNT(*) AS n FROM clicks GROUP BY user_id, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`CREATE STREAM per_user_cmb WITH (strategy = 'combine') AS SELECT user_id, SUM(amount) AS total FROM clicks GROUP BY user_id, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`CREATE STREAM big AS SELECT tenant, amount FROM clicks WHERE amount > 50`,
		`CREATE STREAM per_tenant AS SELECT tenant, COUNT(*) AS n FROM clicks GROUP BY tenant, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`CREATE STREAM total_cmb WITH (strategy = 'combine') AS SELECT COUNT(*) AS n, SUM(amount) AS total FROM clicks GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`,
		// A source whose undecodable records go to its dead-letter topic,
		// and one whose stream fails on them.
		`CREATE SOURCE letters (id BIGINT, body TEXT) WITH (topic = 'letters', partitions = 1, on_error = 'dlq')`,
		`CREATE STREAM letters_out AS SELECT id, body FROM letters`,
		`CREATE SOURCE strict (id BIGINT, body TEXT) WITH (topic = 'strict', partitions = 1)`,
		`CREATE STREAM strict_out AS SELECT id, body FROM strict`,
		`INSERT INTO clicks VALUES ` + strings.Join(rows, ", "),
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Late rows and more records for the charts, after the history has
	// sampled the first ones (so a rate above zero shows between two
	// samples): a row of a window every partition's watermark has passed
	// (late for per_tenant and per_user), and the rows again.
	time.Sleep(3 * sampleEvery)
	for _, q := range []string{
		`INSERT INTO clicks VALUES ('t0', 'u1', 1, TIMESTAMP '2026-01-01 00:00:01'), ('t1', 'u1', 1, TIMESTAMP '2026-01-01 00:00:01'), ('t2', 'u1', 1, TIMESTAMP '2026-01-01 00:00:01'), ('t3', 'u1', 1, TIMESTAMP '2026-01-01 00:00:01')`,
		`INSERT INTO clicks VALUES ` + strings.Join(rows, ", "),
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A record no JSON decoder reads, long and without a space to break
	// at: strict_out fails on it with an error quoting it, letters_out
	// dead-letters it.
	garbage := "{" + strings.Repeat("not-json-at-all_", 30)
	for _, topic := range []string{"letters", "strict"} {
		if err := srv.kafka.ProduceOne(ctx, &kafkaio.Record{Topic: topic, Value: []byte(garbage)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "strict_out to fail on its undecodable record", func() bool {
		status, _ := streamStatus(ctx, t, conn, "strict_out")
		return status == "failed"
	})
	_, strictErr := streamStatus(ctx, t, conn, "strict_out")
	base := "http://" + srv.HTTPAddr()
	shots := os.Getenv("TURBINE_CONSOLE_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1500, 1000))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// text loads url and returns the rendered text of the first element
	// matching sel.
	text := func(url, sel string) string {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		return s
	}
	// eval runs a script on the page and decodes its result.
	evalStrings := func(js string) []string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		if len(png) < 1000 {
			t.Fatalf("screenshot %s: %d bytes", name, len(png))
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// evalInt runs a script on the page and decodes its number.
	evalInt := func(js string) int {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	// laidOut loads url at each width a user's window has, checks that
	// nothing is wider than the window (the page does not scroll sideways,
	// and every error and stream name is on screen, wrapped), and takes a
	// screenshot at each.
	laidOut := func(url, sel, name string) {
		t.Helper()
		for _, w := range []int64{1280, 1920} {
			if err := chromedp.Do(bctx, chromedp.EmulateViewport(w, 900), chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
				t.Fatalf("%s at %d px: %v", url, w, err)
			}
			if over := evalInt(`document.documentElement.scrollWidth - window.innerWidth`); over > 0 {
				t.Errorf("%s at %d px: the page is %d px wider than the window", url, w, over)
			}
			off := evalStrings(`Array.from(document.querySelectorAll(".error, .stream-name, .node, .chart-box, td.lag, .source-name, td.node-id")).
				filter(e => { const r = e.getBoundingClientRect(); return r.left < 0 || r.right > window.innerWidth + 0.5; }).
				map(e => e.className + ": " + e.textContent.slice(0, 60))`)
			if len(off) > 0 {
				t.Errorf("%s at %d px: off screen: %q", url, w, off)
			}
			shot(fmt.Sprintf("%s-%d.png", name, w))
		}
	}

	// Streams page: every stream, its status and strategy, linked to its
	// page; the failed stream's error in full, on screen and wrapped.
	laidOut(base+"/", "table", "streams")
	body := text(base+"/", "table")
	for _, want := range []string{"per_user", "per_user_cmb", "big", "running", "repartition", "combine", "stateless", "strict_out", "failed", strictErr} {
		if !strings.Contains(body, want) {
			t.Errorf("streams page lacks %q:\n%s", want, body)
		}
	}
	if len(strictErr) < 200 {
		t.Errorf("strict_out's error is %d characters, want a long one to check wrapping: %q", len(strictErr), strictErr)
	}
	// An inline element has a box per line it spans.
	errLines := evalInt(`document.querySelector('tr[data-error-of="strict_out"] .error').getClientRects().length`)
	if errLines < 2 {
		t.Errorf("strict_out's error is on %d line(s): it does not wrap", errLines)
	}
	// Lags are whole numbers of records.
	for _, lag := range evalStrings(`Array.from(document.querySelectorAll("td.lag")).map(e => e.textContent)`) {
		if !isWhole(lag) {
			t.Errorf("a lag reads %q, not a whole number", lag)
		}
	}
	attr, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`tr[data-stream="per_user"] a`), "href"))
	if err != nil || !attr.Exists {
		t.Fatalf("link to per_user's page: %v", err)
	}
	href := attr.Value
	if href != "/topology?stream=per_user" {
		t.Fatalf("link %q", href)
	}

	// A stream's page: its SQL, its plan as EXPLAIN prints it, its graph
	// source → hop → aggregate → sink with the hop's internal topic by its
	// real name, a bar per internal partition with the hot key's the
	// tallest, the null-keys counter, and its charts.
	rep := streamplan.RepartitionTopic(srv.cfg.AppID, "clicks", []string{"user_id"})
	body = text(base+href, ".flow")
	for _, want := range []string{"source clicks", "repartition by user_id", rep, "aggregate per_user", "sink per_user"} {
		if !strings.Contains(body, want) {
			t.Errorf("stream page lacks %q:\n%s", want, body)
		}
	}
	kinds := evalStrings(`Array.from(document.querySelectorAll(".flow .node")).map(n => n.dataset.kind)`)
	if strings.Join(kinds, ",") != "source,repartition,aggregate,sink" {
		t.Errorf("nodes %v", kinds)
	}
	got := evalStrings(`[document.querySelector("pre.sql").textContent, document.querySelector("pre.plan").textContent, document.querySelector(".strategy").textContent]`)
	if sqlText, plan, strategy := got[0], got[1], got[2]; !strings.Contains(sqlText, "CREATE STREAM per_user WITH (strategy = 'repartition')") ||
		!strings.Contains(plan, "Strategy: repartition (rule") || !strings.Contains(plan, "Repartition by user_id: internal topic "+rep) ||
		!strings.Contains(strategy, "repartition") || !strings.Contains(strategy, "rule ") {
		t.Errorf("per_user's page: SQL %q, strategy %q, plan:\n%s", sqlText, strategy, plan)
	}
	got = evalStrings(`[document.querySelector(".internal-topic").textContent, document.querySelector(".null-keys").textContent]`)
	internal, nulls := got[0], got[1]
	if internal != rep || nulls != "10" {
		t.Errorf("internal topic %q, null keys %q; want %q and 10 (5 of each of two inserts)", internal, nulls, rep)
	}
	bars := evalStrings(`Array.from(document.querySelectorAll("svg.bars text.bar-value")).map(e => e.textContent)`)
	hot := state.PartitionFor([]byte("hot"), 4)
	if len(bars) != 4 {
		t.Fatalf("bars %v, want one per internal partition", bars)
	}
	total, most := 0, 0
	counts := make([]int, len(bars))
	for i, b := range bars {
		if _, err := fmt.Sscan(b, &counts[i]); err != nil {
			t.Fatalf("bar %d reads %q", i, b)
		}
		total += counts[i]
		if counts[i] > counts[most] {
			most = i
		}
	}
	if total != 124 || int32(most) != hot {
		t.Errorf("bars %v: want 124 records, the tallest on the hot key's partition %d", bars, hot)
	}
	hotClass, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector('svg.bars rect[data-partition="%d"]').classList.contains("hot")`, hot)))
	if err != nil || !hotClass {
		t.Errorf("the hot key's bar is not marked hot (%v)", err)
	}
	// Its charts: one per series, each drawn from at least two samples,
	// the records that came in between samples as a rate above zero, the
	// late row as a late row.
	series := []string{"in_per_sec", "out_per_sec", "lag", "late_rows", "dead_lettered"}
	pollPage(t, bctx, "per_user's charts to show the rows inserted and the late row",
		`(() => { const c = k => document.querySelector('svg.chart[data-series="' + k + '"]');
		  if (!["in_per_sec", "out_per_sec", "lag", "late_rows", "dead_lettered"].every(k => c(k) && +c(k).dataset.samples >= 2)) return false;
		  const vals = k => Array.from(c(k).querySelectorAll("circle title")).map(e => parseFloat(e.textContent.split(": ")[1].replace(/,/g, "")));
		  return Math.max(...vals("in_per_sec")) > 0 && Math.max(...vals("late_rows")) >= 1; })()`)
	for _, k := range series {
		if n := evalInt(fmt.Sprintf(`document.querySelector('svg.chart[data-series="%s"] path.line').getAttribute("d").split(/[ML]/).filter(s => s.trim()).length`, k)); n < 2 {
			t.Errorf("chart %s draws %d points", k, n)
		}
	}
	laidOut(base+href, ".flow", "stream-repartition")

	body = text(base+"/topology?stream=per_user_cmb", ".flow")
	for _, want := range []string{"combine by user_id", combineTopic(srv.cfg.AppID, "clicks", "per_user_cmb"), "partials shipped", "markers shipped"} {
		if !strings.Contains(body, want) {
			t.Errorf("combine stream page lacks %q:\n%s", want, body)
		}
	}
	// The merge's watermark lag (wall clock minus 2026's event time: a
	// large number of seconds) is a whole number.
	wmLag := evalStrings(`Array.from(document.querySelectorAll(".node.combine dt")).filter(e => e.textContent.startsWith("merge watermark lag")).map(e => e.nextElementSibling.textContent)`)
	if len(wmLag) != 1 || !isWhole(wmLag[0]) {
		t.Errorf("merge watermark lag %q, want a whole number of seconds", wmLag)
	}
	laidOut(base+"/topology?stream=per_user_cmb", ".flow", "stream-combine")

	// A combine without a group key is named by what it combines.
	body = text(base+"/topology?stream=total_cmb", ".node.combine .node-title")
	// (Its aggregates as EXPLAIN prints them.)
	if body != "combine count(1), sum(amount) per window (no group key)" {
		t.Errorf("keyless combine node %q", body)
	}

	// The failed stream's page: its error, wrapped on screen; its SQL.
	laidOut(base+"/topology?stream=strict_out", ".error-box", "stream-failed")
	got = evalStrings(`[document.querySelector(".error-box .error").textContent, document.querySelector("pre.sql").textContent, document.querySelector(".stream-status").textContent]`)
	if got[0] != strictErr || !strings.Contains(got[1], "CREATE STREAM strict_out AS SELECT id, body FROM strict") || got[2] != "failed" {
		t.Errorf("failed stream's page: error %q (want %q), SQL %q, status %q", got[0], strictErr, got[1], got[2])
	}
	// The dead letter is on letters_out's chart.
	if _, err := chromedp.Run(bctx, chromedp.Navigate(base+"/topology?stream=letters_out")); err != nil {
		t.Fatal(err)
	}
	pollPage(t, bctx, "letters_out's dead-letters chart to reach 1",
		`(() => { const e = document.querySelector('svg.chart[data-series="dead_lettered"]');
		  return e && +e.dataset.samples >= 2 && document.querySelector('svg.chart[data-series="dead_lettered"]').closest("figure").querySelector(".chart-last").textContent === "1"; })()`)

	// Sources page: each source's columns with their types, its
	// partitions and the records each holds, its rate and placement, and
	// the streams reading it.
	laidOut(base+"/sources", ".source", "sources")
	clicks := `document.querySelector('section[data-source="clicks"]')`
	cols := evalStrings(`Array.from(` + clicks + `.querySelectorAll("table.columns tbody tr")).map(r => Array.from(r.cells).slice(0, 2).map(c => c.textContent).join(" "))`)
	if strings.Join(cols, ", ") != "tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP" {
		t.Errorf("clicks' columns %q", cols)
	}
	detail := evalStrings(`Array.from(` + clicks + `.querySelectorAll("table.columns tbody tr td:nth-child(3)")).map(e => e.textContent)`)
	if len(detail) != 4 || !strings.Contains(detail[0], "partition key") || !strings.Contains(detail[3], "watermark ts") {
		t.Errorf("clicks' column details %q", detail)
	}
	parts := evalStrings(`Array.from(` + clicks + `.querySelectorAll("table.partitions tbody tr")).map(r => r.cells[1].textContent.replace(/,/g, "") + "|" + r.cells[2].textContent)`)
	if len(parts) != 4 {
		t.Fatalf("clicks' partitions %q, want 4", parts)
	}
	sum := 0
	for _, p := range parts {
		var n int
		fmt.Sscan(strings.Split(p, "|")[0], &n)
		sum += n
		if v := strings.Split(p, "|")[1]; !strings.Contains(v, "(per_tenant)") || !(strings.Contains(v, "murmur2 placement confirmed") || strings.Contains(v, "well-placed keys so far")) {
			t.Errorf("a partition of clicks: placement %q, want per_tenant's verdict", v)
		}
	}
	if sum != 124 {
		t.Errorf("clicks' partitions hold %d records, want the 124 inserted", sum)
	}
	got = evalStrings(`[` + clicks + `.querySelector(".source-partitions").textContent, ` + clicks + `.querySelector(".placement").textContent, ` + clicks + `.querySelector(".source-rate").textContent, ` + clicks + `.textContent]`)
	if got[0] != "4" || !strings.Contains(got[1], "partition key tenant") || !strings.Contains(got[1], "checked by per_tenant") || !strings.HasSuffix(got[2], "/s") {
		t.Errorf("clicks: partitions %q, placement %q, rate %q", got[0], got[1], got[2])
	}
	for _, reader := range []string{"per_user", "per_user_cmb", "per_tenant", "total_cmb", "big"} {
		if !strings.Contains(got[3], reader) {
			t.Errorf("the Sources page does not list %s as reading clicks", reader)
		}
	}
	letters := evalStrings(`[document.querySelector('section[data-source="letters"]').textContent]`)[0]
	for _, want := range []string{"dlq → dead-letter topic letters.dlq", "id", "BIGINT", "no partition key", "letters_out"} {
		if !strings.Contains(letters, want) {
			t.Errorf("the letters source lacks %q: %s", want, letters)
		}
	}

	laidOut(base+"/partitions", "table", "partitions")
	body = text(base+"/partitions", "table")
	for _, want := range []string{"repartition hop", "aggregate", "merge", "pre-aggregation", "240"} {
		if !strings.Contains(body, want) {
			t.Errorf("partitions page lacks %q:\n%s", want, body)
		}
	}
	// The local keyed stream's partitions show their placement verdict
	// (INSERT places keys with murmur2, so never -1).
	if !strings.Contains(body, "murmur2 placement confirmed") && !strings.Contains(body, "well-placed keys so far") {
		t.Errorf("partitions page shows no placement verdict for per_tenant:\n%s", body)
	}
	// The repartition hop counts what it reads, per source partition.
	hopIn := evalStrings(`Array.from(document.querySelectorAll("tr")).filter(r => r.cells[1] && r.cells[1].textContent === "repartition hop").map(r => r.cells[4].textContent)`)
	hopTotal := 0
	for _, v := range hopIn {
		var n int
		fmt.Sscan(strings.ReplaceAll(v, ",", ""), &n)
		hopTotal += n
	}
	if len(hopIn) != 4 || hopTotal != 124 {
		t.Errorf("the repartition hop's partitions read %q, want 4 partitions and the 124 records inserted", hopIn)
	}
	// One name per node: the Partitions page names this process as the
	// Cluster page and SHOW CLUSTER do.
	nodes := evalStrings(`Array.from(document.querySelectorAll("td.node-id")).map(e => e.textContent)`)
	if len(nodes) == 0 {
		t.Fatal("no partition rows")
	}
	for _, n := range nodes {
		if n != srv.nodeID {
			t.Fatalf("the Partitions page names the node %q, the cluster %q", n, srv.nodeID)
		}
	}

	// The cluster page lists this process from its own heartbeat.
	laidOut(base+"/cluster", "table", "cluster")
	body = text(base+"/cluster", "table")
	for _, want := range []string{srv.nodeID, srv.PGAddr(), "this node", "up"} {
		if !strings.Contains(body, want) {
			t.Errorf("cluster page lacks %q:\n%s", want, body)
		}
	}

	// The page keeps itself current: a stream created after it loaded
	// shows up, with no reload.
	text(base+"/", "table")
	if _, err := conn.Exec(ctx, `CREATE STREAM late_comer AS SELECT tenant FROM clicks`); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(bctx, 15*time.Second)
	defer wcancel()
	if _, err := chromedp.Run(wctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-stream="late_comer"]`))); err != nil {
		t.Fatalf("the streams page did not show a new stream without a reload: %v", err)
	}
}

// pollPage waits (up to 30 s) for a script on the page to be true.
func pollPage(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ok, err := chromedp.Run(pctx, chromedp.Evaluate[bool](js))
		if err == nil && ok {
			return
		}
		select {
		case <-pctx.Done():
			t.Fatalf("timed out waiting for %s (last error: %v)", what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// isWhole reports whether s is a whole number as the console prints one.
func isWhole(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// chromiumPath finds Debian's chromium (or another Chrome). Under CI
// (CI_REQUIRE_CHROMIUM=1) its absence fails the test.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium required (CI_REQUIRE_CHROMIUM=1) but not found")
	}
	t.Skip("chromium not on PATH: apt-get install chromium")
	return ""
}
