package ctlcmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/controllerapi"
)

func (c *ctl) weightsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "weights",
		Short: "Where each model's weights are: the nodes whose model store holds them whole",
		Long: `List the models whose weights the nodes' model stores fetch (a weights
block in the catalog) with the nodes that hold them whole, as the driver
reports each node's store in its attributes (driver.llmgw.weights.<KEY>).
Placement prefers those nodes (llmgw ctl explain says so); SPARES is how many
nodes beyond those serving the catalog asks to hold them (warm_spares), and
which the controller picked, where a scale-up would land, with whether each
holds them already or is fetching them.
Models whose engines find their own weights are left out.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var models []controllerapi.ModelView
			raw, err := cl.get(cmd.Context(), "/v1/models", nil, &models)
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			t := newTable("MODEL", "SOURCE", "SIZE", "NODES", "SPARES", "KEY")
			for _, m := range models {
				w := m.Weights
				if w == nil {
					continue
				}
				size := "-"
				if w.Bytes > 0 {
					size = fmt.Sprintf("%.1f GB", float64(w.Bytes)/1e9)
				}
				spares := fmt.Sprint(w.WarmSpares)
				if len(w.Spares) > 0 {
					spares += ": " + strings.Join(w.Spares, ",")
				}
				t.row(m.Name, w.Source, size, dash(strings.Join(w.Nodes, ",")), spares, w.Key)
			}
			return write(cmd.OutOrStdout(), t.bytes())
		},
	}
}
