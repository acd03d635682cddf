package exec

import (
	"sort"
	"strings"

	"github.com/turbinesql/turbinesql/types"
)

// The PostgreSQL scalar function library: each function is its overloads
// (Sig) and one vectorised kernel over the argument columns. The planner
// picks an overload from the argument types (ResolveCall), pg_proc lists
// every overload (Signatures), and Call evaluates the kernel a batch at a
// time, in bounded queries and streams alike.

// Sig is one overload of a function: its argument types (the last one
// repeats when Variadic; types.Unknown takes any type, as PostgreSQL's
// "any"), its result, and the PostgreSQL type clients are
// told when the engine carries the value as another (text[] and bytea are
// carried as their text form).
type Sig struct {
	Args     []types.Type
	Variadic bool
	Ret      types.Type
	RetOID   uint32 // 0: Ret's own
}

// RetPGOID is the PostgreSQL type OID of the result.
func (s Sig) RetPGOID() uint32 {
	if s.RetOID != 0 {
		return s.RetOID
	}
	return s.Ret.OID()
}

// PostgreSQL type OIDs of results the engine carries as text.
const (
	OIDTextArray = 1009
	OIDBytea     = 17
)

// kernel computes a function over a batch. out has the result type and,
// for a strict function, the rows where an argument is NULL already marked
// NULL: the kernel fills the others (it may mark more NULL with
// out.ensureNull) and must not fail on a NULL row.
type kernel func(out *Vec, args []*Vec) error

type builtin struct {
	sigs   []Sig
	kernel kernel
	// lenient functions are not strict: the kernel sees NULL arguments and
	// decides (concat_ws skips them, greatest ignores them, format prints
	// them).
	lenient bool
}

var builtins = map[string]*builtin{}

// def registers function name (upper case) with its overloads.
func def(name string, k kernel, sigs ...Sig) {
	builtins[name] = &builtin{sigs: sigs, kernel: k}
}

// defLenient registers a function that is not strict.
func defLenient(name string, k kernel, sigs ...Sig) {
	builtins[name] = &builtin{sigs: sigs, kernel: k, lenient: true}
}

// sig builds an overload: the argument types, then the result.
func sig(ret types.Type, args ...types.Type) Sig { return Sig{Args: args, Ret: ret} }

func variadic(ret types.Type, args ...types.Type) Sig {
	return Sig{Args: args, Ret: ret, Variadic: true}
}

// Overloads returns the overloads of a library function (upper-case
// name); ok is false for a name it does not have.
func Overloads(name string) ([]Sig, bool) {
	b, ok := builtins[name]
	if !ok {
		return nil, false
	}
	return b.sigs, true
}

// Function is one overload of a scalar function, as pg_proc lists it.
type Function struct {
	Name   string // lower case
	Strict bool   // NULL in any argument gives NULL
	Sig
}

// Signatures lists every overload of every scalar function the engine
// evaluates with a kernel, sorted by name.
func Signatures() []Function {
	var out []Function
	for name, b := range builtins {
		for _, s := range b.sigs {
			out = append(out, Function{Name: strings.ToLower(name), Strict: !b.lenient, Sig: s})
		}
	}
	for name, s := range legacySigs {
		for _, g := range s {
			out = append(out, Function{Name: strings.ToLower(name), Strict: name != "CONCAT", Sig: g})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// legacySigs are the overloads of the functions Call evaluates in its own
// switch (typed by the planner's own rules), for pg_proc.
var legacySigs = map[string][]Sig{
	"COALESCE": nil, "NULLIF": nil, // polymorphic: PostgreSQL lists neither in pg_proc
	"CONCAT":           {variadic(types.Text, types.Text)},
	"LOWER":            {sig(types.Text, types.Text)},
	"UPPER":            {sig(types.Text, types.Text)},
	"LENGTH":           {sig(types.Int, types.Text)},
	"CHAR_LENGTH":      {sig(types.Int, types.Text)},
	"CHARACTER_LENGTH": {sig(types.Int, types.Text)},
	"OCTET_LENGTH":     {sig(types.Int, types.Text)},
	"SUBSTRING":        {sig(types.Text, types.Text, types.Int), sig(types.Text, types.Text, types.Int, types.Int)},
	"SUBSTR":           {sig(types.Text, types.Text, types.Int), sig(types.Text, types.Text, types.Int, types.Int)},
	"BTRIM":            {sig(types.Text, types.Text), sig(types.Text, types.Text, types.Text)},
	"LTRIM":            {sig(types.Text, types.Text), sig(types.Text, types.Text, types.Text)},
	"RTRIM":            {sig(types.Text, types.Text), sig(types.Text, types.Text, types.Text)},
	"REPLACE":          {sig(types.Text, types.Text, types.Text, types.Text)},
	"STRPOS":           {sig(types.Int, types.Text, types.Text)},
	"ABS":              {sig(types.Int, types.Int), sig(types.Double, types.Double)},
	"ROUND":            {sig(types.Int, types.Int), sig(types.Double, types.Double), sig(types.Int, types.Int, types.Int), sig(types.Double, types.Double, types.Int)},
	"FLOOR":            {sig(types.Int, types.Int), sig(types.Double, types.Double)},
	"CEIL":             {sig(types.Int, types.Int), sig(types.Double, types.Double)},
	"CEILING":          {sig(types.Int, types.Int), sig(types.Double, types.Double)},
}

// evalBuiltin runs a library function's kernel over evaluated arguments.
func evalBuiltin(b *builtin, t types.Type, args []*Vec, n int) (*Vec, error) {
	out := newVec(t, n)
	if !b.lenient {
		for _, a := range args {
			if !a.typed() {
				return allNull(t, n), nil
			}
		}
		for _, a := range args {
			if a.Null != nil {
				out.Null = orNulls(out.Null, a.Null, n)
			}
		}
	}
	if err := b.kernel(out, args); err != nil {
		return nil, err
	}
	return out, nil
}

// rowNull reports whether row i of out is NULL (a strict function's NULL
// argument): kernels skip such rows before anything that can fail.
func (v *Vec) rowNull(i int) bool { return v.Null != nil && v.Null[i] }

// constText returns the value of a text argument when every row has the
// same one (a literal, the usual case for a pattern or a format), so a
// kernel can prepare it once.
func constText(v *Vec) (string, bool) {
	if v.T != types.Text || v.N == 0 || v.Null != nil {
		return "", false
	}
	s := v.S[0]
	for _, x := range v.S[1:] {
		if x != s {
			return "", false
		}
	}
	return s, true
}
