//go:build !linux

package main

import "net"

func listenReusePort(string) (net.Listener, error) { return nil, errReusePortUnsupported }
