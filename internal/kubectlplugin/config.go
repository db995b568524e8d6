package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tiercache/tiercache/internal/operator/inject"
)

// maxConfigAnswer bounds what config reads from a sidecar.
const maxConfigAnswer = 4 << 20

func (r *runner) configCommand() *cobra.Command {
	var output *string
	var tokenFile string
	cmd := &cobra.Command{
		Use:   "config POD",
		Short: "The config a pod's sidecar runs, secrets redacted",
		Long: `config prints the tier config the pod's sidecar runs now (what its tier, the
control plane's last push, its command line and its Secrets made of it), as
YAML, from the sidecar's admin GET /config over a port-forward: the config
version (tiercache_config_info's) and the sidecar's generation, then the
config. Secrets (the Redis password, the purge token) are printed as REDACTED
when set; they never leave the pod.

The sidecar answers only with the tier's purge token, which config reads as
purge does (the Secret the sidecars get it from; or --purge-token-file).`,
		Example: `  kubectl tiercache config web-5f7c9-abcde -n shop
  kubectl tiercache config web-5f7c9-abcde -n shop -o json`,
		Args: exactArgs("POD"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			return r.showConfig(cmd.Context(), args[0], tokenFile, *output)
		},
	}
	cmd.Flags().StringVar(&tokenFile, "purge-token-file", "", "read the tier's purge token from this file instead of its Secret")
	output = outputFlag(cmd)
	return cmd
}

func (r *runner) showConfig(ctx context.Context, podName, tokenFile, output string) error {
	k, err := r.cluster()
	if err != nil {
		return err
	}
	var pod corev1.Pod
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: podName}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %q not found in namespace %q", podName, k.namespace)
		}
		return fmt.Errorf("reading pod %s/%s: %w", k.namespace, podName, err)
	}
	if state := podState(&pod); state != "" {
		return fmt.Errorf("pod %s/%s has no running sidecar to ask: %s", pod.Namespace, pod.Name, state)
	}
	tierName := pod.Labels[inject.LabelTier]
	if tierName == "" {
		return fmt.Errorf("pod %s/%s has no %s label: it is not injected", pod.Namespace, pod.Name, inject.LabelTier)
	}
	tier, err := k.tier(ctx, tierName)
	if err != nil {
		return err
	}
	var token string
	if tokenFile != "" {
		if token, err = readTokenFile(tokenFile); err != nil {
			return err
		}
	} else if token, err = k.purgeToken(ctx, tier); err != nil {
		return err
	}
	access := r.opts.Pods
	if access == nil {
		if access, err = newAPIServerPods(k.rest); err != nil {
			return err
		}
	}
	addr, stop, err := access.Forward(ctx, &pod, adminPort(&pod, tier))
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	defer stop()
	body, err := getConfig(ctx, addr, token)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if output == "json" {
		var out bytes.Buffer
		if err := json.Indent(&out, body, "", "  "); err != nil {
			return err
		}
		_, err := r.streams.Out.Write(append(bytes.TrimSpace(out.Bytes()), '\n'))
		return err
	}
	y, err := yaml.JSONToYAML(body)
	if err != nil {
		return fmt.Errorf("pod %s/%s: the sidecar's config is not JSON: %w", pod.Namespace, pod.Name, err)
	}
	_, err = r.streams.Out.Write(y)
	return err
}

// getConfig reads a sidecar's admin GET /config with the purge token.
func getConfig(ctx context.Context, addr, token string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/config", nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{
		// The token goes to the admin address and nowhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxConfigAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading GET /config: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("GET /config: %s: %s", resp.Status, e.Error)
		}
		return nil, fmt.Errorf("GET /config: %s (a sidecar older than the endpoint answers 404)", resp.Status)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("GET /config: not JSON: %.200q", b)
	}
	return b, nil
}
