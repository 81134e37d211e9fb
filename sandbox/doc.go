// Package sandbox is berth's pod sandboxes: RunPodSandbox's network
// namespace (pinned by a bind mount, set up by CNI beside pause's start),
// the pod's own process and its pause (PodPause, through monitor/pods),
// the pod's cgroup, and the record of each pod on disk (internal/store),
// from which Manager rebuilds its index and adopts the running pods after
// a restart of berth. Stop and Remove undo what Run made, in reverse, and
// are safe to repeat; a Run that fails leaves nothing behind.
//
// The Manager answers every List and Status from memory. The container
// service reaches the pods through it (containers join the pod's
// namespaces and cgroup); sandbox knows the containers only through the
// Containers interface, to stop and remove a pod's before the pod goes.
package sandbox
