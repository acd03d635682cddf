package shuffle

import (
	"fmt"
	"strings"
)

// InternalPrefix starts the name of every topic an app keeps for itself:
// its catalog, repartition, combine, changelog and control topics, of this
// app or any other. Records written there by anyone else can break the
// app for good (a bad catalog record stops every restart), so users may
// not name such a topic as a source, a stream's output or an INSERT target.
const InternalPrefix = "turbine-"

// IsInternal reports whether topic belongs to some app's internals.
func IsInternal(topic string) bool { return strings.HasPrefix(topic, InternalPrefix) }

// MaxTopicLen is Kafka's bound on a topic name (Topic.MAX_NAME_LENGTH).
const MaxTopicLen = 249

// ValidateTopicName checks name as Kafka's Topic.validate does: not empty,
// not "." or "..", at most 249 bytes, only ASCII letters, digits, '.', '_'
// and '-'.
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("topic name is empty")
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed", name)
	case len(name) > MaxTopicLen:
		return fmt.Errorf("topic name is %d bytes long, more than Kafka's limit of %d", len(name), MaxTopicLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has the character %q: Kafka allows only ASCII letters, digits, '.', '_' and '-'", name, rune(c))
		}
	}
	return nil
}
