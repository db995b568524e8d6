package tierconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
)

// Size is a byte count. JSON/YAML: a Kubernetes-style quantity string
// ("512Mi", "1Gi", "64Ki", "1M", "1500") or a plain number. It marshals to
// its canonical string (binary suffix when exact, else plain bytes).
type Size int64

// Byte multiples understood in sizes, as in Kubernetes quantities.
const (
	Ki Size = 1 << (10 * (iota + 1))
	Mi
	Gi
	Ti
)

// suffixMultiplier returns the multiplier of an accepted suffix. Kubernetes
// also knows Pi, Ei, P, E, milli and exponents; none of them is a sensible
// cache size, so they are refused rather than silently accepted.
func suffixMultiplier(suffix string) (int64, bool) {
	switch suffix {
	case "":
		return 1, true
	case "Ki":
		return int64(Ki), true
	case "Mi":
		return int64(Mi), true
	case "Gi":
		return int64(Gi), true
	case "Ti":
		return int64(Ti), true
	case "k":
		return 1e3, true
	case "M":
		return 1e6, true
	case "G":
		return 1e9, true
	case "T":
		return 1e12, true
	}
	return 0, false
}

const sizeSuffixList = "Ki, Mi, Gi, Ti, k, M, G or T"

// ParseSize parses a Kubernetes-style quantity of bytes: a whole or decimal
// number with an optional binary (Ki, Mi, Gi, Ti) or decimal (k, M, G, T)
// suffix. The result must be a whole, non-negative number of bytes that
// fits in an int64: "1.5Ki" is 1536, "0.5" is an error.
func ParseSize(s string) (Size, error) {
	if s == "" {
		return 0, errors.New(`invalid size "": empty`)
	}
	if s[0] == '-' {
		return 0, fmt.Errorf("invalid size %q: must not be negative", s)
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[:i]
	fracPart := ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		fracPart = s[i+1 : j]
		if fracPart == "" {
			return 0, syntaxError(s)
		}
		i = j
	}
	if intPart == "" {
		return 0, syntaxError(s)
	}
	suffix := s[i:]
	mult, ok := suffixMultiplier(suffix)
	if !ok {
		if !isLetters(suffix) {
			return 0, syntaxError(s)
		}
		return 0, fmt.Errorf("invalid size %q: unknown suffix %q (want %s)", s, suffix, sizeSuffixList)
	}
	// Exact arithmetic: (digits * mult) / 10^len(frac) must divide evenly
	// and fit in an int64.
	n, _ := new(big.Int).SetString(intPart+fracPart, 10)
	n.Mul(n, big.NewInt(mult))
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fracPart))), nil)
	q, r := new(big.Int).QuoRem(n, den, new(big.Int))
	if r.Sign() != 0 {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", s)
	}
	if !q.IsInt64() {
		return 0, fmt.Errorf("invalid size %q: too large (at most %d bytes)", s, int64(^uint64(0)>>1))
	}
	return Size(q.Int64()), nil
}

func syntaxError(s string) error {
	return fmt.Errorf("invalid size %q: want a number of bytes with an optional suffix %s, such as 512Mi", s, sizeSuffixList)
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func isLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// String returns the canonical form of s: the largest binary suffix that
// divides it exactly ("512Mi", "1536Ki"), else plain bytes ("1500").
func (s Size) String() string {
	if s > 0 {
		for _, u := range [...]struct {
			mult   Size
			suffix string
		}{{Ti, "Ti"}, {Gi, "Gi"}, {Mi, "Mi"}, {Ki, "Ki"}} {
			if s%u.mult == 0 {
				return strconv.FormatInt(int64(s/u.mult), 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalJSON encodes s as its canonical string, so equal sizes always
// marshal (and hash) the same whatever spelling they were written in.
func (s Size) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, s.String()), nil
}

// UnmarshalJSON accepts a quantity string or a JSON number; null leaves s
// unchanged.
func (s *Size) UnmarshalJSON(data []byte) error {
	text, err := scalarText(data, "size")
	if err != nil || text == nil {
		return err
	}
	v, err := ParseSize(*text)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// scalarText returns the text of a JSON string or number token, nil for
// null, and an error for anything else.
func scalarText(data []byte, what string) (*string, error) {
	data = bytes.TrimSpace(data)
	switch {
	case len(data) == 0:
		return nil, fmt.Errorf("invalid %s: empty value", what)
	case string(data) == "null":
		return nil, nil
	case data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("invalid %s: %w", what, err)
		}
		return &s, nil
	case data[0] == '-' || isDigit(data[0]):
		s := string(data)
		return &s, nil
	default:
		return nil, fmt.Errorf("invalid %s %s: must be a string or a number", what, data)
	}
}
