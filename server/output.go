package server

import (
	"github.com/turbinesql/turbinesql/catalog"
)

// keepLegacyPanes undoes, for a windowed stream created by an earlier
// release (its catalog record does not say its panes are keyed), what
// keyOutput declared of its group key: that release wrote its panes
// unkeyed, spread round robin, and a stream reading the topic from the
// start would take those older panes for placed by the key: an
// aggregation by it, planned local, would split a key's groups over
// partitions. Such a reader stays refused, as it was. The panes it writes
// now are keyed all the same; it keeps its message_key.
func keepLegacyPanes(def *catalog.Stream, recorded bool) {
	if !def.Windowed || recorded {
		return
	}
	def.KeyedPanes = false
	if def.Options.MessageKey == "" {
		def.KeyColumn = ""
	}
}
