//go:build unix

package redisstore

import (
	"net"
	"syscall"
	"time"
)

// waiting reports whether bytes from the peer (or its close) wait in c's
// socket, without waiting and without consuming them; ok is false when it
// cannot tell (a connection that is no socket). It sets no deadline that
// could pass before the look: the look itself never blocks.
func waiting(c net.Conn) (ready, ok bool) {
	if t, isTLS := c.(interface{ NetConn() net.Conn }); isTLS {
		c = t.NetConn()
	}
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	_ = c.SetReadDeadline(time.Time{}) // RawConn.Read checks it first
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	})
	switch {
	case err != nil:
		return false, false
	case rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK:
		return false, true
	case rerr != nil:
		return true, true // an error waits: the next read returns it
	}
	return true, true // bytes, or none: the peer closed
}
