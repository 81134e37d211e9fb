package framework

import (
	"os"
	"testing"
	"time"
)

// WaitFile waits up to within for path to exist (a fault point's marker,
// a plugin's "done" file), failing the test with what did not happen.
func WaitFile(t testing.TB, path string, within time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s within %s (no %s)", what, within, path)
		}
	}
}
