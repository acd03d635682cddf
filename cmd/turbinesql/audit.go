package main

import (
	"os"

	"github.com/turbinesql/turbinesql/audit"
)

// runAudit is `turbinesql audit`: the crash audit of exactly-once streams
// (package audit), with this binary as the server it kills.
func runAudit(args []string) int {
	self, err := os.Executable()
	if err != nil {
		self = "turbinesql"
	}
	return audit.Main("turbinesql audit", args, audit.Defaults{
		Bin: self, Guarantee: "exactly_once", Kills: 10, Events: 200_000, Rate: 4000, TermShare: 0, CrashAfterTxn: 0.0005,
	})
}
