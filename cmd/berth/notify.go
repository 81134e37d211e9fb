package main

import (
	"fmt"
	"net"
	"os"
)

// notifySocketEnv names the datagram socket a Type=notify systemd unit
// gives its main process (sd_notify(3)).
const notifySocketEnv = "NOTIFY_SOCKET"

// takeNotifySocket returns the unit's notify socket and removes it from
// berth's environment first thing, so that no process berth starts (the
// pod processes, the helpers, the containers) inherits it: systemd would
// take a READY=1 or a main PID from any of them.
// go-systemd's daemon.SdNotify (a dependency already) reads the variable
// when it is called, after recovery has started pod processes, so the
// address is taken here and notifyReady writes to it itself.
func takeNotifySocket() string {
	addr := os.Getenv(notifySocketEnv)
	os.Unsetenv(notifySocketEnv)
	return addr
}

// notifyReady tells systemd that berth has adopted the running pods and
// serves CRI; without a socket (not started by systemd) it does nothing.
func notifyReady(addr string) error {
	if addr == "" {
		return nil
	}
	// A leading @ names a socket in the abstract namespace.
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify systemd on %s: %w", addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("READY=1")); err != nil {
		return fmt.Errorf("notify systemd on %s: %w", addr, err)
	}
	return nil
}
