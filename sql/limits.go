package sql

import "github.com/pingcap/tidb/pkg/parser/ast"

// MaxNesting bounds how deeply a statement's expressions may nest. Every
// stage after the lexer (the TiDB parser's tree, the planner, the
// expression compiler, the catalog-query evaluator) walks expressions
// recursively, so depth is stack: a 2 MB chain of "a + a + ..." used to
// overflow the goroutine stack's 1 GB limit and kill the server. 10000
// levels is far beyond any hand-written or generated query and costs a
// few MB of stack at most.
const MaxNesting = 10000

// CodeStatementTooComplex is statement_too_complex, PostgreSQL's code for
// "stack depth limit exceeded".
const CodeStatementTooComplex = "54001"

// CheckNesting refuses src when its parentheses, brackets, CASE ... END
// blocks and runs of prefix operators (NOT, unary minus) nest more than
// MaxNesting levels. It reads src once, keeps one counter per open level,
// and stops at the first level too deep, so a hostile 100 MB statement
// costs what its first 10000 levels cost. It runs before anything else looks at the
// statement: the catalog-query evaluator and the TiDB parser recurse once
// per level.
func CheckNesting(src string) error {
	// level is the nesting at the current point. Each frame is an open
	// parenthesis (or CASE) and the prefix operators waiting, inside it,
	// for their operand: "- - (x)" is three levels deep at x.
	level := 0
	var frames []int // pending prefix operators per open frame; [0] is the top level
	frames = append(frames, 0)
	operand := false // the last token ends an operand (so - and + are binary)
	closeOperand := func() {
		// An operand resolves the prefix operators waiting for it.
		top := len(frames) - 1
		level -= frames[top]
		frames[top] = 0
		operand = true
	}
	for i := 0; i < len(src); {
		c := src[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
			continue
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			i += 2
			for i+1 < len(src) && !(src[i] == '*' && src[i+1] == '/') {
				i++
			}
			i += 2
			continue
		case c == '\'' || c == '"':
			i = skipQuoted(src, i)
			closeOperand()
			continue
		case c == '(' || c == '[':
			i++
			frames = append(frames, 0)
			level++
		case c == ')' || c == ']':
			i++
			if len(frames) > 1 {
				level -= 1 + frames[len(frames)-1]
				frames = frames[:len(frames)-1]
			}
			closeOperand()
			continue
		case (c == '-' || c == '+' || c == '~') && !operand:
			i++
			frames[len(frames)-1]++
			level++
		case isIdentStart(c) || c >= 0x80:
			for i < len(src) && (isIdentStart(src[i]) || src[i] >= '0' && src[i] <= '9' || src[i] == '$' || src[i] >= 0x80) {
				i++
			}
			switch word := src[start:i]; {
			case equalFoldASCII(word, "CASE"):
				frames = append(frames, 0)
				level++
				operand = false
			case equalFoldASCII(word, "END") && len(frames) > 1:
				level -= 1 + frames[len(frames)-1]
				frames = frames[:len(frames)-1]
				closeOperand()
			case equalFoldASCII(word, "NOT") && !operand:
				frames[len(frames)-1]++
				level++
			case isOperatorWord(word):
				operand = false
			default:
				closeOperand()
			}
		case c >= '0' && c <= '9' || c == '$':
			i++
			for i < len(src) && (src[i] >= '0' && src[i] <= '9' || src[i] == '.' || src[i] == 'e' || src[i] == 'E') {
				i++
			}
			closeOperand()
			continue
		default:
			i++
			operand = false
			continue
		}
		if level > MaxNesting {
			return tooComplex(src, start)
		}
	}
	return nil
}

// isOperatorWord lists the keywords after which + and - are prefix
// operators: the clause and operator words an operand may follow.
func isOperatorWord(w string) bool {
	for _, k := range [...]string{"SELECT", "WHERE", "AND", "OR", "NOT", "WHEN", "THEN", "ELSE", "HAVING", "BY", "ON",
		"IS", "IN", "LIKE", "ILIKE", "BETWEEN", "AS", "VALUES", "SET", "LIMIT", "OFFSET", "DISTINCT", "RETURN", "FROM"} {
		if equalFoldASCII(w, k) {
			return true
		}
	}
	return false
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func tooComplex(src string, off int) *Error {
	return Errorf(CodeStatementTooComplex, "statement too complex: expressions nest more than %d levels deep", MaxNesting).
		WithHint("parentheses, CASE, function calls and prefix operators (NOT, -) each add a level; simplify the statement").
		WithPos(charPos(src, off))
}

// depthLimit walks a parsed statement and records an error when an
// expression is more than MaxNesting levels deep. CheckNesting has already
// bounded parentheses; what it cannot see lexically is a chain of binary
// operators, which the parser builds into a tree one level per operator
// ("a + a + a" is two levels). The walk stops descending at the limit, so
// its own recursion is bounded too.
type depthLimit struct {
	depth int
	err   *Error
}

// counts reports whether n is a level: an expression other than a
// parenthesis, which CheckNesting has counted already and which wraps
// exactly one other level.
func counts(n ast.Node) bool {
	if _, paren := n.(*ast.ParenthesesExpr); paren {
		return false
	}
	_, ok := n.(ast.ExprNode)
	return ok
}

func (d *depthLimit) Enter(n ast.Node) (ast.Node, bool) {
	if !counts(n) {
		return n, d.err != nil
	}
	d.depth++
	// The innermost operand (a column, a literal) is a level of its own in
	// the tree, but not one that CheckNesting counts: allow one more.
	if d.depth > MaxNesting+1 && d.err == nil {
		d.err = Errorf(CodeStatementTooComplex, "statement too complex: an expression nests more than %d levels deep", MaxNesting).
			WithHint("each operator of a chain is a level (a + b + c is two); write a long list of alternatives as x IN (v1, v2, ...)")
	}
	return n, d.err != nil
}

func (d *depthLimit) Leave(n ast.Node) (ast.Node, bool) {
	if counts(n) {
		d.depth--
	}
	return n, true
}

// checkDepth applies depthLimit to a statement the TiDB parser built.
func checkDepth(n ast.Node) error {
	d := &depthLimit{}
	n.Accept(d)
	if d.err != nil {
		return d.err
	}
	return nil
}
