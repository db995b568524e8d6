package controlplane

// Sidecars is what one Server knows of a tier's sidecars: how many hold
// an open stream, which config version each holds, which version each
// refused last, and the NACKs since the Server started. The operator
// reports it per replica; the leader adds the replicas' reports up
// against the tier's current version.
type Sidecars struct {
	// Connected counts the open streams.
	Connected int
	// Applied counts the connected sidecars by the version they hold:
	// the version_info of their latest request ("" when it named none,
	// or something that is no version).
	Applied map[string]int
	// Rejected counts the connected sidecars whose latest answer was a
	// NACK, by the version it refused. A sidecar that accepts a later
	// version is not counted any more.
	Rejected map[string]int
	// NACKs are the tier's NACKs since the Server started (or since the
	// tier was last cleared).
	NACKs NACKStats
}

// Sidecars returns, by tier, the sidecars connected to this Server and the
// NACKs it heard. Tiers without either are absent. It walks every stream:
// call it at a report's pace, not per request.
func (s *Server) Sidecars() map[string]Sidecars {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Sidecars, len(s.connected)+len(s.nacks))
	get := func(tier string) Sidecars {
		t, ok := out[tier]
		if !ok {
			t = Sidecars{Applied: map[string]int{}, Rejected: map[string]int{}}
		}
		return t
	}
	for _, st := range s.streams {
		t := get(st.tier)
		t.Connected++
		t.Applied[st.applied]++
		if st.rejected != "" {
			t.Rejected[st.rejected]++
		}
		out[st.tier] = t
	}
	for tier, n := range s.nacks {
		t := get(tier)
		t.NACKs = *n
		out[tier] = t
	}
	return out
}
