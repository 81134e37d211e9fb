package monitord

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// settleDelay is how long the monitor stays quiet (no call, no exit)
// before it looks at the memory its last burst of work left behind.
const settleDelay = time.Second

// settleMin is the reclaimable memory worth a forced collection: below
// it, the collection's own bookkeeping costs about what it would give
// back.
const settleMin = 1 << 20

var settleState struct {
	sync.Mutex
	timer *time.Timer
}

// settle is called after every call and every exit. Creating a container
// or running an exec through libcontainer leaves tens to hundreds of kB
// of garbage (the container's whole config is encoded for each init
// process), and the Go runtime keeps it resident: it does not collect a
// heap below 4 MB, and what a collection frees stays mapped for reuse. A
// monitor with an exec probe would so sit at ~6.5 MB of private memory.
// But a monitor is idle most of its life, and one runs per pod: once a
// burst of work is over and left at least settleMin to reclaim, one
// forced collection hands it back to the kernel (a fraction of a
// millisecond of CPU, at most once per settleDelay).
func settle() {
	settleState.Lock()
	defer settleState.Unlock()
	if settleState.timer == nil {
		settleState.timer = time.AfterFunc(settleDelay, release)
		return
	}
	settleState.timer.Reset(settleDelay)
}

func release() {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"}, // live and not yet collected
		{Name: "/gc/heap/live:bytes"},                // live at the last collection
		{Name: "/memory/classes/heap/free:bytes"},    // freed, still mapped
	}
	metrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			debug.FreeOSMemory()
			return
		}
	}
	if worthReleasing(s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()) {
		debug.FreeOSMemory()
	}
}

// worthReleasing tells from the heap's objects (live and garbage), what
// was live at the last collection (0 before the first) and the freed
// memory still mapped whether a forced collection would give back at
// least settleMin.
func worthReleasing(objects, live, free uint64) bool {
	reclaimable := free
	if objects > live {
		reclaimable += objects - live
	}
	return reclaimable >= settleMin
}
