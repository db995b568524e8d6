package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBasesGoRoundRobin(t *testing.T) {
	b, err := NewBases([]string{"http://127.0.0.1:1/", "http://127.0.0.1:2", "http://localhost:3/prefix"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 6 {
		got = append(got, b.Next())
	}
	want := "http://127.0.0.1:1 http://127.0.0.1:2 http://localhost:3/prefix http://127.0.0.1:1 http://127.0.0.1:2 http://localhost:3/prefix"
	if strings.Join(got, " ") != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestBasesRefuseBadLists(t *testing.T) {
	many := make([]string, MaxBases+1)
	for i := range many {
		many[i] = "http://127.0.0.1:1"
	}
	for _, tt := range []struct {
		name string
		urls []string
		want string
	}{
		{"an empty list is refused", nil, "at least one"},
		{"a remote server is refused", []string{"http://127.0.0.1:1", "http://10.0.0.1:8080"}, "loopback"},
		{"a base with a query is refused", []string{"http://127.0.0.1:1/?a=b"}, "no query"},
		{"too many bases are refused", many, "at most"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewBases(tt.urls)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	b, _ := NewBases([]string{"http://127.0.0.1:1"})
	if err := b.Set([]string{"http://192.168.0.1"}); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Set: err = %v, want ErrNotLoopback", err)
	}
	if got := b.Current(); len(got) != 1 || got[0] != "http://127.0.0.1:1" {
		t.Errorf("a refused list replaced the one in force: %q", got)
	}
}

func TestReadBasesFileSkipsCommentsAndBlankLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bases")
	writeFile(t, path, "# replicas\nhttp://127.0.0.1:1\n\n  http://127.0.0.1:2  \n")
	got, err := ReadBasesFile(path)
	if err != nil || strings.Join(got, " ") != "http://127.0.0.1:1 http://127.0.0.1:2" {
		t.Errorf("got %q, %v", got, err)
	}
	writeFile(t, path, strings.Repeat("#", maxBasesFile+1))
	if _, err := ReadBasesFile(path); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("a huge file: err = %v", err)
	}
}

// writeFile replaces path atomically, as bench.sh does. Safe to call from
// any goroutine: it reports with t.Error.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}

func counting(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("X-Cache", "HIT; layer=l1")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestRunFollowsTheBasesFile(t *testing.T) {
	a, na := counting(t)
	b, nb := counting(t)
	path := filepath.Join(t.TempDir(), "bases")
	writeFile(t, path, a.URL+"\n")
	changes := make(chan BaseChange, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Wait until a has been used, then try a list that must not be
		// applied; once the watcher has refused it, move the traffic to b.
		for deadline := time.Now().Add(10 * time.Second); na.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		writeFile(t, path, "http://10.0.0.1:80\n")
		timeout := time.After(10 * time.Second)
	refusal:
		for {
			select {
			case c := <-changes:
				if c.Error != "" {
					break refusal
				}
			case <-timeout:
				t.Error("the watcher did not refuse the non-loopback list within 10s")
				break refusal
			}
		}
		writeFile(t, path, b.URL+"\n")
		for deadline := time.Now().Add(10 * time.Second); nb.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	res, err := Run(context.Background(), Config{
		Targets:     []Target{{URL: "/x"}},
		BasesFile:   path,
		BasesReload: 20 * time.Millisecond,
		OnBasesChange: func(c BaseChange) {
			select {
			case changes <- c:
			default:
			}
		},
		Concurrency: 2,
		Duration:    1500 * time.Millisecond,
		MaxRequests: 1 << 40,
		Timeout:     5 * time.Second,
	})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if na.Load() == 0 || nb.Load() == 0 || res.Errors != 0 {
		t.Fatalf("a got %d, b got %d, errors %d %v: want both used, no errors", na.Load(), nb.Load(), res.Errors, res.ErrorSamples)
	}
	if res.Bases[a.URL].Requests != na.Load() || res.Bases[b.URL].Requests+res.Bases[a.URL].Requests != res.Requests {
		t.Errorf("bases %v vs a %d b %d", res.Bases, na.Load(), nb.Load())
	}
	var refused, moved bool
	for _, c := range res.BaseChanges {
		refused = refused || strings.Contains(c.Error, "loopback")
		moved = moved || len(c.Bases) == 1 && c.Bases[0] == b.URL
	}
	if !refused || !moved {
		t.Errorf("base changes = %+v, want the refused list and then b", res.BaseChanges)
	}
}

func TestRunNeedsBasesExactlyForPaths(t *testing.T) {
	base := Config{Concurrency: 1, Duration: time.Second, MaxRequests: 1, Timeout: time.Second}
	for _, tt := range []struct {
		name string
		cfg  func(c *Config)
		want string
	}{
		{"a path without a base is refused", func(c *Config) { c.Targets = []Target{{URL: "/x"}} }, "needs --base"},
		{"an absolute URL with a base is refused", func(c *Config) {
			c.Targets, c.Bases = []Target{{URL: "http://127.0.0.1:1/x"}}, []string{"http://127.0.0.1:2"}
		}, "targets are paths"},
		{"both --base and --bases-file are refused", func(c *Config) {
			c.Targets, c.Bases, c.BasesFile = []Target{{URL: "/x"}}, []string{"http://127.0.0.1:2"}, "f"
		}, "one or the other"},
		{"a remote base is refused", func(c *Config) {
			c.Targets, c.Bases = []Target{{URL: "/x"}}, []string{"http://10.0.0.2"}
		}, "loopback"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.cfg(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	c := base
	c.Targets, c.BasesFile = []Target{{URL: "/x"}}, filepath.Join(t.TempDir(), "absent")
	if _, err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "--bases-file") {
		t.Errorf("a missing bases file: err = %v", err)
	}
}

func TestRunSendsOneHostToEveryBase(t *testing.T) {
	var hosts sync.Map
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hosts.Store(r.Host, true) })
	a, b := httptest.NewServer(h), httptest.NewServer(h)
	defer a.Close()
	defer b.Close()
	_, err := Run(context.Background(), Config{
		Targets: []Target{{URL: "/x"}}, Bases: []string{a.URL, b.URL}, Host: "web.shop.svc:80",
		Concurrency: 1, Duration: 30 * time.Second, MaxRequests: 4, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	hosts.Range(func(k, _ any) bool { seen = append(seen, k.(string)); return true })
	if len(seen) != 1 || seen[0] != "web.shop.svc:80" {
		t.Errorf("hosts seen = %q, want only web.shop.svc:80", seen)
	}
	for _, bad := range []string{"a b", "x/y", "user@h", "h:1\r\nX: y", ":80"} {
		c := Config{Targets: []Target{{URL: "http://127.0.0.1:1/"}}, Concurrency: 1, Duration: time.Second, MaxRequests: 1, Timeout: time.Second, Host: bad}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--host") {
			t.Errorf("host %q: err = %v", bad, err)
		}
	}
}
