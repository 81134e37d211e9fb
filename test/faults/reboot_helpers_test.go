package faults_test

import (
	"testing"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// newPodEnv is framework.NewPodEnv for a daemon started with opts, and
// nothing pulled yet.
func newPodEnv(t *testing.T, prefix string, opts ...framework.Option) *framework.PodEnv {
	t.Helper()
	framework.RequireRoot(t)
	reg := framework.TestRegistry(t)
	e := &framework.PodEnv{T: t, Image: reg + "/library/busybox:latest", Parent: "/" + prefix + "-" + framework.RandHex(4)}
	e.Net = cnitest.NewNet(t)
	// Registered before the daemon, so it runs after the daemon's cleanup
	// has removed the pods inside it.
	t.Cleanup(func() { framework.RemoveCgroup(e.Parent) })
	opts = append([]framework.Option{framework.WithArgs("--cni-conf-dir", e.Net.ConfDir, "--cni-bin-dir", e.Net.BinDir)}, opts...)
	e.D = framework.StartDaemon(t, opts...)
	return e
}
