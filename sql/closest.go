package sql

import "strings"

// Closest is the candidate nearest to name by edit distance (case
// insensitive), for a hint; "" when none is close enough to be a likely
// typo (more than a third of the name's letters, at least two, differ).
func Closest(name string, candidates []string) string {
	name = strings.ToLower(name)
	best, bestD := "", max(2, len(name)/3)+1
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if lc == name {
			continue
		}
		if d := editDistance(name, lc); d < bestD || d == bestD && best != "" && lc < best {
			best, bestD = lc, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
