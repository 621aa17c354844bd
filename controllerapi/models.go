package controllerapi

// PinRequest is the body of PUT /v1/models/{model}/pin.
type PinRequest struct {
	Replicas int `json:"replicas"`
	// For is how long the pin holds, a Go duration ("90m");
	// controller.DefaultPinFor when empty.
	For    string `json:"for,omitempty"`
	Reason string `json:"reason,omitempty"`
}
