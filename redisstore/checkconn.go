package redisstore

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// A checker's connections judge the silence themselves (docs/design.md
// §10). A deadline that passes says nothing on a process short of CPU:
// the reply may have waited in the socket while this goroutine waited for
// the CPU, and Go's poller reports the deadline without reading. So a
// check's connection ignores go-redis's deadlines and keeps its own: a
// read waits until the budget has passed since the request was written,
// and when that deadline fires it looks into the socket (waiting: a
// non-blocking peek, with no deadline that could pass first), when the
// goroutine has the CPU again; only if nothing is waiting then is the
// read a silence (silentError). A write whose deadline passed is
// tried once more the same way: a starved writer is not a full socket.

// silentError is a check's read that found no reply waiting, the budget
// after its request was written.
type silentError struct{ budget time.Duration }

func (e *silentError) Error() string {
	return fmt.Sprintf("no reply from Redis %v after a check was sent on a connection of the limiter's own, and none waiting when this process next ran", e.budget)
}
func (e *silentError) Timeout() bool   { return true } // net.Error: go-redis drops the connection
func (e *silentError) Temporary() bool { return true }

// silent reports whether err is a check's confirmed silence.
func silent(err error) bool {
	var s *silentError
	return errors.As(err, &s)
}

// checkConn is a checker's connection (see above).
type checkConn struct {
	net.Conn
	budget time.Duration
	sent   atomic.Int64 // when the last write ended, in UnixNano; 0: none yet
}

func (c *checkConn) SetDeadline(time.Time) error      { return nil } // the connection keeps its own
func (c *checkConn) SetReadDeadline(time.Time) error  { return nil }
func (c *checkConn) SetWriteDeadline(time.Time) error { return nil }

func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *checkConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.budget))
	n, err := c.Conn.Write(p)
	if timeout(err) { // perhaps only this goroutine's wait for the CPU: once more
		_ = c.Conn.SetWriteDeadline(time.Now().Add(confirmTick))
		var m int
		m, err = c.Conn.Write(p[n:])
		n += m
	}
	if err == nil {
		c.sent.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *checkConn) Read(p []byte) (int, error) {
	due := time.Now().Add(c.budget)
	if s := c.sent.Load(); s != 0 {
		due = time.Unix(0, s).Add(c.budget)
	}
	_ = c.Conn.SetReadDeadline(due)
	n, err := c.Conn.Read(p)
	if !timeout(err) {
		return n, err
	}
	// The deadline passed, maybe long before this goroutine got the CPU
	// back: is a reply waiting now? Look without a deadline that could
	// pass before the look (waiting); where it cannot look, read once
	// more with a fresh deadline.
	ready, ok := waiting(c.Conn)
	if ok && !ready {
		return n, &silentError{budget: c.budget}
	}
	next := confirmTick
	if ready {
		next = c.budget // the bytes are there: the read takes them at once
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(next))
	n, err = c.Conn.Read(p)
	if !timeout(err) {
		return n, err
	}
	return n, &silentError{budget: c.budget}
}
