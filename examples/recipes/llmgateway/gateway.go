package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/httplimit"
)

// gateway is the example's HTTP handler: POST /v1/completions with a JSON
// body {"prompt": …, "max_tokens": …}, limited in tokens per minute per
// tenant (header X-Tenant). Before the model runs, the middleware reserves
// the request's estimate, the prompt's tokens plus max_tokens: a request
// whose estimate does not fit is refused with 429 and never reaches the
// model. After it, the handler reports the response's real usage
// (httplimit.ReportCost), and the middleware settles the reservation to
// it: what was not used goes back to the tenant's budget at once. A
// response that used more than its estimate would be charged in full, a
// debt that the tenant's next requests wait out.
//
// The example's model (complete) counts a word as a token.
type gateway struct {
	mw *httplimit.Middleware
}

// defaultMaxTokens is the completion estimate of a request that gives no
// max_tokens; maxTokens bounds max_tokens; maxBody bounds the body, which
// is read before the limiter decides.
const (
	defaultMaxTokens = 256
	maxTokens        = 1 << 20
	maxBody          = 64 << 10
)

// request is the body of POST /v1/completions.
type request struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

// usage is what the model reports with its response.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// newGateway limits tokens per minute per tenant on limiter: an
// *engine.Engine (one process) or a *redisstore.Limiter (every replica
// shares each tenant's budget), any limiter httplimit.WithSettle takes.
func newGateway(limiter any) (*gateway, error) {
	mw, err := httplimit.NewMiddleware(limiter,
		httplimit.WithKey(httplimit.KeyByHeader("X-Tenant", httplimit.MissingReject)),
		httplimit.WithCost(estimate),
		httplimit.WithSettle(),
	)
	if err != nil {
		return nil, err
	}
	return &gateway{mw: mw}, nil
}

func (g *gateway) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", parse(g.mw.Handler(http.HandlerFunc(completions))))
	return mux
}

type requestKey struct{}

// parse decodes the body into the request's context, for the estimate
// (before the limiter) and the handler (after it); a bad body is a 400.
func parse(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
			http.Error(w, "the body is not a completion request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if req.MaxTokens == 0 {
			req.MaxTokens = defaultMaxTokens
		}
		if req.MaxTokens < 1 || req.MaxTokens > maxTokens {
			http.Error(w, fmt.Sprintf("max_tokens = %d, want 1 … %d", req.MaxTokens, maxTokens), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestKey{}, &req)))
	})
}

// estimate is a request's cost before the model runs: its prompt's tokens
// plus the most its completion may use.
func estimate(r *http.Request) int64 {
	req := r.Context().Value(requestKey{}).(*request)
	return tokens(req.Prompt) + req.MaxTokens
}

// completions runs the model and reports the tokens it used.
func completions(w http.ResponseWriter, r *http.Request) {
	text, u := complete(*r.Context().Value(requestKey{}).(*request))
	if err := httplimit.ReportCost(r.Context(), u.TotalTokens); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError) // no settling middleware: a wiring mistake
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Text  string `json:"text"`
		Usage usage  `json:"usage"`
	}{text, u})
}

// tokens counts a text's tokens: its words, in this example.
func tokens(s string) int64 { return int64(len(strings.Fields(s))) }

// complete is the example's model: it answers with as many words as the
// prompt has, at most max_tokens, and reports the usage as an LLM API does.
// A real gateway calls the upstream model here.
func complete(req request) (string, usage) {
	in := tokens(req.Prompt)
	out := min(in, req.MaxTokens)
	words := make([]string, out)
	for i := range words {
		words[i] = "tok" + strconv.Itoa(i)
	}
	return strings.Join(words, " "), usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out}
}
