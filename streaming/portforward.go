package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/websocket"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/berth-runtime/berth/network"
)

// PortForward copies one forwarded connection between the client's stream
// and port on the pod's loopback, dialled from inside the pod's network
// namespace (a thread of berth enters the pinned namespace to dial: no
// socat, no nsenter). It returns when the pod's side has closed or the
// client is gone.
func (a adapter) PortForward(ctx context.Context, podID, _ string, port int32, stream io.ReadWriteCloser) error {
	ctx, cancel := a.s.sessionContext(ctx)
	defer cancel()
	return a.s.forward(ctx, podID, port, stream)
}

func (s *Server) forward(ctx context.Context, podID string, port int32, stream io.ReadWriteCloser) error {
	ns, err := s.opts.Pods.NetNS(ctx, podID)
	if err != nil {
		return err
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := network.DialLocal(dialCtx, ns, port)
	cancel()
	if err != nil {
		return fmt.Errorf("pod %s: connect to port %d: %w", podID, port, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		_, err := io.Copy(conn, stream)
		if err != nil {
			conn.Close()
			return
		}
		// The client has sent everything: pass the half-close on, the
		// server may still answer.
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	if err != nil && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
		return fmt.Errorf("pod %s: port %d: %w", podID, port, err)
	}
	return nil
}

// tunnelProtocol is SPDY carried in WebSocket binary messages, what
// client-go's SPDY-over-WebSocket dialer asks for (crictl port-forward
// --transport websocket). An API server normally unwraps it; berth is the
// server here, so it unwraps it itself and serves the SPDY inside.
const tunnelProtocol = portforward.WebsocketsSPDYTunnelingPrefix + portforward.ProtocolV1Name

func (s *Server) serveTunnel(w http.ResponseWriter, r *http.Request, podID string) {
	ws := websocket.Server{
		Handshake: func(cfg *websocket.Config, _ *http.Request) error {
			for _, p := range cfg.Protocol {
				if p == tunnelProtocol {
					cfg.Protocol = []string{p}
					return nil
				}
			}
			return fmt.Errorf("none of the subprotocols %v is %s", cfg.Protocol, tunnelProtocol)
		},
		Handler: func(wc *websocket.Conn) {
			wc.PayloadType = websocket.BinaryFrame
			s.serveSPDYPortForward(r.Context(), wc, podID)
		},
	}
	ws.ServeHTTP(w, r)
}

// serveSPDYPortForward serves port forwarding over a SPDY connection on
// conn. The client opens two streams per forwarded connection, an error
// stream and a data stream, tied by a request id; once both are there
// the data stream is forwarded and a failure is written on the error
// stream.
func (s *Server) serveSPDYPortForward(ctx context.Context, conn net.Conn, podID string) {
	ctx, cancel := s.sessionContext(ctx)
	defer cancel()
	streams := make(chan httpstream.Stream, 16)
	sc, err := spdy.NewServerConnection(conn, func(st httpstream.Stream, replySent <-chan struct{}) error {
		if err := checkPortForwardStream(st.Headers()); err != nil {
			return err
		}
		go func() {
			select {
			case <-replySent:
			case <-ctx.Done():
				return
			}
			select {
			case streams <- st:
			case <-ctx.Done():
			}
		}()
		return nil
	})
	if err != nil {
		s.log.Debug("port-forward tunnel", "pod", podID, "error", err)
		return
	}
	defer sc.Close()
	sc.SetIdleTimeout(s.opts.IdleTimeout)
	pairs := &streamPairs{pending: map[string]*streamPair{}}
	for {
		select {
		case <-sc.CloseChan():
			return
		case <-ctx.Done():
			return
		case st := <-streams:
			p, complete := pairs.add(st)
			if p == nil {
				st.Reset()
				continue
			}
			if !complete {
				go s.expirePair(ctx, pairs, p)
				continue
			}
			go func() {
				defer sc.RemoveStreams(p.data, p.errs)
				defer p.errs.Close()
				defer p.data.Close()
				if err := s.forward(ctx, podID, p.port, p.data); err != nil {
					fmt.Fprint(p.errs, err.Error())
					p.data.Reset()
				}
			}()
		}
	}
}

// expirePair gives up on a request whose second stream never came.
func (s *Server) expirePair(ctx context.Context, pairs *streamPairs, p *streamPair) {
	t := time.NewTimer(s.opts.StreamCreationTimeout)
	defer t.Stop()
	select {
	case <-p.complete:
	case <-ctx.Done():
	case <-t.C:
		if pairs.drop(p) {
			if p.errs != nil {
				fmt.Fprintf(p.errs, "timed out waiting for the data stream of request %s", p.id)
				p.errs.Reset()
			}
			if p.data != nil {
				p.data.Reset()
			}
		}
	}
}

func checkPortForwardStream(h http.Header) error {
	port, err := strconv.ParseUint(h.Get(portforward.PortHeader), 10, 16)
	if err != nil || port == 0 {
		return fmt.Errorf("bad %s header %q", portforward.PortHeader, h.Get(portforward.PortHeader))
	}
	if t := h.Get(portforward.StreamType); t != portforward.StreamTypeData && t != portforward.StreamTypeError {
		return fmt.Errorf("bad %s header %q", portforward.StreamType, t)
	}
	return nil
}

type streamPair struct {
	id         string
	port       int32
	data, errs httpstream.Stream
	complete   chan struct{}
}

type streamPairs struct {
	mu      sync.Mutex
	pending map[string]*streamPair
}

// add files a stream with its pair and says whether the pair is now
// complete; nil means the stream is a duplicate.
func (ps *streamPairs) add(st httpstream.Stream) (*streamPair, bool) {
	id := st.Headers().Get(portforward.PortForwardRequestIDHeader)
	if id == "" {
		// Old clients send no id: error stream n, data stream n+2.
		id = strconv.Itoa(int(st.Identifier()))
		if st.Headers().Get(portforward.StreamType) == portforward.StreamTypeData {
			id = strconv.Itoa(int(st.Identifier()) - 2)
		}
	}
	port, _ := strconv.ParseUint(st.Headers().Get(portforward.PortHeader), 10, 16)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.pending[id]
	if !ok {
		p = &streamPair{id: id, port: int32(port), complete: make(chan struct{})}
		ps.pending[id] = p
	}
	slot := &p.data
	if st.Headers().Get(portforward.StreamType) == portforward.StreamTypeError {
		slot = &p.errs
	}
	if *slot != nil {
		return nil, false
	}
	*slot = st
	if p.data != nil && p.errs != nil {
		delete(ps.pending, id)
		close(p.complete)
		return p, true
	}
	return p, false
}

func (ps *streamPairs) drop(p *streamPair) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.pending[p.id] != p {
		return false
	}
	delete(ps.pending, p.id)
	return true
}
