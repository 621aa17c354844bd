package gatewayapi

// The model list.
const (
	// ModelsVariable is the Nomad Variable the controller writes the
	// catalog's models to, with their min and wanted replicas, for the
	// gateways.
	ModelsVariable = "llmgw/models"
	// ModelsItem is the variable's one item: the list as JSON.
	ModelsItem = "models"
)

// Tags and tag prefixes of replica services.
const (
	// ServiceTag marks a replica's API service.
	ServiceTag = "llmgw"
	// DistTag marks a multi-node replica's rendezvous service.
	DistTag = "llmgw-dist"
	// TagModel, TagProfile, TagReplica and TagWeight prefix the tags that
	// carry a replica's model, profile, replica id and routing weight.
	TagModel   = "model="
	TagProfile = "profile="
	TagReplica = "replica="
	TagWeight  = "weight="
	// TagEngine prefixes the tag naming the replica's engine (engine.Name
	// of its profile: "llamacpp", "vllm", …): how a gateway writes a
	// request for one of the model's LoRA adapters (docs/gateway.md).
	TagEngine = "engine="
)
