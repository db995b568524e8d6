package originconn

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkKeepAliveRoundTrip measures one origin exchange on a kept-alive
// loopback connection, with and without the Conn, for a small and a
// larger body: what following the framing costs a miss.
func BenchmarkKeepAliveRoundTrip(b *testing.B) {
	for _, size := range []int{1 << 10, 256 << 10} {
		body := strings.Repeat("x", size)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, body)
		}))
		for _, guarded := range []bool{false, true} {
			nd := &net.Dialer{Timeout: 5 * time.Second}
			tr := &http.Transport{DialContext: nd.DialContext}
			name := "plain"
			if guarded {
				d := &Dialer{Dialer: nd}
				tr.DialContext, name = d.DialContext, "guarded"
			}
			b.Run(fmt.Sprintf("%s/%dKiB", name, size>>10), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, srv.URL+"/", nil)
					if err != nil {
						b.Fatal(err)
					}
					resp, err := tr.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			tr.CloseIdleConnections()
		}
		srv.Close()
	}
}
