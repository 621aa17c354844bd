package weights

import "github.com/llmgw/llmgw/weightsapi"

// The sources are weightsapi's, named here too for the store's callers.
type (
	// Source says where a model's weights come from (weightsapi.Source).
	Source = weightsapi.Source
	// Hub is a hub repository at a revision (weightsapi.Hub).
	Hub = weightsapi.Hub
	// URL is one file fetched over plain HTTP(S) (weightsapi.URL).
	URL = weightsapi.URL
)
