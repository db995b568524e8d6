package tierconfig

import (
	"fmt"
	"net/textproto"
	"strings"
)

// TargetedCacheControl is the tier's target list of RFC 9213 (targeted
// cache-control fields such as CDN-Cache-Control): which fields this cache
// obeys instead of Cache-Control, and whether clients see them.
//
// Like bodyStore, it is resolved by accessors (Defaults.TargetedFields,
// Defaults.StripTargeted) rather than filled in by WithDefaults, so a tier
// that does not set it pushes the same JSON as before it existed (an older
// sidecar refuses a field it does not know).
// +kubebuilder:object:generate=true
type TargetedCacheControl struct {
	// Fields are the targeted field names the sidecars obey, most
	// applicable first: the first one a response carries with a valid,
	// non-empty value (a Structured Fields Dictionary) alone decides
	// whether and how long the sidecar stores the response; Cache-Control
	// and Expires are then ignored. An invalid field is ignored as if
	// absent. Unset: [CDN-Cache-Control]. An empty list turns targeted
	// fields off. Names are case-insensitive, without duplicates, and not
	// Cache-Control.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	// +listType=atomic
	Fields []string `json:"fields,omitzero"`
	// Strip removes the listed fields from every response the sidecars
	// send their clients, hits and misses alike. Default false: they are
	// forwarded, so a CDN in front still sees CDN-Cache-Control. Stored
	// responses keep them either way, so a later change of fields applies
	// exactly when an entry is revalidated.
	// +optional
	Strip bool `json:"strip,omitempty"`
}

// maxTargetedFields bounds the target list: each field is looked up in
// every response a fill stores.
const maxTargetedFields = 8

// StripTargeted reports whether the target list's fields are removed from
// responses to clients.
func (d Defaults) StripTargeted() bool {
	return d.TargetedCacheControl != nil && d.TargetedCacheControl.Strip
}

func (t *TargetedCacheControl) clone() *TargetedCacheControl {
	if t == nil {
		return nil
	}
	c := *t
	c.Fields = cloneSlice(t.Fields)
	return &c
}

func (t *TargetedCacheControl) validate(p *problems) {
	if t == nil {
		return
	}
	const at = "defaults.targetedCacheControl"
	if len(t.Fields) > maxTargetedFields {
		p.add(at+".fields", "must have at most %d names (got %d)", maxTargetedFields, len(t.Fields))
	}
	for i, name := range t.Fields {
		field := fmt.Sprintf("%s.fields[%d]", at, i)
		switch {
		case !isToken(name):
			p.add(field, "not a valid HTTP field name (got %q)", name)
		case strings.EqualFold(name, "Cache-Control"):
			p.add(field, "must not be Cache-Control, which targeted fields override (got %q)", name)
		default:
			for j, prev := range t.Fields[:i] {
				if strings.EqualFold(prev, name) {
					p.add(field, "duplicates fields[%d] (names are case-insensitive) (got %q)", j, name)
					break
				}
			}
		}
	}
	if t.Strip && t.Fields != nil && len(t.Fields) == 0 {
		p.add(at+".strip", "strips nothing: fields is empty, which turns targeted fields off")
	}
}

// canonicalTargeted returns the target list with canonical names, as
// httpcache.Policy.TargetedFields and the proxy's header maps want them
// (nil when off).
func canonicalTargeted(d Defaults) []string {
	names := d.TargetedFields()
	if len(names) == 0 {
		return nil
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return out
}
