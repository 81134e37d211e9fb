package container_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func rename(a, b string) error { return os.Rename(a, b) }

// checkSequence checks that text holds line-0 .. line-(n-1), each once, in
// order (n < 0: as many as there are, at least one).
func checkSequence(t *testing.T, text string, n int) int {
	t.Helper()
	next := 0
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "line-") {
			continue
		}
		if want := fmt.Sprintf("line-%d", next); l != want {
			t.Fatalf("got %q where %q was due: a line was lost or repeated", l, want)
		}
		next++
	}
	if (n >= 0 && next != n) || next == 0 {
		t.Fatalf("%d lines, want %d", next, n)
	}
	return next
}
