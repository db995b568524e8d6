package kubectlplugin

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tiercache/tiercache/internal/version"
)

// pluginName is the name --version prints, the binary's.
const pluginName = "kubectl-tiercache"

// versionReport is the output of version: kubectl version's shape
// (clientVersion), so that the same jq works on both.
type versionReport struct {
	ClientVersion version.Info `json:"clientVersion"`
}

func (r *runner) versionCommand() *cobra.Command {
	var output *string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The plugin's version",
		Long: `version prints the plugin's own version, the git revision it was built from
and the Go version that built it (kubectl tiercache --version prints the same
on one line). It reaches nothing: no cluster is needed.`,
		Example: `  kubectl tiercache version
  kubectl tiercache version -o json`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			rep := versionReport{ClientVersion: version.Get()}
			if *output == "json" {
				e := json.NewEncoder(r.streams.Out)
				e.SetIndent("", "  ")
				return e.Encode(rep)
			}
			_, err := fmt.Fprintf(r.streams.Out, "Client: %s %s\n", pluginName, rep.ClientVersion)
			return err
		},
	}
	output = outputFlag(cmd)
	return cmd
}
