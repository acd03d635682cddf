package state

import "testing"

// Expected partitions are what Kafka's Java client
// (BuiltInPartitioner.partitionForKey) computes for these keys.
func TestPartitionForMatchesJavaClient(t *testing.T) {
	cases := []struct {
		key          string
		n4, n7, n960 int32
	}{
		{"a", 0, 5, 124},
		{"tenant-1", 3, 2, 331},
		{"42", 0, 3, 172},
	}
	for _, c := range cases {
		for _, pc := range []struct {
			n    int
			want int32
		}{{4, c.n4}, {7, c.n7}, {960, c.n960}} {
			if got := PartitionFor([]byte(c.key), pc.n); got != pc.want {
				t.Errorf("PartitionFor(%q, %d) = %d, want %d", c.key, pc.n, got, pc.want)
			}
		}
	}
}

func TestKeyGroupOwnership(t *testing.T) {
	keys := []string{"a", "b", "tenant-1", "42", "", "user-123456", "ünïcødé"}
	for _, n := range ValidCounts() {
		for _, k := range keys {
			g := KeyGroup([]byte(k))
			if got, want := OwnerOf(g, n), PartitionFor([]byte(k), n); got != want {
				t.Errorf("n=%d key=%q: group %d owned by %d, Kafka places key on %d", n, k, g, got, want)
			}
		}
	}
}

func TestNearestValid(t *testing.T) {
	cases := []struct{ n, below, above int }{
		{7, 6, 8}, {9, 8, 10}, {100, 96, 120}, {961, 960, 0}, {13, 12, 15},
	}
	for _, c := range cases {
		b, a := NearestValid(c.n)
		if b != c.below || a != c.above {
			t.Errorf("NearestValid(%d) = %d,%d want %d,%d", c.n, b, a, c.below, c.above)
		}
	}
	if len(ValidCounts()) != 28 {
		t.Errorf("want 28 divisors of 960, got %d", len(ValidCounts()))
	}
}

// TestOwnedGroups: on a count that divides 960 the groups a partition
// owns hold exactly the keys Kafka places on it. On one that does not
// (7, 100) every partition still owns its share of the 960 groups, but a
// key's group is the same on every count: murmur2 mod 960, never mod n.
func TestOwnedGroups(t *testing.T) {
	for _, n := range []int{1, 4, 7, 100, 960} {
		owner := map[uint16]int32{}
		for p := int32(0); p < int32(n); p++ {
			for _, g := range OwnedGroups(p, n) {
				if _, dup := owner[g]; dup {
					t.Fatalf("n=%d: group %d owned twice", n, g)
				}
				owner[g] = p
			}
		}
		if len(owner) != KeyGroups {
			t.Fatalf("n=%d: %d groups owned, want %d", n, len(owner), KeyGroups)
		}
		if !Divides(n) {
			continue
		}
		for _, k := range []string{"a", "b", "tenant-1", "42", "", "ünïcødé"} {
			if got, want := owner[KeyGroup([]byte(k))], PartitionFor([]byte(k), n); got != want {
				t.Errorf("n=%d key %q: group owned by %d, Kafka places it on %d", n, k, got, want)
			}
		}
	}
}
