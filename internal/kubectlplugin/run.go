package kubectlplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/tiercache/tiercache/internal/version"
)

// Streams are where a command reads and writes.
type Streams = genericiooptions.IOStreams

// Options are RunWith's seams.
type Options struct {
	// Pods reaches the admin ports of a tier's pods. nil: through the API
	// server (pod proxy for metrics, port-forward for purges). Tests set
	// it because their API server has no kubelet to proxy to.
	Pods PodAccess
}

// Run runs the plugin with its command-line arguments (without the
// program name) until the command ends or ctx does.
func Run(ctx context.Context, args []string, streams Streams) error {
	return RunWith(ctx, args, streams, Options{})
}

// RunWith is Run with its seams.
func RunWith(ctx context.Context, args []string, streams Streams, o Options) error {
	root := newRoot(streams, o)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// UsageError is a command line that cannot be run: an unknown command or
// flag, a missing argument, flags that do not go together.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, a ...any) error { return &UsageError{Err: fmt.Errorf(format, a...)} }

// ExitCode is the process exit code for Run's error: 0 for none, 2 for a
// usage error, 1 for anything else (kubectl's convention: 1 for errors).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	if _, ok := errors.AsType[*UsageError](err); ok {
		return 2
	}
	return 1
}

// runner holds what every command shares: the kubeconfig flags, the
// streams and the seams.
type runner struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	opts    Options
}

func newRoot(streams Streams, o Options) *cobra.Command {
	r := &runner{flags: genericclioptions.NewConfigFlags(true), streams: streams, opts: o}
	root := &cobra.Command{
		Use:   "kubectl-tiercache",
		Short: "Purge, inspect and explain Tiercache tiers",
		Long: `kubectl tiercache works with the CacheTiers of a cluster and their sidecars:

  purge    remove cached responses by URL, path prefix, tag, or all of them
  status   the tier's status and, per pod, config version, hit ratio and L2 state
  explain  which rule a URL falls under, its cache key and lifetimes
  version  the plugin's version (also --version)

It takes kubectl's flags (--kubeconfig, --context, -n/--namespace, ...).`,
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl tiercache"},
		// Unknown commands are usage errors (exit code 2), not a cobra
		// error string.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("a command is required: purge, status, explain or version (see --help)")
			}
			return usagef("unknown command %q: use purge, status, explain or version (see --help)", args[0])
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		// --version prints this line (cobra's version flag).
		Version: version.Get().String(),
	}
	root.SetVersionTemplate(pluginName + " {{.Version}}\n")
	// Declared here so that cobra adds no -v: kubectl users read -v as
	// log verbosity.
	root.Flags().Bool("version", false, "print the plugin's version and exit")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	r.flags.AddFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })
	root.AddCommand(r.purgeCommand(), r.statusCommand(), r.explainCommand(), r.analyzeCommand(), r.configCommand(), r.versionCommand())
	return root
}

// exactArgs is cobra.ExactArgs naming the arguments, as a usage error.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s takes %d argument(s), %v (got %d); see --help", cmd.Name(), len(names), names, len(args))
		}
		for i, a := range args {
			if a == "" {
				return usagef("%s: %s must not be empty", cmd.Name(), names[i])
			}
		}
		return nil
	}
}

// maxArgs accepts the named arguments, or fewer, none of them empty.
func maxArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > len(names) {
			return usagef("%s takes at most %d argument(s), %v (got %d); see --help", cmd.Name(), len(names), names, len(args))
		}
		return exactArgs(names[:len(args)]...)(cmd, args)
	}
}

// outputFlag adds -o/--output and returns its value.
func outputFlag(cmd *cobra.Command) *string {
	return cmd.Flags().StringP("output", "o", "", `output format: "" (a table for people) or "json"`)
}

func checkOutput(o string) error {
	if o != "" && o != "json" {
		return usagef(`--output: must be "json" or empty (got %q)`, o)
	}
	return nil
}
