//go:build !linux

package main

import (
	"errors"
	"net"
)

func listenReusePort(string) (net.Listener, error) {
	return nil, errors.New("--reuse-port: SO_REUSEPORT is supported on Linux only")
}
