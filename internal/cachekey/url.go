package cachekey

// PrimaryKeys returns the primary keys of a resource under both schemes,
// shaped by s (the shape of the rule its responses were stored under:
// tierconfig Compiled.StoredRule), as the proxy stores them. Every stored
// variant of the resource (by Vary, or by the request headers and cookies
// its rule keys on) is reached through a marker under one of these keys,
// so deleting them retires all of its variants.
func PrimaryKeys(s *Shape, host, escapedPath, rawQuery string) []string {
	tgt := string(AppendTarget(nil, s, escapedPath, rawQuery))
	keys := make([]string, 0, 2)
	for _, scheme := range [...]string{"http", "https"} {
		keys = append(keys, string(AppendPrimary(nil, scheme, Host(host, scheme), tgt)))
	}
	return keys
}

// AppendTarget appends path?query as keyed under s: the path as received,
// and the query shaped by s (no '?' when s drops every parameter).
func AppendTarget(dst []byte, s *Shape, escapedPath, rawQuery string) []byte {
	dst = append(dst, escapedPath...)
	if rawQuery != "" {
		q := len(dst)
		dst = append(dst, '?')
		dst = s.AppendQuery(dst, rawQuery)
		if len(dst) == q+1 {
			dst = dst[:q]
		}
	}
	return dst
}
