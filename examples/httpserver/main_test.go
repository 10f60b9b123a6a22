package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

var testLimits = limits{PerIP: 5, Window: 10 * time.Second, Free: 2, Pro: 4}

// caller makes real requests to one server.
type caller struct {
	t   *testing.T
	url string
	c   *http.Client
}

func (c caller) call(method, path, tenant string) (int, http.Header, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant", tenant)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (c caller) admitted(path, tenant string, n int) (ok int) {
	c.t.Helper()
	for range n {
		if code, _, _ := c.call("GET", path, tenant); code == 200 {
			ok++
		}
	}
	return ok
}

func serve(t *testing.T, a *app) caller {
	t.Helper()
	srv := httptest.NewServer(a.handler)
	t.Cleanup(srv.Close)
	return caller{t: t, url: srv.URL, c: srv.Client()}
}

func TestLocalApp(t *testing.T) {
	clk := engine.NewManualClock(time.Unix(1_700_000_000, 0))
	a, err := newLocalApp(testLimits, clk)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	c := serve(t, a)
	if got := c.admitted("/", "", 8); got != 5 {
		t.Fatalf("/ admitted %d of 8, want 5", got)
	}
	code, hdr, body := c.call("GET", "/", "")
	if code != 429 || body != "rate limited; retry after 11 s\n" {
		t.Fatalf("429: %d %q", code, body)
	}
	for k, want := range map[string]string{"Retry-After": "11", "RateLimit-Policy": `"default";q=5;w=10`, "RateLimit": `"default";r=0;t=11`} {
		if got := hdr.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := c.admitted("/api/hello", "bob", 5); got != 2 {
		t.Fatalf("free admitted %d, want 2", got)
	}
	if got := c.admitted("/api/hello", "acme", 6); got != 4 {
		t.Fatalf("pro admitted %d, want 4", got)
	}
	if code, _, _ := c.call("GET", "/api/hello", ""); code != 400 {
		t.Fatalf("no tenant: %d, want 400", code)
	}
	if code, _, body := c.call("POST", "/admin/tier?tier=free&limit=3", ""); code != 200 || body != "tier free: 3 per 10s\n" {
		t.Fatalf("swap: %d %q", code, body)
	}
	if got := c.admitted("/api/hello", "bob", 5); got != 1 {
		t.Fatalf("free after swap to 3 admitted %d, want 1 (counts kept)", got)
	}
	if code, _, _ := c.call("POST", "/admin/tier?tier=gold&limit=3", ""); code != 400 {
		t.Fatalf("bad tier: %d", code)
	}
	if code, hdr, _ := c.call("GET", "/healthz", ""); code != 200 || hdr.Get("RateLimit") != "" {
		t.Fatalf("healthz: %d %v", code, hdr)
	}
	_, _, metrics := c.call("GET", "/metrics", "")
	for _, want := range []string{`ringlimit_requests_total{outcome="allowed"} 12`, `outcome="rejected"} 1`, `outcome="error"} 0`, "ringlimit_keys 3"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
}

// TestRefusedTierChangeChangesNothing: the admin endpoint used to answer
// 400 for a limit above MaxLimit and apply it anyway, so that a new tenant
// of the tier then got 500.
func TestRefusedTierChangeChangesNothing(t *testing.T) {
	a, err := newLocalApp(testLimits, engine.NewManualClock(time.Unix(1_700_000_000, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	c := serve(t, a)
	for _, q := range []string{"limit=1099511627776", "limit=-1", "limit=0", "limit=x"} {
		code, _, body := c.call("POST", "/admin/tier?tier=free&"+q, "")
		if code != 400 {
			t.Fatalf("%s: %d %q", q, code, body)
		}
	}
	code, hdr, _ := c.call("GET", "/api/hello", "newcomer")
	if code != 200 || hdr.Get("RateLimit-Policy") != `"default";q=2;w=10` {
		t.Fatalf("a new free tenant after refused changes: %d %q", code, hdr.Get("RateLimit-Policy"))
	}
	if got := c.admitted("/api/hello", "newcomer", 3); got != 1 {
		t.Fatalf("free limit changed: admitted %d more, want 1", got)
	}
}

// notifyWriter is a goroutine-safe buffer that reports when a line
// matching re is written.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	re   *regexp.Regexp
	seen chan string
}

func newNotifyWriter(re string) *notifyWriter {
	return &notifyWriter{re: regexp.MustCompile(re), seen: make(chan string, 1)}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := w.re.FindSubmatch(p); m != nil {
		select {
		case w.seen <- string(m[len(m)-1]):
		default:
		}
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestFlags: bad flags exit 2 with the usage, before anything listens; a
// failure at run time exits 1, also before "listening".
func TestFlags(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there now

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-free", "-1"}, 2, "httpserver: -free = -1, want 1 … 1099511627775\n"},
		{[]string{"-pro", "0"}, 2, "httpserver: -pro = 0, want 1 … 1099511627775\n"},
		{[]string{"-limit", "1099511627776"}, 2, "httpserver: -limit = 1099511627776, want 1 … 1099511627775\n"},
		{[]string{"-window", "0s"}, 2, "httpserver: -window = 0s, want > 0\n"},
		{[]string{"-window", "7ns"}, 2, "httpserver: ringlimit: Config.Window = 7ns is not a whole number of nanoseconds per sub-window"},
		{[]string{"-addr", "127.0.0.1:99999"}, 2, `httpserver: -addr "127.0.0.1:99999": port "99999", want a number in 0 … 65535 (1 … 65535 for -redis)` + "\n"},
		{[]string{"-addr", "localhost"}, 2, `httpserver: -addr "localhost": address localhost: missing port in address; want host:port` + "\n"},
		{[]string{"-redis", "127.0.0.1"}, 2, `httpserver: -redis "127.0.0.1": address 127.0.0.1: missing port in address; want host:port` + "\n"},
		{[]string{"-bogus"}, 2, "flag provided but not defined: -bogus\n"},
		{[]string{"extra"}, 2, `httpserver: unexpected argument "extra"` + "\n"},
		{[]string{"-addr", taken.Addr().String()}, 1, "address already in use"},
		{[]string{"-addr", "127.0.0.1:0", "-redis", deadAddr}, 1, "redis: redisstore: Ping: dial tcp " + deadAddr},
	} {
		w := newNotifyWriter(`listening on`)
		code := run(context.Background(), c.args, w)
		out := w.String()
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, want %d; output:\n%s\nwant it to contain %q", c.args, code, c.code, out, c.want)
		}
		if c.code == 2 && !strings.Contains(out, "Usage of httpserver:") {
			t.Errorf("%v: no usage in\n%s", c.args, out)
		}
		if strings.Contains(out, "listening") {
			t.Errorf("%v: printed listening:\n%s", c.args, out)
		}
	}
}

// TestRunServesUntilCancelled: a good configuration logs the address it
// really listens on, serves it, and exits 0 when the context ends.
func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newNotifyWriter(`listening on (http://\S+)`)
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, w) }()
	var url string
	select {
	case url = <-w.seen:
	case code := <-done:
		t.Fatalf("exited %d before listening:\n%s", code, w.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("not listening after 10 s:\n%s", w.String())
	}
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"default";r=4;t=11` {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, w.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop after cancel")
	}
}
