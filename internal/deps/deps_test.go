// Package deps holds a test that keeps the package dependency direction:
// low packages never import high ones, and the SQL front end knows nothing
// of Kafka.
package deps

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/turbinesql/turbinesql/"

func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[strings.TrimPrefix(f[0], mod)] = f[1:]
	}
	rules := []struct {
		pkgs      []string
		forbidden []string
	}{
		{[]string{"agg", "window", "shuffle", "state", "types", "exec", "catalog", "sql", "sizing", "pgcat", "cluster"},
			[]string{mod + "planner", mod + "pgwire", mod + "server", mod + "cmd/", mod + "bounded"}},
		{[]string{"planner"}, []string{mod + "bounded", mod + "server"}},
		{[]string{"sql", "types", "agg", "exec", "planner", "catalog", "pgwire", "sizing", "pgcat", "bounded"},
			[]string{"github.com/twmb/franz-go"}},
		// Membership reaches the control topic through its own Log
		// interface, so it is tested without a broker.
		{[]string{"cluster"}, []string{"github.com/twmb/franz-go", mod + "kafkaio", mod + "dataflow"}},
		{[]string{"pgwire"}, []string{mod + "sql", mod + "catalog", mod + "exec"}},
		// The purger reaches Kafka through its own small interface and is
		// told its targets, so its rule is tested without a broker.
		{[]string{"purge"}, []string{"github.com/twmb/franz-go", mod + "kafkaio", mod + "server", mod + "dataflow", mod + "catalog"}},
		// The runtime never sees the server: it gets what it needs through
		// its own small interfaces.
		{[]string{"dataflow", "kafkaio"}, []string{mod + "server", mod + "pgwire", mod + "cmd/"}},
		// Connection settings and config loading know nothing of the engine.
		// The offline rescale reads and writes state as data: never the
		// runtime or the server.
		{[]string{"rescale"}, []string{mod + "server", mod + "pgwire", mod + "dataflow", mod + "planner", mod + "cmd/"}},
		{[]string{"kafkaio", "config"}, []string{mod + "server", mod + "pgwire", mod + "planner", mod + "sql", mod + "catalog", mod + "cmd/"}},
		// The stream graph is the contract between the planner and the
		// runtime: it knows neither, nor the catalog, the wire, Kafka.
		// (It reaches sql only through exec's errors: TestStreamplanImports
		// keeps its own imports to the kernels.)
		{[]string{"streamplan"}, []string{mod + "planner", mod + "catalog", mod + "pgcat", mod + "pgwire", mod + "bounded", mod + "server",
			mod + "dataflow", mod + "kafkaio", mod + "cmd/", "github.com/twmb/franz-go"}},
	}
	checked := 0
	for _, r := range rules {
		for _, p := range r.pkgs {
			ds, ok := deps[p]
			if !ok {
				continue // not written yet (window)
			}
			checked++
			for _, d := range ds {
				for _, f := range r.forbidden {
					if strings.HasPrefix(d, f) {
						t.Errorf("%s imports %s", p, d)
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked: go list output not understood", checked)
	}
}

// TestOnlyKafkaioTalksToKafka: kafkaio is the one engine package that
// imports franz-go (besides the binary in cmd/, the audit, which reads and
// writes Kafka as any outside client does, and the benchmarks and CI
// programs, which act as outside producers). Tests may use the client as
// an outside producer or reader would.
func TestOnlyKafkaioTalksToKafka(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := func(p string) bool {
		return p == "kafkaio" || p == "audit" || strings.HasPrefix(p, "cmd/") || strings.HasPrefix(p, "bench/") || strings.HasPrefix(p, "ci/")
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := strings.TrimPrefix(f[0], mod)
		if allowed(p) {
			continue
		}
		checked++
		for _, d := range f[1:] {
			if strings.HasPrefix(d, "github.com/twmb/franz-go") {
				t.Errorf("%s imports %s: only kafkaio talks to Kafka", p, d)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked: go list output not understood", checked)
	}
}

// TestStreamplanImports: the stream graph imports, of the engine, only
// what its specs hold (expressions, schemas, windows, aggregate functions)
// and the internal topics' prefix: never the SQL front end, the planner or
// the runtime.
func TestStreamplanImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "../../streamplan").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{"agg": true, "exec": true, "types": true, "window": true, "shuffle": true}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatal("go list output not understood")
	}
	for _, d := range imports {
		if p, ours := strings.CutPrefix(d, mod); ours && !allowed[p] {
			t.Errorf("streamplan imports %s", d)
		} else if !ours && strings.Contains(d, ".") {
			t.Errorf("streamplan imports %s: a leaf needs no outside module", d)
		}
	}
}

// TestHarnessKnowsNoSQL: the operator test harness (dataflow/optest)
// imports none of the SQL front end: operators are tested as the runtime
// runs them, whoever planned them. (Its own imports: the runtime itself
// still reaches the planner until the stream graph replaces it, issue 39.)
func TestHarnessKnowsNoSQL(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "../../dataflow/optest").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatal("go list output not understood: no imports")
	}
	for _, d := range imports {
		for _, f := range []string{"planner", "sql", "catalog", "pgcat", "pgwire", "bounded", "server"} {
			if d == mod+f {
				t.Errorf("dataflow/optest imports %s", d)
			}
		}
	}
}
