package tierconfig

// KeyHeaders returns the canonical names of the request headers the rule
// adds to the cache key, in configured order (nil when none). Because they
// are keyed, the proxy may forward them even when they are headers it
// otherwise withholds from the origin. The slice is computed once at
// Compile and shared, so the call does not allocate: callers must not
// modify it.
func (r *CompiledRule) KeyHeaders() []string { return r.headerKeys }
