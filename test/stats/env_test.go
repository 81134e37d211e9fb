package stats_test

import (
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

// env is the shared pod environment of the end-to-end tests.
type env struct{ *framework.PodEnv }

func newEnv(t *testing.T) *env { return &env{framework.NewPodEnv(t, "berth-stats-e2e")} }
