package faults_test

import "testing"

// TODO: framework.SnapshotHost once it lands.
type hostSnap struct{}

func snapshot(t *testing.T) hostSnap { return hostSnap{} }

func checkNoLeak(t *testing.T, before hostSnap) {}
