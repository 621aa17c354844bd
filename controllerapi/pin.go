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

// Active reports whether the pin is in force at now.
func (p Pin) Active(now time.Time) bool { return now.Before(p.Until) }
