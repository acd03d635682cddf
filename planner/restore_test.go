package planner

import "testing"

func TestUnquoteNames(t *testing.T) {
	for in, want := range map[string]string{
		`max("price")`:               `max(price)`,
		`"a b" + "x1"`:               `"a b" + x1`,
		`concat('say "hi"', "name")`: `concat('say "hi"', name)`,
		`'it''s "q"' = "Mixed"`:      `'it''s "q"' = "Mixed"`,
		`"we""ird"`:                  `"we""ird"`,
		`count(distinct "tenant")`:   `count(distinct tenant)`,
		`'a\'b' || "c"`:              `'a\'b' || c`,
		`"_t9"`:                      `_t9`,
		`"9lives"`:                   `"9lives"`,
	} {
		if got := unquoteNames(in); got != want {
			t.Errorf("unquoteNames(%s) = %s, want %s", in, got, want)
		}
	}
}
