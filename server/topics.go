package server

import (
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
)

// userTopic checks a topic a user names (planner.UserTopic).
func userTopic(o sql.Options, key, topic string) error { return planner.UserTopic(o, key, topic) }

// topicOptions checks each (option key, topic) pair (planner.TopicOptions).
func topicOptions(o sql.Options, pairs ...[2]string) error { return planner.TopicOptions(o, pairs...) }

func insufficientPrivilege(format string, args ...any) *sql.Error {
	return sql.Errorf(sql.CodeInsufficientPriv, format, args...)
}
