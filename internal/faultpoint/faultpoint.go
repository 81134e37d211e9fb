// Package faultpoint lets a crash test stop berth at a named step of a
// call, so that a SIGKILL lands exactly there.
//
// berth builds one Point from its environment at start-up
// (BERTH_DEBUG_FAULT_POINT names the step, BERTH_DEBUG_FAULT_FILE the file
// to create when it is reached) and hands it to the services through
// their Options. A nil *Point, the normal case, does nothing.
//
// Reaching the armed step creates the file and then blocks the calling
// goroutine forever: the rest of the daemon keeps serving, as it would
// while one call is slow, until the test kills it. With
// BERTH_DEBUG_FAULT_DELAY (a Go duration) it blocks that long instead and
// the call goes on: a slow step, for tests of deadlines and retries.
package faultpoint

import (
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Environment variables read by FromEnv.
const (
	EnvPoint = "BERTH_DEBUG_FAULT_POINT"
	EnvFile  = "BERTH_DEBUG_FAULT_FILE"
	EnvDelay = "BERTH_DEBUG_FAULT_DELAY"
)

// Env is the environment FromEnv arms point with: marker is created when
// a call reaches the step, which then hangs, or waits delay if it is
// positive. Tests pass it to the daemon they start.
func Env(point, marker string, delay time.Duration) []string {
	env := []string{EnvPoint + "=" + point, EnvFile + "=" + marker}
	if delay > 0 {
		env = append(env, EnvDelay+"="+delay.String())
	}
	return env
}

// Point is one armed step.
type Point struct {
	name   string
	marker string
	delay  time.Duration // 0: forever
	log    *slog.Logger
}

// FromEnv returns the point the environment arms, or nil when none is.
func FromEnv(log *slog.Logger) *Point {
	name := os.Getenv(EnvPoint)
	if name == "" {
		return nil
	}
	p := &Point{name: name, marker: os.Getenv(EnvFile), log: log}
	if d := os.Getenv(EnvDelay); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil || v <= 0 {
			log.Error("debug fault delay ignored: not a positive duration", "value", d, "error", err)
		} else {
			p.delay = v
		}
	}
	if p.delay > 0 {
		log.Warn("debug fault point armed: berth will wait when it reaches this step", "point", name, "marker", p.marker, "delay", p.delay)
	} else {
		log.Warn("debug fault point armed: berth will hang when it reaches this step", "point", name, "marker", p.marker)
	}
	return p
}

// Hit blocks forever (or for the delay) if p is armed at step name; object
// is the id of what the call works on, for the log. Otherwise it returns
// at once.
func (p *Point) Hit(name, object string) {
	if p == nil || p.name != name {
		return
	}
	if p.delay > 0 {
		p.log.Warn("debug fault point reached: waiting", "point", name, "object", object, "delay", p.delay)
	} else {
		p.log.Warn("debug fault point reached: hanging until killed", "point", name, "object", object)
	}
	if p.marker != "" {
		if err := os.WriteFile(p.marker, []byte(fmt.Sprintf("%s %s\n", name, object)), 0o644); err != nil {
			p.log.Error("write fault point marker", "point", name, "file", p.marker, "error", err)
		}
	}
	if p.delay > 0 {
		time.Sleep(p.delay)
		return
	}
	select {}
}

// The steps, named "<CRI call>/<what has just been done>".
const (
	RunRecorded       = "RunPodSandbox/recorded"        // the Creating record is written
	RunNetNS          = "RunPodSandbox/netns"           // the netns is pinned, no CNI ADD yet
	RunCNIAdded       = "RunPodSandbox/cni-added"       // CNI ADD done; pause may be starting
	RunMonitorStarted = "RunPodSandbox/monitor-started" // the pod's monitor runs, pause not yet
	RunInfraCreated   = "RunPodSandbox/infra-created"   // a pause image's infra container made, its record Creating
	RunPauseStarted   = "RunPodSandbox/pause-started"   // pause runs, the record still says Creating
	RunReady          = "RunPodSandbox/ready"           // the Ready record is written, not yet answered

	CreateLeased     = "CreateContainer/image-leased"    // the image is leased, no record yet
	CreateRecorded   = "CreateContainer/recorded"        // the Creating record is written
	CreateRootfs     = "CreateContainer/rootfs-mounted"  // the overlay is mounted
	CreateMonitor    = "CreateContainer/monitor-created" // libcontainer made it, the record says Creating
	CreateReturning  = "CreateContainer/created"         // the Created record is written, not yet answered
	StartBefore      = "StartContainer/before-start"     // the monitor has not been asked to start it
	StartStarted     = "StartContainer/started"          // it runs, the record says Created
	StopContainers   = "StopPodSandbox/containers-stopped"
	StopBeforeCNIDel = "StopPodSandbox/before-cni-del" // pause is being stopped, no CNI DEL yet
	StopCNIDeleted   = "StopPodSandbox/cni-deleted"    // pause stopped and CNI DEL done, not recorded
	RemoveContainers = "RemovePodSandbox/containers-removed"
	RemoveRuntime    = "RemovePodSandbox/runtime-removed" // monitor and infra container gone, cgroup and files not yet
	RemoveFiles      = "RemovePodSandbox/files-removed"   // cgroup and files gone, the record not yet

	PullLayerWritten    = "PullImage/layer-written"    // a layer's files are written in its temp dir, their fsyncs may be running
	PullLayerUnpacked   = "PullImage/layer-unpacked"   // a layer is unpacked and checked in its temp dir, not committed (flushed unless its flush is deferred)
	PullLayerPublished  = "PullImage/layer-published"  // a layer is in the store, its record pending on this boot, its flush queued
	PullLayersCommitted = "PullImage/layers-committed" // every layer is in the store, the image is not
	PullContentStored   = "PullImage/content-stored"   // manifest and config stored, no image record or tag

	StopCtrSignalled  = "StopContainer/signalled"         // the stop signal sent, the grace period running
	RemoveCtrMonitor  = "RemoveContainer/monitor-deleted" // gone from its monitor, rootfs and record still there
	RemoveImageRecord = "RemoveImage/record-deleted"      // the record is gone, layers and blobs not yet

	// Steps of the recovery at start-up, for a second crash while berth
	// undoes what the first one left (not in All: they need a first).
	RecoverPodReleased = "Recover/pod-released"     // a half-made pod's network and pause released, not purged
	RecoverCtrKilled   = "Recover/container-killed" // a half-made container killed in its monitor, not released

	// After PullImage has answered (not in All: the crash matrix expects
	// no image after a crash inside a pull).
	PullLayerFlushing = "PullImage/layer-flushing" // a published layer's files fsynced in the background, its record still pending
)

// All lists every step, for tests that go through them (a func, not a
// var: the package keeps no mutable state).
func All() []string {
	return []string{
		RunRecorded, RunNetNS, RunCNIAdded, RunMonitorStarted, RunInfraCreated, RunPauseStarted, RunReady,
		CreateLeased, CreateRecorded, CreateRootfs, CreateMonitor, CreateReturning,
		StartBefore, StartStarted,
		StopContainers, StopBeforeCNIDel, StopCNIDeleted,
		RemoveContainers, RemoveRuntime, RemoveFiles,
		PullLayerWritten, PullLayerUnpacked, PullLayerPublished, PullLayersCommitted, PullContentStored,
		StopCtrSignalled, RemoveCtrMonitor, RemoveImageRecord,
	}
}
