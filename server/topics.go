package server

import (
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/sql"
)

// userTopic checks a topic a user names (an option key of a source or
// stream; key "" when the topic comes from the relation's name): a
// malformed name is 22023, an internal one 42501.
func userTopic(o sql.Options, key, topic string) error {
	pos := 0
	if key != "" {
		pos = o[key].Pos
	}
	if err := shuffle.ValidateTopicName(topic); err != nil {
		e := &sql.Error{Code: sql.CodeInvalidParameter, Message: err.Error(), Pos: pos, Err: err}
		if key == "" {
			return e.WithHint("set topic = '...' to a valid Kafka topic name")
		}
		return e
	}
	if shuffle.IsInternal(topic) {
		return insufficientPrivilege("topic %q is internal: topics starting with %q belong to TurbineSQL apps (catalog, repartition, combine, changelog and control topics)", topic, shuffle.InternalPrefix).
			WithPos(pos).WithHint("use a topic whose name does not start with %q", shuffle.InternalPrefix)
	}
	return nil
}

func insufficientPrivilege(format string, args ...any) *sql.Error {
	return sql.Errorf(sql.CodeInsufficientPriv, format, args...)
}

// topicOptions checks each (option key, topic) pair; an empty topic (an
// unset optional one) is skipped. A topic that defaulted to the relation's
// name is reported against no option.
func topicOptions(o sql.Options, pairs ...[2]string) error {
	for _, kv := range pairs {
		if kv[1] == "" {
			continue
		}
		key := kv[0]
		if _, set := o[key]; !set {
			key = ""
		}
		if err := userTopic(o, key, kv[1]); err != nil {
			return err
		}
	}
	return nil
}
