package monitord

import "testing"

func TestWorthReleasing(t *testing.T) {
	const k = 1 << 10
	for _, tc := range []struct {
		objects, live, free uint64
		want                bool
	}{
		{objects: 900 * k, live: 0, free: 0, want: false},             // after one create: no collection yet
		{objects: 3000 * k, live: 500 * k, free: 0, want: true},       // execs' garbage
		{objects: 600 * k, live: 500 * k, free: 3000 * k, want: true}, // collected, still mapped
		{objects: 600 * k, live: 500 * k, free: 200 * k, want: false},
		{objects: 400 * k, live: 500 * k, free: 2000 * k, want: true},
	} {
		if got := worthReleasing(tc.objects, tc.live, tc.free); got != tc.want {
			t.Errorf("worthReleasing(%d, %d, %d) = %v", tc.objects, tc.live, tc.free, got)
		}
	}
}
