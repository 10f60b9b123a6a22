package redisstore

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// A check's connection calls a read silent only if nothing waits in the
// socket when its goroutine looks, however long after the deadline it
// looks: a reply that arrived while it waited for the CPU is read, and
// the look consumes nothing.
func TestCheckConnReadsAReplyThatWaitedPastTheDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(peer)
			return
		}
		peer <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-peer
	if srv == nil {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	c := &checkConn{Conn: raw, budget: 20 * time.Millisecond}
	defer c.Close()

	if runtime.GOOS != "windows" {
		if ready, ok := waiting(raw); !ok || ready {
			t.Fatalf("an empty socket: waiting = %v, %v; want false, true", ready, ok)
		}
	}
	// Nothing sent: silent, after the budget.
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 8)); !silent(err) {
		t.Fatalf("no reply: Read error %v, want a silence", err)
	}
	// A reply that arrived long before the read, as one that waited in
	// the socket while a starved goroutine waited for the CPU: read.
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	c.sent.Store(time.Now().Add(-time.Second).UnixNano()) // the deadline passed long ago
	b := make([]byte, 8)
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != "pong" {
		t.Fatalf("a waiting reply: Read = %q, %v; want pong", b[:n], err)
	}
	// A closed peer is no silence: the read returns its end.
	srv.Close()
	c.sent.Store(time.Now().Add(-time.Second).UnixNano())
	if _, err := c.Read(b); err != io.EOF {
		t.Fatalf("a closed peer: Read error %v, want EOF", err)
	}
}
