//go:build console

package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/state"
)

// TestConsoleChromium loads every console page in headless Chromium
// (Debian's chromium) against a running server and checks what the pages
// render, as text in the DOM: stream names and statuses, the topology with
// the hop's real internal topic name, its per-partition bars (the hot
// key's the tallest) and the null-keys counter, and the partitions. It
// then changes the server's state and waits for a page to show it without
// a reload (the pages poll). Screenshots of each page go to
// $TURBINE_CONSOLE_SHOTS (default: the test's temp dir).
//
// Run it with `make test-console` (go test -tags console); it needs the
// chromium binary (apt-get install chromium).
func TestConsoleChromium(t *testing.T) {
	browser := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
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
		`INSERT INTO clicks VALUES ` + strings.Join(rows, ", "),
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
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

	// Streams page: every stream, its status and strategy, linked to its
	// topology.
	body := text(base+"/", "table")
	for _, want := range []string{"per_user", "per_user_cmb", "big", "running", "repartition", "combine", "stateless"} {
		if !strings.Contains(body, want) {
			t.Errorf("streams page lacks %q:\n%s", want, body)
		}
	}
	shot("streams.png")
	attr, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`tr[data-stream="per_user"] a`), "href"))
	if err != nil || !attr.Exists {
		t.Fatalf("link to per_user's topology: %v", err)
	}
	href := attr.Value
	if href != "/topology?stream=per_user" {
		t.Fatalf("link %q", href)
	}

	// Topology of the repartition stream: source → hop → aggregate →
	// sink, the hop's internal topic by its real name, a bar per internal
	// partition with the hot key's the tallest, the null-keys counter.
	rep := shuffle.RepartitionTopic(srv.cfg.AppID, "clicks", []string{"user_id"})
	body = text(base+href, ".flow")
	for _, want := range []string{"source clicks", "repartition by user_id", rep, "aggregate per_user", "sink per_user"} {
		if !strings.Contains(body, want) {
			t.Errorf("topology lacks %q:\n%s", want, body)
		}
	}
	kinds := evalStrings(`Array.from(document.querySelectorAll(".flow .node")).map(n => n.dataset.kind)`)
	if strings.Join(kinds, ",") != "source,repartition,aggregate,sink" {
		t.Errorf("nodes %v", kinds)
	}
	got := evalStrings(`[document.querySelector(".internal-topic").textContent, document.querySelector(".null-keys").textContent]`)
	internal, nulls := got[0], got[1]
	if internal != rep || nulls != "5" {
		t.Errorf("internal topic %q, null keys %q; want %q and 5", internal, nulls, rep)
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
	if total != 60 || int32(most) != hot {
		t.Errorf("bars %v: want 60 records, the tallest on the hot key's partition %d", bars, hot)
	}
	hotClass, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector('svg.bars rect[data-partition="%d"]').classList.contains("hot")`, hot)))
	if err != nil || !hotClass {
		t.Errorf("the hot key's bar is not marked hot (%v)", err)
	}
	shot("topology-repartition.png")

	body = text(base+"/topology?stream=per_user_cmb", ".flow")
	for _, want := range []string{"combine by user_id", combineTopic(srv.cfg.AppID, "clicks", "per_user_cmb"), "partials shipped", "markers shipped"} {
		if !strings.Contains(body, want) {
			t.Errorf("combine topology lacks %q:\n%s", want, body)
		}
	}
	shot("topology-combine.png")

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
	shot("partitions.png")

	// The cluster page lists this process from its own heartbeat.
	body = text(base+"/cluster", "table")
	for _, want := range []string{srv.nodeID, srv.PGAddr(), "this node", "up"} {
		if !strings.Contains(body, want) {
			t.Errorf("cluster page lacks %q:\n%s", want, body)
		}
	}
	shot("cluster.png")

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
