package accesslog

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// BenchmarkLog is one request's line through the Logger: append-encoded
// into a pooled buffer and copied into the shared buffer.
func BenchmarkLog(b *testing.B) {
	l, err := New(Options{Writer: io.Discard, Defaults: DefaultDefaults(), FlushInterval: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close(context.Background()) }()
	c := compiled(b, tierconfig.AccessLog{})
	r := request("/static/app.css?v=3")
	e := okEntry
	b.ReportAllocs()
	for b.Loop() {
		l.Log(r, c, &e)
	}
}

// BenchmarkSlog is the same line through log/slog's JSON handler, the
// alternative measured (and not chosen: it allocates per line).
func BenchmarkSlog(b *testing.B) {
	lg := slog.New(slog.NewJSONHandler(io.Discard, nil))
	r := request("/static/app.css?v=3")
	e := okEntry
	b.ReportAllocs()
	for b.Loop() {
		lg.LogAttrs(context.Background(), slog.LevelInfo, "access",
			slog.String("method", r.Method), slog.String("host", r.Host), slog.String("path", r.URL.Path),
			slog.Int("status", e.Status), slog.Int64("bytes", e.Bytes), slog.Float64("duration", e.Duration.Seconds()),
			slog.String("result", e.Result), slog.String("layer", e.Layer), slog.String("client", "10.1.2.3"))
	}
}
