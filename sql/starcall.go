package sql

import (
	"strings"

	"github.com/turbinesql/turbinesql/agg"
)

// starCallError explains a statement the grammar refused because it calls
// name(*) for a name other than COUNT: only COUNT takes *, so the grammar
// can only say "syntax error at or near *". PostgreSQL says the function
// does not exist (42883); so do we, with the closest aggregate as a hint.
// nil: no such call.
func starCallError(src string, toks []Token) error {
	for i := 0; i+3 < len(toks); i++ {
		name, open, star, closing := toks[i], toks[i+1], toks[i+2], toks[i+3]
		if name.Kind != TokIdent || !open.Is("(") || !star.Is("*") || !closing.Is(")") || strings.EqualFold(name.Text, "count") {
			continue
		}
		if i > 0 && toks[i-1].Is(".") {
			continue // a qualified name: t.x(*) is not a call we know either way
		}
		fn := strings.ToLower(name.Text)
		e := &Error{Code: CodeUndefinedFunc, Message: "function " + fn + " does not exist", Pos: charPos(src, name.Start)}
		if c := Closest(fn, agg.Names()); c == "count" {
			e.HintMsg = "did you mean count(*)?"
		} else if c != "" {
			e.HintMsg = "did you mean " + c + "? Only count takes *"
		} else {
			e.HintMsg = "only count takes *: count(*)"
		}
		return e
	}
	return nil
}
