package monitor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// Error is an error the monitor reported.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// IsCode tells whether err is a monitor error with that code.
func IsCode(err error, code string) bool {
	var me *Error
	return errors.As(err, &me) && me.Code == code
}

// ErrUnreachable wraps every failure to reach a monitor at all: the
// monitor is gone (or not started yet).
var ErrUnreachable = errors.New("monitor unreachable")

// Client calls one monitor.
type Client struct {
	Socket string
}

// Call sends one request and waits for its response, or for ctx.
func (c *Client) Call(ctx context.Context, req *Request) (*Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer conn.Close()
	// Closing the connection is how a cancelled call unblocks, and how the
	// monitor learns that nobody waits any more.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	stamp(req)
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(append(data, '\n')); err != nil {
		return nil, c.ioError(ctx, err)
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return nil, c.ioError(ctx, err)
	}
	resp := &Response{}
	if err := json.Unmarshal(line, resp); err != nil {
		return nil, fmt.Errorf("monitor %s: bad response: %w", c.Socket, err)
	}
	if err := c.checkResponse(resp); err != nil {
		return resp, err
	}
	return resp, nil
}

func (c *Client) ioError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The connection was accepted, then dropped: the monitor died.
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}
