package controllerapi

import (
	"time"
)

// Pin is a replica count an operator set for an autoscaled model (llmgw
// ctl scale): it overrides the autoscaler's decision until Until.
type Pin struct {
	Model    string    `json:"model"`
	Replicas int       `json:"replicas"`
	Until    time.Time `json:"until"`
	Reason   string    `json:"reason,omitempty"`
	SetAt    time.Time `json:"set_at"`
	SetBy    string    `json:"set_by,omitempty"`
}

// PinAnswer is the answer to PUT /v1/models/{model}/pin: the pin as
// stored, and a warning when the controller's view did not show it in
// time (the pin is set all the same).
type PinAnswer struct {
	Pin
	Warning string `json:"warning,omitempty"`
}

// Active reports whether the pin is in force at now.
func (p Pin) Active(now time.Time) bool { return now.Before(p.Until) }
