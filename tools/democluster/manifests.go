package main

import (
	"fmt"
	"strings"
)

// Names of what the demo creates.
const (
	release    = "tiercache"
	releaseNS  = "tiercache-system"
	appNS      = "demo"
	appName    = "demo"
	tierName   = "web"
	appPort    = 8081
	redisAddr  = release + "-redis." + releaseNS + ".svc:6379" // the chart's bundled Redis Service
	appReplica = 2
)

// helmArgs installs the chart from dir with the images of version,
// which are in the node's containerd and cannot be pulled, and the
// bundled Redis on the image made from the tool cache's redis-server.
// One operator replica: a second one is for rollouts and node drains,
// and the demo's node is a laptop's.
func helmArgs(chart, version string) []string {
	return []string{
		"install", release, chart, "--namespace", releaseNS, "--create-namespace",
		"--set", "image.tag=" + version,
		"--set", "image.pullPolicy=Never",
		"--set", "sidecar.imagePullPolicy=Never",
		"--set", "operator.replicas=1",
		"--set", "redis.bundled.enabled=true",
		"--set", "redis.bundled.image.repository=" + redisImageRepo,
		"--set", "redis.bundled.image.tag=" + redisImageTag,
		"--set", "redis.bundled.image.pullPolicy=Never",
		"--wait", "--timeout", "5m",
	}
}

// tierManifest is the demo's CacheTier: L1 in each pod, L2 in the
// bundled Redis.
func tierManifest() string {
	return fmt.Sprintf(`apiVersion: tiercache.io/v1alpha1
kind: CacheTier
metadata: {name: %s, namespace: %s}
spec:
  l1: {maxSize: 32Mi}
  l2: {addresses: [%q]}
`, tierName, appNS, redisAddr)
}

// appManifest is the demo origin, annotated for the tier, and its
// Service, which targets the port by name (the sidecar takes that name
// over). Their namespace is made before the tier's.
func appManifest(image string) string {
	return strings.NewReplacer("NS", appNS, "APP", appName, "TIER", tierName, "IMAGE", image,
		"PORT", fmt.Sprint(appPort), "REPLICAS", fmt.Sprint(appReplica)).Replace(`apiVersion: apps/v1
kind: Deployment
metadata: {name: APP, namespace: NS}
spec:
  replicas: REPLICAS
  selector:
    matchLabels: {app: APP}
  template:
    metadata:
      labels: {app: APP}
      annotations:
        tiercache.io/tier: TIER
    spec:
      securityContext: {runAsNonRoot: true}
      containers:
        - name: origin
          image: IMAGE
          imagePullPolicy: Never
          ports:
            - {name: http, containerPort: PORT}
---
apiVersion: v1
kind: Service
metadata: {name: APP, namespace: NS}
spec:
  selector: {app: APP}
  ports:
    - {name: http, port: 80, targetPort: http}
`)
}
