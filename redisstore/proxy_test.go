package redisstore

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a loopback TCP proxy in front of a test's redis-server that can
// add latency to replies and cut connections, to reproduce what a slow or
// flaky network does to a client.
type proxy struct {
	ln     net.Listener
	target string
	// delay is added before each chunk of replies is forwarded (ns).
	delay atomic.Int64
	// cut, while positive, makes the next chunk of replies that starts
	// with an array ('*': a script's reply, not a handshake's) be dropped
	// and both connections closed: the server ran the commands, the
	// client sees EOF. Each cut decrements it.
	cut atomic.Int64
	// cuts counts the chunks dropped so far.
	cuts atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: []net.Conn{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false // closed
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c) || !p.track(s) {
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			_ = s.Close()
			_ = c.Close()
		}()
		go func() {
			defer p.wg.Done()
			defer c.Close()
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if buf[0] == '*' && p.cut.Load() > 0 && p.cut.Add(-1) >= 0 {
						p.cuts.Add(1)
						return
					}
					if d := p.delay.Load(); d > 0 {
						time.Sleep(time.Duration(d)) // simulated latency
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
