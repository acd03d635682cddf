package streamplan

import (
	"errors"
	"strings"
	"testing"
)

// TestTopicNames pins every name TopicName gives, byte for byte: existing
// deployments' topics, the rolling-upgrade audit and the offline rescale
// depend on them.
func TestTopicNames(t *testing.T) {
	for _, c := range []struct {
		t    Topic
		want string
	}{
		{Topic{Kind: TopicCatalog, App: "app"}, "turbine-app-catalog"},
		{Topic{Kind: TopicControl, App: "app"}, "turbine-app-control"},
		{Topic{Kind: TopicFlush, App: "app"}, "turbine-app-flush"},
		{Topic{Kind: TopicWatermarks, App: "app"}, "turbine-app-watermarks"},
		{Topic{Kind: TopicProgress, App: "app"}, "turbine-app-progress"},
		{Topic{Kind: TopicStage, App: "app", Stream: "per_user"}, "turbine-app-per_user"},
		{Topic{Kind: TopicRepartition, App: "app", Input: "tx", By: []string{"user_id"}}, "turbine-app-rep-tx-by-user_id"},
		{Topic{Kind: TopicRepartition, App: "app", Input: "tx", By: []string{"a", "b"}}, "turbine-app-rep-tx-by-a-b"},
		{Topic{Kind: TopicRepartition, App: "app", Input: "tx", By: []string{"user_id"}, Generation: 1}, "turbine-app-rep-tx-by-user_id"},
		{Topic{Kind: TopicRepartition, App: "app", Input: "tx", By: []string{"user_id"}, Generation: 3}, "turbine-app-rep-tx-by-user_id-g3"},
		{Topic{Kind: TopicCombine, App: "app", Input: "tx", Stream: "per_user"}, "turbine-app-cmb-tx-per_user"},
		{Topic{Kind: TopicChangelog, Group: "turbine-app-per_user"}, "turbine-app-per_user-changelog"},
		{Topic{Kind: TopicDLQ, Input: "tx"}, "tx.dlq"},
	} {
		if got := TopicName(c.t); got != c.want {
			t.Errorf("TopicName(%+v) = %q, want %q", c.t, got, c.want)
		}
	}
	if got := HopGeneration("turbine-app-rep-tx-by-k", 2); got != "turbine-app-rep-tx-by-k-g2" {
		t.Errorf("HopGeneration 2 = %q", got)
	}
	if got := HopGeneration("turbine-app-rep-tx-by-k", 1); got != "turbine-app-rep-tx-by-k" {
		t.Errorf("HopGeneration 1 = %q", got)
	}
	if got := ChangelogTopic(CombineTopic("a", "tx", "s")); got != "turbine-a-cmb-tx-s-changelog" {
		t.Errorf("combine changelog = %q", got)
	}
}

func TestTopicRecognisers(t *testing.T) {
	for name, want := range map[string]bool{
		"turbine-app-rep-tx-by-k":    true,
		"turbine-app-rep-tx-by-k-g2": true,
		"turbine-app-cmb-tx-s":       false,
		"turbine-other-rep-tx-by-k":  false,
	} {
		if got := IsRepartitionTopic("app", "", name); got != want {
			t.Errorf("IsRepartitionTopic(app, %q) = %v", name, got)
		}
	}
	// An app id that itself holds "rep-".
	if !IsRepartitionTopic("my-rep-app", "", "turbine-my-rep-app-rep-tx-by-k") || IsRepartitionTopic("my-rep-app", "", "turbine-my-rep-app-cmb-tx-s") {
		t.Error("IsRepartitionTopic misreads an app id holding rep-")
	}
	if !IsRepartitionTopic("app", "tx", "turbine-app-rep-tx-by-k") || IsRepartitionTopic("app", "tx", "turbine-app-rep-tx2-by-k") {
		t.Error("IsRepartitionTopic with an input")
	}
	for name, want := range map[string]string{"turbine-app-catalog": "app", "turbine-a-b-catalog": "a-b", "turbine-app-control": "", "tx": ""} {
		got, ok := CatalogApp(name)
		if got != want || ok != (want != "") {
			t.Errorf("CatalogApp(%q) = %q, %v", name, got, ok)
		}
	}
}

// TestEnumSpellings: String is the SQL spelling EXPLAIN, SHOW and the
// catalog print, and Parse reads it back in any case.
func TestEnumSpellings(t *testing.T) {
	for _, s := range Requestable {
		got, err := ParseStrategy(strings.ToUpper(s.String()))
		if err != nil || got != s {
			t.Errorf("ParseStrategy(%s) = %v, %v", s, got, err)
		}
	}
	want := map[Strategy]string{StrategyAuto: "auto", StrategyLocal: "local", StrategyRepartition: "repartition", StrategyCombine: "combine",
		StrategyStateless: "stateless", StrategyBounded: "bounded"}
	for s, w := range want {
		if s.String() != w {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), w)
		}
	}
	for _, g := range []Guarantee{AtLeastOnce, ExactlyOnce} {
		if got, err := ParseGuarantee(g.String()); err != nil || got != g {
			t.Errorf("ParseGuarantee(%s) = %v, %v", g, got, err)
		}
	}
	if AtLeastOnce.String() != "at_least_once" || ExactlyOnce.String() != "exactly_once" {
		t.Error("guarantee spellings")
	}
	for o, w := range map[OnError]string{OnErrorFail: "fail", OnErrorSkip: "skip", OnErrorDLQ: "dlq"} {
		if o.String() != w {
			t.Errorf("OnError %d = %q", o, o.String())
		}
		if got, err := ParseOnError(w); err != nil || got != o {
			t.Errorf("ParseOnError(%s) = %v, %v", w, got, err)
		}
	}
	for k, w := range map[WindowKind]string{Tumble: "TUMBLE", Hop: "HOP", Session: "SESSION"} {
		if k.String() != w {
			t.Errorf("window kind %d = %q", k, k.String())
		}
		if got, err := ParseWindowKind(strings.ToLower(w)); err != nil || got != k {
			t.Errorf("ParseWindowKind(%s) = %v, %v", w, got, err)
		}
	}
	// The recorded form: nothing for auto, the spelling otherwise.
	for _, s := range []Strategy{StrategyAuto, StrategyLocal, StrategyRepartition, StrategyCombine} {
		got, err := ParseRecorded(s.Recorded())
		if err != nil || got != s {
			t.Errorf("ParseRecorded(%q) = %v, %v", s.Recorded(), got, err)
		}
	}
}

// TestParseErrorsNameTheOption: a bad value is an *OptionError naming the
// option, the value and every valid value.
func TestParseErrorsNameTheOption(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := ParseStrategy("fast"); return err }(), `strategy "fast" is not valid: use 'auto', 'local', 'repartition' or 'combine'`},
		{func() error { _, err := ParseStrategy("stateless"); return err }(), `strategy "stateless" is not valid: use 'auto', 'local', 'repartition' or 'combine'`},
		{func() error { _, err := ParseGuarantee("twice"); return err }(), `processing_guarantee "twice" is not valid: use 'at_least_once' or 'exactly_once'`},
		{func() error { _, err := ParseOnError("explode"); return err }(), `on_error "explode" is not valid: use 'fail', 'skip' or 'dlq'`},
		{func() error { _, err := ParseWindowKind("slide"); return err }(), `window "slide" is not valid: use 'TUMBLE', 'HOP' or 'SESSION'`},
		{func() error { _, err := ParseRecorded("auto"); return err }(), `planned strategy "auto" is not valid: use 'local', 'repartition', 'combine' or 'stateless'`},
	} {
		var oe *OptionError
		if !errors.As(c.err, &oe) {
			t.Errorf("%v is not an *OptionError", c.err)
			continue
		}
		if c.err.Error() != c.want {
			t.Errorf("got %q, want %q", c.err, c.want)
		}
	}
	if s := Strategy(200).String(); s != "Strategy(200)" {
		t.Errorf("an unknown strategy prints %q", s)
	}
}
