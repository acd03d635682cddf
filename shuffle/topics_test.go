package shuffle

import (
	"strings"
	"testing"
)

func TestValidateTopicName(t *testing.T) {
	for _, ok := range []string{"clicks", "a.b_c-D9", strings.Repeat("x", 249), "turbine-app-catalog"} {
		if err := ValidateTopicName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", strings.Repeat("x", 250), "has space", "slash/y", "ümlaut", "star*"} {
		if err := ValidateTopicName(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestIsInternal(t *testing.T) {
	for topic, want := range map[string]bool{
		"turbine-slt-catalog": true, "turbine-other-rep-x-by-y": true, "turbine-": true,
		"turbines": false, "my-turbine-x": false, "clicks": false,
	} {
		if got := IsInternal(topic); got != want {
			t.Errorf("IsInternal(%q) = %v", topic, got)
		}
	}
}
