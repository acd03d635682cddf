package sql

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"count", "sum", "avg", "max", "min", "stddev_pop", "upper"}
	for in, want := range map[string]string{
		"countt": "count", "COUNTT": "count", "summ": "sum", "stdev_pop": "stddev_pop",
		"uper": "upper", "frobnicate": "", "count": "", "mx": "max",
	} {
		if got := Closest(in, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}
