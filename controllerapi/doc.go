// Package controllerapi is the controller's HTTP API as its clients see it,
// each name defined once: the JSON shapes of its answers (View, ModelView,
// ReplicaView, ReplicaDetail, NodeView, FacilityView, CatalogView,
// SignalsView, HistoryView, PlanView …), the bodies of its requests
// (PinRequest, HoldRequest, LabelsRequest, ReloadRequest, PlanRequest),
// its error body (APIError), the names of the signals and their sources,
// and a model's pin (Pin), which the controller also stores as it is. The
// controller serves them; llmgw ctl, ctltest, the web console's tests and
// the e2e tests read them, and none of those needs the controller itself
// (docs/controller.md, "HTTP API"). It imports facility (a catalog's
// models, a placement's scope and rejections) and enginemetrics (an
// engine's reading), which the answers carry as they are.
package controllerapi
