package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"pollux/actors/server/api/client"
)

// FuzzAnswer feeds the client arbitrary answers of a server: it never
// panics, a 3xx-4xx is an APIError, a 5xx ErrUnavailable, and a 2xx either
// decodes or is an error of neither kind.
func FuzzAnswer(f *testing.F) {
	f.Add(200, []byte(`[{"id":"j1","state":"running","gpus":2}]`))
	f.Add(200, []byte(`{"leader":"s1"}`))
	f.Add(200, []byte(`null`))
	f.Add(201, []byte(``))
	f.Add(403, []byte(`{"error":"api: token acc (x) has role read"}`))
	f.Add(404, []byte("404 page not found\n"))
	f.Add(503, []byte(`{"error":`))
	f.Add(302, []byte(`{}`))
	var mu sync.Mutex
	var status int
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	// (The timeout turns a hang into an error the checks below report.)
	c, err := client.New(client.Config{Servers: []string{srv.URL}, Timeout: 10 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	f.Fuzz(func(t *testing.T, code int, data []byte) {
		if code < 200 || code > 599 {
			t.Skip("not a final HTTP status")
		}
		mu.Lock()
		status, body = code, data
		mu.Unlock()
		_, err := c.Jobs(context.Background())
		var refused *client.APIError
		switch {
		case code >= 300 && code < 500:
			if !errors.As(err, &refused) || refused.StatusCode != code {
				t.Errorf("%d: %v, want an APIError", code, err)
			}
		case code >= 500:
			if !errors.Is(err, client.ErrUnavailable) {
				t.Errorf("%d: %v, want ErrUnavailable", code, err)
			}
		case errors.As(err, &refused) || errors.Is(err, client.ErrUnavailable):
			t.Errorf("%d: %v", code, err)
		}
	})
}
