package exec

import (
	"os"
	"strings"
	"testing"
)

// TestFunctionsDocumented: every function of the library has a line in
// docs/functions.md, so the reference cannot fall behind the code.
func TestFunctionsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/functions.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, f := range Signatures() {
		if strings.ContainsAny(f.Name, " ~") { // operators: ~, IS DISTINCT FROM
			continue
		}
		if !strings.Contains(text, "`"+f.Name+"(") && !strings.Contains(text, "`"+f.Name+"`") && !strings.Contains(text, " `"+f.Name) {
			t.Errorf("function %s is not in docs/functions.md", f.Name)
		}
	}
}
