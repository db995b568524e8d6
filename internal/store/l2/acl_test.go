package l2

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheACLLineIsTheDocumentedOne: docs/l2.md shows the line
// ACLSetUserLine prints (kubectl tiercache analyze), for shop/web.
func TestTheACLLineIsTheDocumentedOne(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "l2.md"))
	if err != nil {
		t.Fatal(err)
	}
	line := ACLSetUserLine("tc-shop-web", "tc:shop/web:", false)
	if !strings.Contains(string(doc), "\n"+line+"\n") {
		t.Errorf("docs/l2.md does not show the ACL line the product prints:\n%s", line)
	}
	if c := ACLSetUserLine("u", "p:", true); !strings.HasSuffix(c, " +cluster|slots +command") {
		t.Errorf("the Cluster line %q lacks the slot map and command table", c)
	}
}
