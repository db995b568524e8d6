package accesslog

import (
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// timeLayout is log/slog's JSON time format (RFC 3339 with milliseconds),
// so access lines sort and parse like the sidecar's other lines.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// appendLine appends the JSON line of one request, newline included:
//
//	{"time":…,"level":"INFO","msg":"access","method":"GET","host":"h",
//	"path":"/a","query":"page=2","status":200,"bytes":512,
//	"duration":0.000231,"result":"hit","layer":"l1","rule":"static",
//	"origin_time":0.0123,"client":"10.0.0.7"}
//
// status and bytes are present when the proxy's path reported them (Entry
// Status > 0); query only when the policy keeps a parameter, rule only
// when a rule matched, origin_time only when the origin was asked.
// Durations are seconds, as the Prometheus metrics' are.
func appendLine(b []byte, r *http.Request, e *Entry, path, query string, p *policy) []byte {
	b = append(b, `{"time":"`...)
	b = e.End.AppendFormat(b, timeLayout)
	b = append(b, `","level":"INFO","msg":"access","method":`...)
	b = appendString(b, r.Method)
	b = append(b, `,"host":`...)
	b = appendString(b, r.Host)
	b = append(b, `,"path":`...)
	b = appendString(b, path)
	if query != "" && !p.query.Empty() {
		b = append(b, `,"query":"`...)
		start := len(b)
		b = p.query.Append(b, query)
		if len(b) == start {
			b = b[:start-len(`,"query":"`)]
		} else {
			b = escapeTail(b, start)
			b = append(b, '"')
		}
	}
	if e.Status > 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, e.Bytes, 10)
	}
	b = append(b, `,"duration":`...)
	b = appendSeconds(b, e.Duration)
	b = append(b, `,"result":`...)
	b = appendString(b, e.Result)
	b = append(b, `,"layer":`...)
	b = appendString(b, e.Layer)
	if e.Rule != "" {
		b = append(b, `,"rule":`...)
		b = appendString(b, e.Rule)
	}
	if e.OriginTime > 0 {
		b = append(b, `,"origin_time":`...)
		b = appendSeconds(b, e.OriginTime)
	}
	b = append(b, `,"client":`...)
	b = appendString(b, p.client(r))
	return append(b, "}\n"...)
}

func appendSeconds(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, d.Seconds(), 'f', -1, 64)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := len(b)
	b = append(b, s...)
	b = escapeTail(b, start)
	return append(b, '"')
}

// escapeTail JSON-escapes b[start:] in place (growing b when needed), as
// encoding/json does without HTML escaping: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, U+2028
// and U+2029 escaped. It only copies when something needs escaping.
func escapeTail(b []byte, start int) []byte {
	i := start
	for i < len(b) {
		c := b[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			break
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError || r == '\u2028' || r == '\u2029' {
			break
		}
		i += size
	}
	if i == len(b) {
		return b
	}
	// Something needs escaping: re-encode the rest from a copy.
	rest := append([]byte(nil), b[i:]...)
	b = b[:i]
	for j := 0; j < len(rest); {
		c := rest[j]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			j++
			continue
		}
		r, size := utf8.DecodeRune(rest[j:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, rest[j:j+size]...)
		}
		j += size
	}
	return b
}

const hex = "0123456789abcdef"
