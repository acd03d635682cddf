package sql

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func nested(n int, open, inner, close string) string {
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

func wantTooComplex(t *testing.T, src string, err error) *Error {
	t.Helper()
	var se *Error
	if !errors.As(err, &se) || se.Code != CodeStatementTooComplex {
		t.Fatalf("%.60s...: got %v, want SQLSTATE 54001", src, err)
	}
	if !strings.Contains(se.Message, "statement too complex") || !strings.Contains(se.Message, "10000") {
		t.Errorf("message %q does not say what the limit is", se.Message)
	}
	return se
}

// TestNestingLimit: every kind of nesting is refused with 54001 one level
// past MaxNesting, and accepted at MaxNesting.
func TestNestingLimit(t *testing.T) {
	cases := []struct {
		name string
		make func(n int) string
	}{
		{"parentheses", func(n int) string { return "SELECT " + nested(n, "(", "a", ")") + " FROM t" }},
		{"function calls", func(n int) string { return "SELECT " + nested(n, "abs(", "a", ")") + " FROM t" }},
		{"unary minus", func(n int) string { return "SELECT " + strings.Repeat("- ", n) + "a FROM t" }},
		{"NOT", func(n int) string { return "SELECT a FROM t WHERE " + strings.Repeat("NOT ", n) + "b" }},
		{"CASE", func(n int) string {
			return "SELECT " + nested(n, "CASE WHEN b THEN ", "a", " END") + " FROM t"
		}},
		{"casts", func(n int) string { return "SELECT " + nested(n, "(", "a", "::bigint)") + " FROM t" }},
		{"mixed", func(n int) string { return "SELECT " + nested(n/2, "-(", "a", ")") + " FROM t" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := MaxNesting
			if c.name == "mixed" {
				n = MaxNesting + 1 // two levels per repetition
			}
			ok := c.make(n - 1)
			if _, err := Parse(ok); err != nil {
				t.Fatalf("%d levels refused: %v", n-1, err)
			}
			bad := c.make(n + 2)
			wantTooComplex(t, bad, CheckNesting(bad))
			_, err := Parse(bad)
			wantTooComplex(t, bad, err)
		})
	}
}

// TestNestingLimitPosition points at where the limit was crossed, and
// ignores parentheses inside strings, quoted names and comments.
func TestNestingLimitPosition(t *testing.T) {
	src := "SELECT " + nested(MaxNesting+5, "(", "1", ")")
	se := wantTooComplex(t, src, CheckNesting(src))
	if want := len("SELECT ") + MaxNesting + 1; se.Pos != want {
		t.Errorf("position %d, want %d (the parenthesis one level too deep)", se.Pos, want)
	}
	quoted := "SELECT '" + strings.Repeat("(", 3*MaxNesting) + "', \"" + strings.Repeat("(", 3*MaxNesting) +
		"\" /* " + strings.Repeat("(", 3*MaxNesting) + " */ -- " + strings.Repeat("(", 3*MaxNesting) + "\n FROM t"
	if err := CheckNesting(quoted); err != nil {
		t.Errorf("parentheses in literals and comments counted: %v", err)
	}
	// Binary minus and plus are not nesting: a + -b - -c stays shallow.
	if err := CheckNesting("SELECT " + strings.Repeat("a - -b + ", 3*MaxNesting) + "1 FROM t"); err != nil {
		t.Errorf("binary operators counted as nesting: %v", err)
	}
}

// TestOperatorChainLimit: a chain of binary operators is as deep as it is
// long once parsed; past the limit it is refused before the planner
// recurses over it (a 2 MB chain used to overflow the stack and kill the
// server).
func TestOperatorChainLimit(t *testing.T) {
	chain := func(n int, op string) string {
		return "SELECT " + strings.Repeat("a "+op+" ", n) + "a FROM t"
	}
	if _, err := Parse(chain(MaxNesting-1, "+")); err != nil {
		t.Fatalf("%d operators refused: %v", MaxNesting-1, err)
	}
	for _, op := range []string{"+", "OR", "||"} {
		src := chain(MaxNesting+1, op)
		_, err := Parse(src)
		se := wantTooComplex(t, src, err)
		if !strings.Contains(se.HintMsg, "IN (") {
			t.Errorf("hint %q does not suggest IN (...)", se.HintMsg)
		}
	}
	// A long IN list is one level, whatever its length.
	if _, err := Parse("SELECT a FROM t WHERE a IN (" + strings.Repeat("1, ", 100000) + "2)"); err != nil {
		t.Errorf("long IN list refused: %v", err)
	}
}

// TestDeepInputRefusedFast: a 2 MB statement nested a million levels
// deep is refused after reading its first levels: the refusal looks at
// about as many tokens as the limit allows, not at the whole statement.
func TestDeepInputRefusedFast(t *testing.T) {
	src := "SELECT " + nested(1_000_000, "(", "1", ")")
	n, err := parseSteps(src)
	wantTooComplex(t, src, err)
	if n > 20*MaxNesting {
		t.Errorf("refusing looked at tokens %d times: more than the first levels", n)
	}
}

// parseSteps parses src and returns how many times the parse looked at a
// token (Token.Is): its work, the same on any machine.
func parseSteps(src string) (int, error) {
	countSteps, steps = true, 0
	defer func() { countSteps = false }()
	_, err := Parse(src)
	return steps, err
}

// TestParseLinearInDepth: parsing 10 times as deep does about 10 times
// the work (tokens looked at). Each :: used to scan back to its opening
// parenthesis, so a chain of casts cost the square of its depth (100
// times here). BenchmarkParseDepth has the times.
func TestParseLinearInDepth(t *testing.T) {
	for name, mk := range depthShapes {
		t.Run(name, func(t *testing.T) {
			small, large := mk(MaxNesting/10), mk(MaxNesting)
			ns, err := parseSteps(small)
			if err != nil {
				t.Fatal(err)
			}
			nl, err := parseSteps(large)
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(nl) / float64(ns)
			t.Logf("depth %d: %d steps, depth %d: %d steps (%.1fx)", MaxNesting/10, ns, MaxNesting, nl, ratio)
			if ns == 0 || ratio > 15 {
				t.Errorf("10x the depth took %.1fx the steps (%d vs %d): not linear", ratio, nl, ns)
			}
		})
	}
}

// depthShapes are statements nested n deep.
var depthShapes = map[string]func(n int) string{
	"casts":       func(n int) string { return "SELECT " + nested(n, "(", "a", "::bigint)") + " FROM t" },
	"parentheses": func(n int) string { return "SELECT " + nested(n, "(", "a", ")") + " FROM t" },
	"case casts": func(n int) string {
		return "SELECT " + nested(n/2, "CASE WHEN b THEN ", "a", " END::bigint") + " FROM t"
	},
}

// BenchmarkParseDepth times the parse of each shape at the nesting limit
// and at a tenth of it.
func BenchmarkParseDepth(b *testing.B) {
	for name, mk := range depthShapes {
		for _, n := range []int{MaxNesting / 10, MaxNesting} {
			src := mk(n)
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				for b.Loop() {
					if _, err := Parse(src); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
