//go:build tools

// Package internal pins module dependencies that packages will import.
package internal

import (
	_ "github.com/allegro/bigcache/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.uber.org/goleak"
	_ "sigs.k8s.io/yaml"
)
