package monitord

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// pollBufSize is the poller's one read buffer, shared by every output it
// copies: it reads for one descriptor at a time.
const pollBufSize = 16 << 10

// poller watches the descriptors a monitor holds for the life of its
// containers (their output pipes and pidfds) in one epoll set, served by
// one goroutine. A container so costs the monitor its descriptors and a
// handler, not goroutines parked with stacks of their own. The epoll set
// is itself a descriptor in Go's netpoller: waiting for it takes no OS
// thread.
type poller struct {
	ep  *os.File
	buf []byte // for handlers only: they run on the poller's goroutine

	mu       sync.Mutex
	handlers map[int32]func()
}

func newPoller() (*poller, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	p := &poller{ep: os.NewFile(uintptr(fd), "epoll"), buf: make([]byte, pollBufSize), handlers: map[int32]func(){}}
	go p.run()
	return p, nil
}

// watch calls fn on the poller's goroutine whenever fd is readable (or
// hung up), until forget(fd). fn must not block, and must bear a call
// when fd is not readable after all.
func (p *poller) watch(fd int, fn func()) error {
	p.mu.Lock()
	p.handlers[int32(fd)] = fn
	p.mu.Unlock()
	if err := p.ctl(unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
		p.mu.Lock()
		delete(p.handlers, int32(fd))
		p.mu.Unlock()
		return fmt.Errorf("watch fd %d: %w", fd, err)
	}
	return nil
}

// forget stops watching fd; it is still the caller's to close, after.
func (p *poller) forget(fd int) {
	p.ctl(unix.EPOLL_CTL_DEL, fd, nil)
	p.mu.Lock()
	delete(p.handlers, int32(fd))
	p.mu.Unlock()
}

func (p *poller) ctl(op, fd int, ev *unix.EpollEvent) error {
	rc, err := p.ep.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(ep uintptr) { cerr = unix.EpollCtl(int(ep), op, fd, ev) }); err != nil {
		return err
	}
	return cerr
}

func (p *poller) run() {
	rc, err := p.ep.SyscallConn()
	if err != nil {
		return
	}
	var events [16]unix.EpollEvent
	// The set is level-triggered and the netpoller edge-triggered: the
	// set is emptied of ready descriptors before the goroutine parks.
	rc.Read(func(ep uintptr) bool {
		for {
			n, err := unix.EpollWait(int(ep), events[:], 0)
			if err == unix.EINTR {
				continue
			}
			if n <= 0 {
				return false
			}
			for _, ev := range events[:n] {
				p.mu.Lock()
				fn := p.handlers[ev.Fd]
				p.mu.Unlock()
				if fn != nil {
					fn()
				}
			}
		}
	})
}

// readable tells whether fd polls readable now.
func readable(fd int) bool {
	n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	return n > 0
}

// fdOf is the descriptor behind f, which keeps it: Fd would turn a
// non-blocking file back to blocking mode.
func fdOf(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// onExit runs fn in a goroutine of its own once the process behind pidfd
// has exited (fn reaps it). Until then the wait costs a place in the
// poller's set. pidfd must stay open until fn runs.
func (s *Server) onExit(pidfd *os.File, fn func()) {
	fd, err := fdOf(pidfd)
	if err == nil {
		err = s.poll.watch(fd, func() {
			if !readable(fd) {
				return
			}
			s.poll.forget(fd)
			go fn()
		})
	}
	if err != nil {
		// fn waits through the netpoller all the same, parked.
		s.log.Warn("watch an exit", "error", err)
		go fn()
	}
}
