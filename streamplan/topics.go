package streamplan

import (
	"strconv"
	"strings"

	"github.com/turbinesql/turbinesql/shuffle"
)

// TopicKind is what an internal topic (or name derived like one: a
// stage's consumer group) is for.
type TopicKind uint8

const (
	// TopicCatalog: turbine-{app}-catalog, the compacted log of the
	// app's statements.
	TopicCatalog TopicKind = iota + 1
	// TopicControl: turbine-{app}-control, cluster membership.
	TopicControl
	// TopicFlush: turbine-{app}-flush, FLUSH barriers across the cluster.
	TopicFlush
	// TopicWatermarks: turbine-{app}-watermarks, watermarks shared by the
	// tasks of a stage across processes.
	TopicWatermarks
	// TopicProgress: turbine-{app}-progress, how far exactly-once stages
	// have emitted windows.
	TopicProgress
	// TopicStage: turbine-{app}-{stream}, the consumer group of a
	// stream's final stage (its transactional ids are {group}-{partition},
	// its changelog {group}-changelog). Not a topic itself.
	TopicStage
	// TopicRepartition: turbine-{app}-rep-{input}-by-{col[-col...]}, a
	// repartition hop's records; generation n > 1 appends -g{n}. The hop's
	// stage's consumer group has the same name.
	TopicRepartition
	// TopicCombine: turbine-{app}-cmb-{input}-{stream}, a combine's
	// partials (and the consumer group of its pre-aggregation stage).
	TopicCombine
	// TopicChangelog: {group}-changelog, the compacted changelog of the
	// stage whose consumer group is Group.
	TopicChangelog
	// TopicDLQ: {input}.dlq, a source's dead-letter topic when dlq_topic
	// is not set. Not internal: users read it.
	TopicDLQ
)

// Topic identifies one topic (or group) of an app; which fields count
// depends on Kind.
type Topic struct {
	Kind TopicKind
	App  string
	// Stream: TopicStage, TopicCombine (a combine topic is named after
	// the stream whose windows it carries).
	Stream string
	// Input is the topic read: TopicRepartition, TopicCombine, TopicDLQ.
	Input string
	// By: TopicRepartition, the columns records are keyed by.
	By []string
	// Generation: TopicRepartition, from 1 (0 is 1).
	Generation int
	// Group: TopicChangelog, the stage's consumer group.
	Group string
}

// TopicName is the one function that names the app's topics, consumer
// groups and default dead-letter topics. The names are part of every
// deployment's data (existing topics, the rolling-upgrade audit, the
// offline rescale read them): they never change.
func TopicName(t Topic) string {
	app := shuffle.InternalPrefix + t.App + "-"
	switch t.Kind {
	case TopicCatalog:
		return app + "catalog"
	case TopicControl:
		return app + "control"
	case TopicFlush:
		return app + "flush"
	case TopicWatermarks:
		return app + "watermarks"
	case TopicProgress:
		return app + "progress"
	case TopicStage:
		return app + t.Stream
	case TopicRepartition:
		base := app + "rep-" + t.Input + "-by-" + strings.Join(t.By, "-")
		if t.Generation <= 1 {
			return base
		}
		return base + "-g" + strconv.Itoa(t.Generation)
	case TopicCombine:
		return app + "cmb-" + t.Input + "-" + t.Stream
	case TopicChangelog:
		return t.Group + "-changelog"
	case TopicDLQ:
		return t.Input + ".dlq"
	}
	panic("streamplan: unknown topic kind " + strconv.Itoa(int(t.Kind)))
}

// Shorthands for the common names, each through TopicName.

// CatalogTopic is turbine-{app}-catalog.
func CatalogTopic(app string) string { return TopicName(Topic{Kind: TopicCatalog, App: app}) }

// StageGroup is the consumer group of stream's final stage.
func StageGroup(app, stream string) string {
	return TopicName(Topic{Kind: TopicStage, App: app, Stream: stream})
}

// ChangelogTopic is the changelog of the stage whose consumer group is
// group: turbine-{app}-{stream}-changelog for a stream's final stage,
// {combine topic}-changelog for its pre-aggregation, {hop topic}-changelog
// for a repartition hop.
func ChangelogTopic(group string) string { return TopicName(Topic{Kind: TopicChangelog, Group: group}) }

// RepartitionTopic is the first generation of the repartition hop of
// input by columns.
func RepartitionTopic(app, input string, by []string) string {
	return TopicName(Topic{Kind: TopicRepartition, App: app, Input: input, By: by})
}

// CombineTopic is the combine topic (and pre-aggregation group) of
// stream over input.
func CombineTopic(app, input, stream string) string {
	return TopicName(Topic{Kind: TopicCombine, App: app, Input: input, Stream: stream})
}

// HopGeneration names generation n (from 1) of the repartition hop whose
// first generation is topic base: base itself, then base-g2, base-g3...
// A generation is closed to new streams once its consumed records are
// purged, and the streams created after that read the next one, which
// its own hop fills from the source's start.
func HopGeneration(base string, n int) string {
	if n <= 1 {
		return base
	}
	// The same suffix TopicName gives a generation.
	return base + strings.TrimPrefix(TopicName(Topic{Kind: TopicRepartition, Generation: n}), TopicName(Topic{Kind: TopicRepartition}))
}

// IsRepartitionTopic reports whether name is a repartition hop of app
// (any input, any generation); with input set, of that input topic.
func IsRepartitionTopic(app, input, name string) bool {
	prefix := TopicName(Topic{Kind: TopicRepartition, App: app, Input: input})
	if input == "" {
		// turbine-{app}-rep--by-: keep up to "rep-".
		prefix = prefix[:strings.LastIndex(prefix, "rep-")+len("rep-")]
	}
	return strings.HasPrefix(name, prefix)
}

// CatalogApp reports the app id whose catalog topic name is, if it is one.
func CatalogApp(name string) (string, bool) {
	suffix := strings.TrimPrefix(CatalogTopic(""), shuffle.InternalPrefix+"-")
	rest, ok := strings.CutPrefix(name, shuffle.InternalPrefix)
	if !ok {
		return "", false
	}
	app, ok := strings.CutSuffix(rest, "-"+suffix)
	if !ok {
		return "", false
	}
	return app, true
}
