// Package kubectlplugin is the kubectl plugin `kubectl tiercache`
// (cmd/kubectl-tiercache): the day-2 commands a platform engineer runs
// against a tier from a workstation, in the way kubectl, varnishadm and
// istioctl users expect.
//
//   - purge: sends a purge (hard, or with --soft one that marks stale) to
//     the tier's sidecars with the tier's own token, read from its Secret:
//     to one sidecar when L2 fans purges out to every replica, else to
//     every pod.
//   - status: the CacheTier's status and, per pod, the config version, hit
//     ratio and L2 state read from the sidecar's metrics.
//   - explain: which rule a URL falls under, what its cache key is made of
//     and which lifetimes apply, decided by the sidecar's own code
//     (internal/tierconfig, internal/cachekey) on the tier's rendered
//     config (internal/operator/render).
//
// It reaches pods through the API server: the pod proxy for metrics and a
// port-forward for purges (the API server removes the Authorization header
// it authenticated from proxied requests, so the sidecar's bearer token
// cannot travel through the pod proxy). --address bypasses both and talks
// to admin addresses directly: standalone sidecars, and tests, whose API
// server has no kubelet.
package kubectlplugin
