package streaming

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/berth-runtime/berth/container"
)

// adapter gives cri-streaming's protocol handlers the runtime they call.
type adapter struct{ s *Server }

func (a adapter) ExecInContainer(ctx context.Context, _, _, id string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	ctx, cancel := a.s.sessionContext(ctx)
	defer cancel()
	code, err := a.s.opts.Containers.Exec(ctx, id, cmd, streams(ctx, in, out, errOut, tty, resize))
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError(code)
	}
	return nil
}

func (a adapter) AttachContainer(ctx context.Context, _, _, id string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	ctx, cancel := a.s.sessionContext(ctx)
	defer cancel()
	return a.s.opts.Containers.Attach(ctx, id, streams(ctx, in, out, errOut, tty, resize))
}

// sessionContext ends with the request or with the server.
func (s *Server) sessionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// streams converts the protocol handlers' streams; interfaces holding a
// nil pointer would look like streams the client asked for.
func streams(ctx context.Context, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) container.Streams {
	st := container.Streams{TTY: tty}
	if in != nil {
		st.Stdin = in
	}
	if out != nil {
		st.Stdout = out
	}
	if errOut != nil {
		st.Stderr = errOut
	}
	if resize != nil {
		ch := make(chan container.TermSize, 1)
		go func() {
			defer close(ch)
			for {
				select {
				case sz, ok := <-resize:
					if !ok {
						return
					}
					select {
					case ch <- container.TermSize{Width: sz.Width, Height: sz.Height}:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
		st.Resize = ch
	}
	return st
}

// exitError is a command's non-zero exit code. Its methods are those of
// k8s.io/utils/exec.ExitError, which is how cri-streaming recognises an
// exit code and reports it to the client, not as a failure of the exec.
type exitError int

func (e exitError) Error() string   { return "command exited with code " + strconv.Itoa(int(e)) }
func (e exitError) String() string  { return e.Error() }
func (e exitError) Exited() bool    { return true }
func (e exitError) ExitStatus() int { return int(e) }

// Remote command v5 over WebSocket: v4's channels (0 stdin, 1 stdout,
// 2 stderr, 3 error, 4 resize) plus a close signal for stdin, which lets
// a client end its input without ending the connection.
const protocolV5 = remotecommand.StreamProtocolV5Name

// serveV5 runs one exec or attach over a v5 WebSocket and reports its
// outcome on the error channel as a Kubernetes Status, as v4 does.
func (s *Server) serveV5(w http.ResponseWriter, r *http.Request, o *remotecommand.Options, run func(context.Context, container.Streams) (int, error)) {
	ch := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		protocolV5: {Binary: true, Channels: []wsstream.ChannelType{
			ch(o.Stdin, wsstream.ReadChannel),
			ch(o.Stdout, wsstream.WriteChannel),
			ch(o.Stderr && !o.TTY, wsstream.WriteChannel),
			wsstream.WriteChannel,
			ch(o.TTY, wsstream.ReadChannel),
		}},
	})
	conn.SetIdleTimeout(s.opts.IdleTimeout)
	_, chans, err := conn.Open(w, r)
	if err != nil {
		s.log.Debug("websocket upgrade failed", "error", err)
		return
	}
	defer conn.Close()
	ctx, cancel := s.sessionContext(r.Context())
	defer cancel()
	st := container.Streams{TTY: o.TTY}
	if o.Stdin {
		st.Stdin = chans[0]
	}
	if o.Stdout {
		st.Stdout = chans[1]
	}
	if o.Stderr && !o.TTY {
		st.Stderr = chans[2]
	}
	if o.TTY {
		st.Resize = resizeEvents(ctx, chans[4])
	}
	code, err := run(ctx, st)
	writeStatus(chans[3], code, err)
}

// resizeEvents decodes the JSON terminal sizes a client sends.
func resizeEvents(ctx context.Context, r io.Reader) <-chan container.TermSize {
	ch := make(chan container.TermSize, 1)
	go func() {
		defer close(ch)
		dec := json.NewDecoder(r)
		for {
			var sz remotecommand.TerminalSize
			if dec.Decode(&sz) != nil {
				return
			}
			select {
			case ch <- container.TermSize{Width: sz.Width, Height: sz.Height}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// apiStatus is the JSON of a Kubernetes metav1.Status, what clients read
// from the error channel.
type apiStatus struct {
	Metadata struct{}       `json:"metadata"`
	Status   string         `json:"status"`
	Message  string         `json:"message,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	Details  *statusDetails `json:"details,omitempty"`
	Code     int32          `json:"code,omitempty"`
}

type statusDetails struct {
	Causes []statusCause `json:"causes,omitempty"`
}

type statusCause struct {
	Type    string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

func writeStatus(w io.Writer, code int, err error) {
	st := apiStatus{Status: "Success"}
	switch {
	case err != nil:
		st = apiStatus{Status: "Failure", Reason: "InternalError", Code: http.StatusInternalServerError,
			Message: fmt.Sprintf("error executing command in container: %v", err),
			Details: &statusDetails{Causes: []statusCause{{Message: err.Error()}}}}
	case code != 0:
		st = apiStatus{Status: "Failure", Reason: remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exitError(code)),
			Details: &statusDetails{Causes: []statusCause{{Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(code)}}}}
	}
	data, _ := json.Marshal(st)
	w.Write(data)
}
