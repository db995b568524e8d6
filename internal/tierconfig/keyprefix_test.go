package tierconfig

import (
	"strings"
	"testing"
)

func TestOnlyTheSidecarsOwnKeyPrefixIsAccepted(t *testing.T) {
	own := KeyPrefix("shop", "web")
	cases := map[string]struct {
		prefix string
		want   []string // substrings of the error; none: accepted
	}{
		"a config without a key prefix is accepted":            {"", nil},
		"a config naming the sidecar's own prefix is accepted": {"tc:shop/web:", nil},
		"another tier's prefix is refused naming the field and both prefixes": {
			"tc:bank/accounts:", []string{"l2.keyPrefix:", `"tc:bank/accounts:"`, `"tc:shop/web:"`}},
		"a prefix that only starts like the own one is refused": {"tc:shop/web:x", []string{"l2.keyPrefix:"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := L2{KeyPrefix: c.prefix}.CheckKeyPrefix(own)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
