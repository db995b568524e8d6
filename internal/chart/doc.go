// Package chart holds the tests of the Helm chart in charts/tiercache; it
// has no code of its own. They check what a reviewer cannot see by reading
// the templates:
//
//   - helm lint --strict is clean for the default values and for every
//     values file in testdata/values;
//   - helm template output matches the goldens in testdata/golden
//     (go test ./internal/chart -update rewrites them);
//   - the chart's files/crds are byte-for-byte config/crd, it has no crds/,
//     and templates/crds.yaml renders them unchanged but for the release's
//     labels and the keep annotation (the goldens elide the CRD specs);
//   - no template sets a uid, gid or fsGroup that a value did not ask for
//     (and none on OpenShift);
//   - the operator container's args are accepted by operator.ParseArgs, and
//     the names they carry (Service, Secret, webhook configurations, xDS
//     address) are the objects the chart renders;
//   - the webhook registrations agree with config/webhook/manifests.yaml;
//   - the dashboard and the alerts only query metrics (and, for the
//     alerts, labels and label values) the code registers;
//   - helm install against envtest's real API server succeeds and its
//     objects read back, the RBAC grants what the operator needs and no
//     more, an upgrade keeps the certificate the operator wrote, and an
//     upgrade updates the CRD (one left by crds/ is adopted as the docs
//     say).
//
// helm comes from $HELM and the API server from $KUBEBUILDER_ASSETS (make
// test sets both from hack/k8s-tools.sh). Without them the tests skip,
// unless TIERCACHE_REQUIRE_ENVTEST=1, which turns a skip into a failure.
package chart
