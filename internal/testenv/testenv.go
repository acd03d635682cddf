// Package testenv holds what tests need of the machine they run on.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Psql returns the path of psql. psql is optional on a developer's
// machine, so without it the test is skipped; CI sets CI_REQUIRE_PSQL=1
// (and installs psql), which makes its absence a failure instead, so the
// psql tests always run there.
func Psql(t testing.TB) string {
	t.Helper()
	psql, err := exec.LookPath("psql")
	if err == nil {
		return psql
	}
	if os.Getenv("CI_REQUIRE_PSQL") == "1" {
		t.Fatalf("psql required (CI_REQUIRE_PSQL=1) but not found: %v", err)
	}
	t.Skip("psql not on PATH: install postgresql-client (CI requires it with CI_REQUIRE_PSQL=1)")
	return ""
}
