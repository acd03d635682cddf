package types

import "time"

// MillisTime converts epoch milliseconds to a UTC time.
func MillisTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
